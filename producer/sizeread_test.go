package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// SQS swallows requests while a first Send reads the queue's
// MaximumMessageSize: a second Send, with a deadline of its own, returns at
// that deadline, not after the first's read. Before, it waited on a lock
// the first held through its call, whatever its own context said.
func TestSendWaitsForTheSizeReadWithinItsContext(t *testing.T) {
	t.Parallel()
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	direct := localtest.NewSQS(t)
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{})
	proxied := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
	p, err := producer.New(proxied, producer.Config{QueueURL: q.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	firstCtx, cancelFirst := context.WithCancel(context.Background())
	defer cancelFirst()
	first := make(chan error, 1)
	go func() {
		_, err := p.Send(firstCtx, producer.Message{Body: "first"})
		first <- err
	}()
	// The first Send is reading the size once its request is swallowed.
	localtest.Eventually(t, time.Minute, func() bool { return proxy.Stats().Discarded > 0 }, "the first read swallowed")
	second := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := p.Send(ctx, producer.Message{Body: "second"})
		second <- err
	}()
	secondDone := false
	select {
	case err := <-second:
		secondDone = true
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("the second Send: %v; want its own deadline", err)
		}
	case <-time.After(time.Minute):
		t.Error("the second Send still waits a minute past its 1 s deadline: it waits for the first's read")
	}
	select {
	case err := <-first:
		t.Errorf("the first Send returned while SQS swallowed its read: %v", err)
	default:
	}
	cancelFirst()
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	<-first
	if !secondDone {
		<-second
	}
}

// throttledSize is a queue whose GetQueueAttributes is throttled a first
// time, then answered.
type throttledSize struct {
	*sqstest.Fake
	calls atomic.Int32
}

func (f *throttledSize) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if f.calls.Add(1) == 1 {
		return nil, &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}
	}
	return f.Fake.GetQueueAttributes(ctx, in, opts...)
}

// A read of the queue's MaximumMessageSize that was throttled is not taken
// for the queue's answer: a message over the queue's 256 KiB is sent (and
// left to SQS to refuse) while the read waits its minute, then, read again, it is
// refused before sending, naming the queue's limit. Before, the first
// failure set 1 MiB for the Producer's life. A refused read (access
// denied) is not tried again.
func TestThrottledSizeReadIsTriedAgain(t *testing.T) {
	t.Parallel()
	f := &throttledSize{Fake: sqstest.NewFake()}
	url := f.CreateQueue("small", map[string]string{"MaximumMessageSize": "262144"})
	p, err := producer.New(f, producer.Config{QueueURL: url})
	if err != nil {
		t.Fatal(err)
	}
	big := producer.Message{Body: strings.Repeat("x", 300<<10)}
	if _, err := p.Send(context.Background(), big); err != nil && strings.Contains(err.Error(), "over the queue's MaximumMessageSize") {
		t.Fatalf("during the throttling: %v; want it sent (and left to SQS to refuse)", err)
	}
	producer.SetClock(p, func() time.Time { return time.Now().Add(2 * time.Minute) })
	if _, err := p.Send(context.Background(), big); err == nil || !strings.Contains(err.Error(), "over the queue's MaximumMessageSize of 262144") {
		t.Errorf("a minute later: %v; want the queue's limit read and named", err)
	}
	if n := f.calls.Load(); n != 2 {
		t.Errorf("%d reads, want 2", n)
	}
}

// The attributes of Config.Attributes (a trace context) are left out of a
// message they would put over SQS's ten attributes, which is sent with its
// own; a message with room gets them. Before, turning tracing on failed
// the send of every message with ten attributes of its own, and only when
// its caller was traced.
func TestContextAttributesLeftOutWhenNoRoom(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p, err := producer.New(f, producer.Config{QueueURL: url, Attributes: func(context.Context) map[string]sqsworker.MessageAttribute {
		return map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	full := map[string]sqsworker.MessageAttribute{}
	for i := range 10 {
		full[fmt.Sprint("own-", i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	ctx := context.Background()
	if _, err := p.Send(ctx, producer.Message{Body: "full", Attributes: full}); err != nil {
		t.Fatalf("a message with ten attributes of its own: %v", err)
	}
	if _, err := p.Send(ctx, producer.Message{Body: "room", Attributes: map[string]sqsworker.MessageAttribute{"own": {DataType: "String", StringValue: "v"}}}); err != nil {
		t.Fatal(err)
	}
	res, err := p.SendBatch(ctx, []producer.Message{{Body: "full-batch", Attributes: full}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("SendBatch of a message with ten attributes: %v %+v", err, res)
	}
	out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 3 {
		t.Fatalf("%d messages, %v", len(out.Messages), err)
	}
	for _, m := range out.Messages {
		_, traced := m.MessageAttributes["traceparent"]
		switch body := aws.ToString(m.Body); {
		case body == "room" && !traced:
			t.Errorf("%s: no traceparent, want it added", body)
		case body != "room" && (traced || len(m.MessageAttributes) != 10):
			t.Errorf("%s: %d attributes (traceparent %v), want its own ten", body, len(m.MessageAttributes), traced)
		}
	}
}

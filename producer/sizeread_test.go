package producer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

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

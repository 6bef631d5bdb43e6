package lambda_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// slowSends is a fake whose SendMessage, once armed, answers after lag (or
// when its context ends first): SQS slow, not down.
type slowSends struct {
	*sqstest.Fake
	lag   time.Duration
	armed atomic.Bool
}

func (s *slowSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if s.armed.Load() {
		select {
		case <-time.After(s.lag):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Fake.SendMessage(ctx, in, opts...)
}

// Records waiting for a slot when the time to start records ends, all on
// the last receive their redrive policy allows, wait in fresh copies whose
// sends go at once, not one after another: with SQS answering each send in
// 600ms, and 1.5s between the time to start records and the time the moves
// must end, every copy is sent and every original deleted. Before, the
// copies were sent in turn: the third send was cut at the time the moves
// must end and the last two never tried, so three of the five records were
// reported failed, visible again at once, and SQS moved them to the
// dead-letter queue on their next receive, though no handler failed.
func TestWaitingRecordsCopiesSentTogether(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := &slowSends{Fake: newFake("300"), lag: 600 * time.Millisecond}
		var ev events.SQSEvent
		waiting := []string{"wait1", "wait2", "wait3", "wait4", "wait5"}
		for _, b := range waiting {
			ev.Records = append(ev.Records, lastAttempt(t, f.Fake, "orders", b).Records...)
		}
		ev.Records = append(ev.Records, received(t, f.Fake, "orders", "stall").Records...)
		stallFirst(ev)
		release := make(chan struct{})
		h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if m.Body == "stall" { // ignores its context, holding the only slot
				<-release
				return nil
			}
			t.Errorf("record %q ran after the time to start records", m.Body)
			return nil
		})
		f.armed.Store(true)
		// Records start until 8s; the moves end by 9.5s.
		fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := fn(ctx, ev)
		cancel()
		close(release)
		synctest.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if got := failedIDs(resp); len(got) != 1 || got[0] != ev.Records[0].MessageId {
			t.Errorf("failures %v, want the stalled record's alone (%s): every waiting record's copy sent, its original deleted", got, ev.Records[0].MessageId)
		}
		// The records Lambda would make visible again (the failed ones)
		// come back, and SQS moves those on their last receive. The
		// stalled record's handler succeeded once released, after the
		// invocation gave up on it: it deleted its message.
		url := sqstest.QueueURL("orders")
		if v, fl, d := f.Depth(url); v+fl+d != len(waiting) {
			t.Errorf("queue holds %d, want the %d copies (the stalled record, done late, deleted)", v+fl+d, len(waiting))
		}
		if n := f.Calls("SendMessage"); n != len(waiting) {
			t.Errorf("%d sends, want %d", n, len(waiting))
		}
	})
}

// laggingSends is an SQS client whose SendMessage, once armed, waits lag
// before it goes (or gives up when its context ends first): a slow SQS.
type laggingSends struct {
	*sqs.Client
	lag   time.Duration
	armed atomic.Bool
}

func (s *laggingSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if s.armed.Load() {
		select {
		case <-time.After(s.lag):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Client.SendMessage(ctx, in, opts...)
}

// On the emulator (maxReceiveCount 2), with each send taking 1s more and
// 1.5s between the time to start records and the time the moves must end:
// five records waiting for the slot a handler that ignores its context
// holds, on their last receive, all wait in fresh copies; none is reported
// failed and none is dead-lettered on its next receive. Before, two copies
// at most were sent, one after the other, and the rest were dead-lettered.
func TestEmulatorWaitingRecordsCopiesSentTogether(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	client := &laggingSends{Client: sq, lag: time.Second}
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 120 * time.Second})
	release := make(chan struct{})
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "stall" {
			<-release
			return nil
		}
		t.Errorf("record %q ran after the time to start records", m.Body)
		return nil
	})
	defer close(release)
	fn := newHandler(t, h, lambda.Config{Client: client, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	bodies := []string{"wait1", "wait2", "wait3", "wait4", "wait5"}
	localtest.Send(t, sq, q.URL, "", bodies...)
	for _, m := range receiveN(t, sq, q.URL, len(bodies)) { // the first attempts failed
		if _, err := sq.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	last := receiveN(t, sq, q.URL, len(bodies))
	localtest.Send(t, sq, q.URL, "", "stall")
	stall := receiveN(t, sq, q.URL, 1)
	ev := sqstest.SQSEvent(q.ARN, append(stall, last...))
	client.armed.Store(true)
	resp := invokeBy(t, fn, ev, 4*time.Second)
	client.armed.Store(false)
	if got := failedIDs(resp); len(got) != 1 || got[0] != aws.ToString(stall[0].MessageId) {
		t.Errorf("%d failures, want the stalled record alone: every waiting record's copy sent", len(got))
	}
	// What the event source mapping does: delete what was not reported
	// failed; make the failed ones visible again.
	failed := map[string]bool{}
	for _, id := range failedIDs(resp) {
		failed[id] = true
	}
	for _, m := range append(stall, last...) {
		if failed[aws.ToString(m.MessageId)] {
			_, _ = sq.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
		} else {
			_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
		}
	}
	again := localtest.ReceiveAll(t, sq, q.URL, 2*time.Second, 30*time.Second)
	copies := 0
	for _, m := range again {
		if aws.ToString(m.Body) != "stall" {
			copies++
		}
	}
	if copies != len(bodies) {
		t.Errorf("received %d copies, want %d", copies, len(bodies))
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered on the next receive, want none: no handler failed", v+i+d)
	}
}

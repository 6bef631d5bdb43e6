package lambda_test

// Records postponed without an attempt on their last receive, on
// sqstest.Fake and on the emulator.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// receiveAgain waits up to 5s for the record of queue name to be receivable
// again, and returns its receive count ("" if none came).
func receiveAgain(t *testing.T, f *sqstest.Fake, name string) string {
	t.Helper()
	url := sqstest.QueueURL(name)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) > 0 {
			return out.Messages[0].Attributes["ApproximateReceiveCount"]
		}
		if v, _, _ := f.Depth(sqstest.QueueURL(name + "-dlq")); v > 0 {
			return ""
		}
	}
	return ""
}

// While the circuit breaker is open (a dependency is down), a record on the
// last receive the redrive policy allows is postponed in a fresh copy, not
// by its visibility: its next receive would be SQS's move to the
// dead-letter queue, though no handler failed. Before, the record went to
// the dead-letter queue on its next receive.
func TestBreakerPostponementOnLastReceive(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.Body == "down" {
			return sqsworker.Unavailable(errors.New("connection refused"))
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true,
		Breaker: sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Second}})
	down := received(t, f, "orders", "down", "down")
	if resp, err := fn(context.Background(), down); err != nil || len(resp.BatchItemFailures) != 2 {
		t.Fatalf("opening the breaker: %v %v", resp, err)
	}
	dlq := sqstest.QueueURL("orders-dlq")
	url := sqstest.QueueURL("orders")
	for _, r := range down.Records { // out of the way
		if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &r.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	ev := lastAttempt(t, f, "orders", "job")
	if _, err := fn(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if n := receiveAgain(t, f, "orders"); n != "1" {
		t.Errorf("the job came back with receive count %q, want a fresh copy's 1", n)
	}
	if v, _, _ := f.Depth(dlq); v != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v)
	}
}

// So is a record whose handler postpones it (RetryAfter with a nil error:
// not a failure) on that receive.
func TestRetryAfterNilOnLastReceive(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.ReceiveCount >= 3 {
			return sqsworker.RetryAfter(time.Second, nil)
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, DisableHeartbeat: true})
	ev := lastAttempt(t, f, "orders", "job")
	if _, err := fn(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if n := receiveAgain(t, f, "orders"); n != "1" {
		t.Errorf("the job came back with receive count %q, want a fresh copy's 1", n)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v)
	}
}

// The same on the emulator, whose redrive policy moves a message received
// once more than its maxReceiveCount: the job postponed by the open breaker
// on its last receive comes back as a fresh copy, and runs once the
// dependency is back; nothing is dead-lettered.
func TestEmulatorBreakerPostponementOnLastReceive(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 30 * time.Second})
	var down atomic.Bool
	down.Store(true)
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if down.Load() {
			return sqsworker.Unavailable(errors.New("connection refused"))
		}
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: sq, Concurrency: 1, DisableHeartbeat: true,
		Breaker: sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Second}})
	// invoke runs fn on msgs and deletes the records it did not report
	// failed, as the event source mapping does.
	invoke := func(msgs []types.Message) events.SQSEventResponse {
		resp, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, msgs))
		if err != nil {
			t.Fatal(err)
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		for _, m := range msgs {
			if !failed[aws.ToString(m.MessageId)] {
				_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
			}
		}
		return resp
	}
	localtest.Send(t, sq, q.URL, "", "a", "b")
	opening := receiveN(t, sq, q.URL, 2)
	if resp := invoke(opening); len(resp.BatchItemFailures) != 2 {
		t.Fatalf("opening the breaker: %v", resp)
	}
	for _, m := range opening { // out of the way
		if _, err := sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	localtest.Send(t, sq, q.URL, "", "job")
	last := receiveLast(t, sq, q.URL)
	invoke(last) // postponed: the breaker is open
	down.Store(false)
	again := receiveUpTo(t, sq, q.URL, 1, 20*time.Second)
	if len(again) != 1 {
		v, i, d := localtest.Depth(t, sq, q.DLQURL)
		t.Fatalf("the job did not come back (%d in the dead-letter queue)", v+i+d)
	}
	if n := again[0].Attributes["ApproximateReceiveCount"]; n != "1" {
		t.Errorf("came back with receive count %s, want a fresh copy's 1", n)
	}
	time.Sleep(1500 * time.Millisecond) // the probe interval
	invoke(again)
	if ran.Load() != 1 {
		t.Errorf("the job ran %d times, want 1", ran.Load())
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

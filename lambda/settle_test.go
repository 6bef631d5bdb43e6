package lambda_test

// Regression tests of the adapter's settle path, on sqstest.Fake.

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// lastAttempt sends body to queue name and receives it as many times as the
// queue's maxReceiveCount (3), returning the event of the last receive.
func lastAttempt(t *testing.T, f *sqstest.Fake, name, body string) events.SQSEvent {
	t.Helper()
	url := sqstest.QueueURL(name)
	f.Send(url, body)
	for range 2 {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive: %v", err)
		}
		if _, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	ev := sqstest.SQSEvent(sqstest.QueueARN(name), out.Messages)
	if len(ev.Records) != 1 || ev.Records[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Fatalf("event %+v, want one record on its third receive", ev.Records)
	}
	return ev
}

// A record the adapter cuts short itself at the invocation's deadline is
// released at once, not counted as a failed attempt: on its last attempt it
// must not be dead-lettered. There, a fresh copy takes its place (see
// TestDeadlineReleaseOnLastReceive): visible at once, the original deleted.
func TestDeadlineCutRecordIsNotDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	ev := lastAttempt(t, f, "orders", "sleep:1m")
	fn := newHandler(t, jobs, lambda.Config{Client: f, SafetyMargin: time.Second, DisableHeartbeat: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %v, err %v; want the record's copy sent, the original deleted", resp, err)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
		t.Errorf("%d messages dead-lettered, want none", v)
	}
	if v, fl, _ := f.Depth(sqstest.QueueURL("orders")); v != 1 || fl != 0 {
		t.Errorf("%d visible, %d in flight: want the record's copy visible at once", v, fl)
	}
}

// hangingSend is an SQS client whose SendMessage (the dead-letter move)
// hangs until its context ends.
type hangingSend struct{ *sqstest.Fake }

func (h hangingSend) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The dead-letter move is bounded by the invocation's deadline, not by a
// fixed timeout that may outlast it: the function returns its response in
// time.
func TestDeadLetterMoveBoundedByDeadline(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	ev := received(t, f, "orders", "permanent")
	fn := newHandler(t, jobs, lambda.Config{Client: hangingSend{f}, SafetyMargin: time.Second, DisableHeartbeat: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	done := make(chan events.SQSEventResponse, 1)
	go func() {
		resp, _ := fn(ctx, ev)
		done <- resp
	}()
	select {
	case resp := <-done:
		if ctx.Err() != nil {
			t.Error("the function returned after its deadline")
		}
		if len(resp.BatchItemFailures) != 1 {
			t.Errorf("resp %v, want the record reported failed", resp)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the function did not return: the move outlived the invocation")
	}
}

// The queue's attributes are read again once QueueRefresh has passed, so a
// changed redrive policy or visibility timeout is seen without a cold start;
// a throttled re-read keeps the attributes read before.
func TestQueueAttributesRefreshed(t *testing.T) {
	f := newFake("30")
	fn := newHandler(t, jobs, lambda.Config{Client: f, QueueRefresh: 50 * time.Millisecond})
	if _, err := fn(context.Background(), received(t, f, "orders", "ok")); err != nil {
		t.Fatal(err)
	}
	reads := f.Calls(sqstest.OpGetQueueAttributes)
	if _, err := fn(context.Background(), received(t, f, "orders", "ok")); err != nil {
		t.Fatal(err)
	}
	if n := f.Calls(sqstest.OpGetQueueAttributes); n != reads {
		t.Errorf("attributes read again within QueueRefresh")
	}
	time.Sleep(100 * time.Millisecond)
	f.FailNext(sqstest.OpGetQueueAttributes, &smithyThrottle, 1)
	resp, err := fn(context.Background(), received(t, f, "orders", "permanent"))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("throttled re-read: resp %v, err %v; want the record dead-lettered with the attributes read before", resp, err)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 1 {
		t.Errorf("dead-letter queue holds %d, want 1", v)
	}
	if n := f.Calls(sqstest.OpGetQueueAttributes); n <= reads {
		t.Errorf("attributes not read again after QueueRefresh")
	}
}

// A throttled read of the queue's attributes at a cold start does not fail
// the batch: the records run.
func TestColdStartThrottledAttributes(t *testing.T) {
	f := newFake("30")
	f.FailNext(sqstest.OpGetQueueAttributes, &smithyThrottle, 1)
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran.Add(1); return nil })
	fn := newHandler(t, h, lambda.Config{Client: f})
	resp, err := fn(context.Background(), received(t, f, "orders", "a", "b"))
	if err != nil || len(resp.BatchItemFailures) != 0 || ran.Load() != 2 {
		t.Errorf("resp %v, err %v, ran %d; want both records handled", resp, err, ran.Load())
	}
}

var smithyThrottle = smithy.GenericAPIError{Code: "RequestThrottled", Message: "slow down", Fault: smithy.FaultClient}

// The batching window defaults to what the infra constructs put in the
// function's environment; a value that is not a duration is a clear error.
func TestBatchingWindowFromEnvironment(t *testing.T) {
	f := newFake("30")
	t.Setenv(lambda.BatchingWindowEnv, "10s")
	if _, err := lambda.NewHandler(jobs, lambda.Config{Client: f}); err != nil {
		t.Errorf("NewHandler with %s=10s: %v", lambda.BatchingWindowEnv, err)
	}
	t.Setenv(lambda.BatchingWindowEnv, "ten seconds")
	if _, err := lambda.NewHandler(jobs, lambda.Config{Client: f}); err == nil || !strings.Contains(err.Error(), lambda.BatchingWindowEnv) {
		t.Errorf("NewHandler with a bad %s: %v, want an error naming it", lambda.BatchingWindowEnv, err)
	}
}

// A failed record's visibility is kept within SQS's 12 hours from the
// receive, which the event source mapping made up to its batching window
// before the invocation: here 5 minutes before it, with a backoff of 13
// hours on a FIFO queue (which takes no waiting copy). SQS refuses a
// visibility that reaches past 12 hours from the receive, and the record
// would come back after the visibility timeout of its receive (15 minutes)
// rather than its backoff.
func TestFailedRecordVisibilityWithinTwelveHoursOfBatchedReceive(t *testing.T) {
	// The queue's visibility timeout, which the mapping's receive takes,
	// and which the adapter counts from the batching window's start.
	f := newFake("900")
	var shift atomic.Int64 // the Fake's clock, ahead of or behind the real one
	f.Now = func() time.Time { return time.Now().Add(time.Duration(shift.Load())) }
	const window = 5 * time.Minute
	url := sqstest.QueueURL("orders.fifo")
	shift.Store(int64(-window)) // the send and the mapping's receive, a batching window ago
	f.Send(url, "retry-after:13h", func(in *sqs.SendMessageInput) {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("d")
	})
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: 900,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	shift.Store(0)
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
	}
	var failures atomic.Int64
	fn := newHandler(t, jobs, lambda.Config{Client: f, BatchingWindow: window, DisableHeartbeat: true,
		Logger: slog.New(countWarnings{&failures})})
	resp, err := fn(context.Background(), sqstest.SQSEvent(sqstest.QueueARN("orders.fifo"), out.Messages))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("resp %v, err %v; want the record reported failed", resp, err)
	}
	if n := failures.Load(); n != 0 {
		t.Errorf("%d warnings that the failed record's visibility was not set", n)
	}
	shift.Store(int64(time.Hour)) // long past the receive's visibility timeout
	if v, inFlight, _ := f.Depth(url); v != 0 || inFlight != 1 {
		t.Errorf("an hour later: %d visible, %d in flight; want the record hidden for its backoff (up to 12 hours from the receive)", v, inFlight)
	}
}

// countWarnings is a slog.Handler that counts the warnings that a failed
// record's visibility could not be set.
type countWarnings struct{ n *atomic.Int64 }

func (c countWarnings) Enabled(context.Context, slog.Level) bool { return true }
func (c countWarnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn && strings.Contains(r.Message, "visibility failed") {
		c.n.Add(1)
	}
	return nil
}
func (c countWarnings) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c countWarnings) WithGroup(string) slog.Handler      { return c }

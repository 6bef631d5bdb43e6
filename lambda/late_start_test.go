package lambda_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// receiveOne creates a queue of the fake with a visibility timeout of vis
// seconds and a dead-letter queue (maxReceiveCount 1), sends body and
// receives it, and returns the queue's URL, its dead-letter queue's and
// the received messages.
func receiveOne(t *testing.T, f *sqstest.Fake, name string, vis int, bodies ...string) (string, string, []types.Message) {
	t.Helper()
	dlq := f.CreateQueue(name+"-dlq", nil)
	url := f.CreateQueue(name, map[string]string{"VisibilityTimeout": fmt.Sprint(vis),
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, sqstest.QueueARN(name+"-dlq"))})
	for _, b := range bodies {
		f.Send(url, b)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != len(bodies) {
		t.Fatalf("received %d of %d messages: %v", len(out.Messages), len(bodies), err)
	}
	return url, dlq, out.Messages
}

// An invocation that starts 3 s into its record's 4 s visibility timeout
// (Lambda retried the batch while it throttled the function): the record's
// lease counts from when SQS first handed it out, so the heartbeat extends
// it at the invocation's start, and another receive meanwhile finds
// nothing. The handler succeeds in 2.5 s; no copy reaches the dead-letter
// queue. Before, the lease counted from the invocation's start: the record
// was handed out again while its handler ran, and SQS moved it to the
// dead-letter queue (maxReceiveCount 1), a job that was done.
func TestLateInvocationExtendsAtOnce(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url, dlq, msgs := receiveOne(t, f, "late", 4, "job")
	ev := sqstest.SQSEvent(sqstest.QueueARN("late"), msgs)
	time.Sleep(3 * time.Second) // Lambda's retries of a throttled invocation
	other := make(chan int, 1)
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		time.Sleep(1500 * time.Millisecond)
		o, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url}) // another poller
		other <- len(o.Messages)
		time.Sleep(time.Second)
		return nil
	})
	fn, err := lambda.NewHandler(h, lambda.Config{Client: f, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("resp %v, %v; want the record done", failedIDs(resp), err)
	}
	if n := <-other; n != 0 {
		t.Errorf("another receive got %d messages while the handler ran", n)
	}
	if v, fl, d := f.Depth(dlq); v+fl+d != 0 {
		t.Errorf("%d messages in the dead-letter queue", v+fl+d)
	}
}

// A record whose lease has 1 s left by the heartbeat's count when the
// invocation starts (visibility timeout 6 s, batching window 5 s) is
// extended at the start, not an Interval later: its handler, 2 s long,
// succeeds. Before, the first round found the lease run out without an
// extension tried: the handler was cut short and its record reported
// failed, its visibility left alone.
func TestFirstRoundAtTheInvocationsStart(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	_, _, msgs := receiveOne(t, f, "window", 6, "job")
	var cause error
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		select {
		case <-time.After(2 * time.Second):
			return nil
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return ctx.Err()
		}
	})
	fn, err := lambda.NewHandler(h, lambda.Config{Client: f, Logger: quiet, BatchingWindow: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	resp, _ := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("window"), msgs))
	if len(resp.BatchItemFailures) != 0 || cause != nil {
		t.Errorf("failed %v, the handler's context ended with %v; want the record done", failedIDs(resp), cause)
	}
}

// throttledBeat throttles the heartbeat's extensions (to the queue's 2 s)
// and records the receipt handles of the other visibility changes.
type throttledBeat struct {
	lambda.API
	mu      sync.Mutex
	changes []string
}

func (c *throttledBeat) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	for _, e := range in.Entries {
		if e.VisibilityTimeout == 2 {
			return nil, errors.New("ThrottlingException")
		}
	}
	c.mu.Lock()
	for _, e := range in.Entries {
		c.changes = append(c.changes, aws.ToString(e.ReceiptHandle))
	}
	c.mu.Unlock()
	return c.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// A failed record whose lease ran out before the invocation reported it
// (the heartbeat throttled, another record running 5 s) gets no visibility
// change: another consumer may hold the message, which the change would
// show or hide under it. (The report's changes are sent, and retried, only
// while the record's lease holds, as the worker's are.)
func TestNoVisibilityChangeAfterTheLeaseRanOut(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	_, _, msgs := receiveOne(t, f, "stale", 2, "fail", "sleep")
	var failedHandle string
	for _, m := range msgs {
		if aws.ToString(m.Body) == "fail" {
			failedHandle = aws.ToString(m.ReceiptHandle)
		}
	}
	api := &throttledBeat{API: f}
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "fail" {
			return errors.New("boom")
		}
		time.Sleep(5 * time.Second)
		return nil
	})
	fn, err := lambda.NewHandler(h, lambda.Config{Client: api, Logger: quiet,
		Backoff: sqsworker.BackoffFunc(func(int, error) time.Duration { return 7 * time.Second })})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("stale"), msgs)); err != nil {
		t.Fatal(err)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, h := range api.changes {
		if h == failedHandle {
			t.Error("a visibility change was sent for a record whose lease had run out")
		}
	}
}

// hangingBeat swallows every extension (SQS taking the call and never
// answering it).
type hangingBeat struct{ lambda.API }

func (hangingBeat) ChangeMessageVisibilityBatch(ctx context.Context, _ *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// The round at the invocation's start runs beside the handlers, not before
// them: with 300 records due (visibility 60 s, batching window 40 s) and
// SQS swallowing every extension, the handlers run at once and the
// invocation reports before its deadline. Run before the handlers, the
// round held them: none ran, and the invocation ended past its deadline.
func TestStartRoundDoesNotHoldTheHandlers(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("swallowed", map[string]string{"VisibilityTimeout": "60"})
	var msgs []types.Message
	for i := range 300 {
		f.Send(url, fmt.Sprint("job-", i))
	}
	for len(msgs) < 300 {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, out.Messages...)
	}
	fn, err := lambda.NewHandler(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		lambda.Config{Client: hangingBeat{f}, Logger: quiet, BatchingWindow: 40 * time.Second, Concurrency: 50})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
	defer cancel()
	start := time.Now()
	resp, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("swallowed"), msgs))
	if err != nil || len(resp.BatchItemFailures) != 0 || ctx.Err() != nil {
		t.Errorf("after %s: %d failed, %v, deadline passed %v; want every record done before the deadline", time.Since(start), len(resp.BatchItemFailures), err, ctx.Err() != nil)
	}
}

// The same late invocation on the local SQS, for a record on its second
// receive, whose receive time SQS does not give: the heartbeat extends it
// at the invocation's start, and another receive while its handler runs
// finds nothing. Before, its lease was counted from the invocation's
// start: the heartbeat's first extension came after the lease had run
// out, and the other receive got the message while its handler ran.
func TestLateInvocationOfALaterReceive(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 4 * time.Second})
	localtest.Send(t, sq, q.URL, "", "job")
	receive := func() []types.Message {
		var msgs []types.Message
		localtest.Eventually(t, 30*time.Second, func() bool {
			out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 1,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			msgs = out.Messages
			return len(msgs) == 1
		}, "the message was not received")
		return msgs
	}
	first := receive()
	if _, err := sq.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL,
		ReceiptHandle: first[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	msgs := receive()
	if n := msgs[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Fatalf("receive count %s, want 2", n)
	}
	time.Sleep(3 * time.Second) // Lambda's retries of a throttled invocation
	other := make(chan int, 1)
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		time.Sleep(1500 * time.Millisecond)
		o, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL}) // another poller
		if err != nil {
			t.Error(err)
		}
		other <- len(o.Messages)
		time.Sleep(time.Second)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: sq})
	resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, msgs), 30*time.Second)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v; want the record done", failedIDs(resp))
	}
	if n := <-other; n != 0 {
		t.Errorf("another receive got %d messages while the handler ran", n)
	}
}

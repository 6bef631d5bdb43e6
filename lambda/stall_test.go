package lambda_test

// Handlers that ignore their context, on sqstest.Fake.

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// stalling returns a handler that succeeds at once, except on a "stall"
// body, where it ignores its context and waits for the test to end.
func stalling(t *testing.T) sqsworker.Handler {
	release := make(chan struct{})
	t.Cleanup(func() {
		close(release)
		time.Sleep(50 * time.Millisecond) // the stalled handler's late return
	})
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "stall" {
			<-release
		}
		return nil
	})
}

// invokeBy runs fn with a deadline d away, and fails the test unless fn
// returns before it.
func invokeBy(t *testing.T, fn lambda.HandlerFunc, ev events.SQSEvent, d time.Duration) events.SQSEventResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	type result struct {
		resp events.SQSEventResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := fn(ctx, ev)
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		if ctx.Err() != nil {
			t.Fatalf("the function returned after its deadline: Lambda would have timed the invocation out, and retried the whole batch")
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		return r.resp
	case <-time.After(d + 10*time.Second):
		t.Fatal("the function did not return: it waits for a handler that ignores its context")
	}
	return events.SQSEventResponse{}
}

// A handler that ignores its context does not hold the invocation past its
// deadline: Lambda would time it out and retry the whole batch, the records
// whose handlers succeeded included, until SQS dead-letters them. The
// function returns in time; the stalled record is reported failed with its
// visibility left alone (its handler still runs), the records never started
// are reported failed and visible again at once, and the others succeed.
func TestHandlerIgnoringContextDoesNotHoldInvocation(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	fn := newHandler(t, stalling(t), lambda.Config{Client: f, Concurrency: 1, SafetyMargin: time.Second, DisableHeartbeat: true})
	ev := received(t, f, "orders", "ok", "stall", "ok", "ok")
	resp := invokeBy(t, fn, ev, 2*time.Second)
	got := failedIDs(resp)
	slices.Sort(got)
	want := []string{ev.Records[1].MessageId, ev.Records[2].MessageId, ev.Records[3].MessageId}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("failures %v, want the stalled record and the two never started %v", got, want)
	}
	url := sqstest.QueueURL("orders")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	var back []string
	for _, m := range out.Messages {
		back = append(back, aws.ToString(m.MessageId))
	}
	slices.Sort(back)
	if !slices.Equal(back, without(want, ev.Records[1].MessageId)) {
		t.Errorf("visible again: %v, want the two never started, not the stalled one (its handler still runs)", back)
	}
}

// On a FIFO queue, the records of a group behind a stalled one are reported
// failed too, and the other groups go on.
func TestHandlerIgnoringContextFIFO(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	url := sqstest.QueueURL("orders.fifo")
	for i, s := range []struct{ group, body string }{{"a", "ok"}, {"a", "stall"}, {"a", "ok"}, {"b", "ok"}, {"b", "ok"}} {
		f.Send(url, s.body, func(in *sqs.SendMessageInput) {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String(s.group), aws.String(string(rune('0'+i)))
		})
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 5 {
		t.Fatalf("received %d of 5: %v", len(out.Messages), err)
	}
	ev := sqstest.SQSEvent(sqstest.QueueARN("orders.fifo"), out.Messages)
	fn := newHandler(t, stalling(t), lambda.Config{Client: f, SafetyMargin: time.Second, DisableHeartbeat: true})
	resp := invokeBy(t, fn, ev, 2*time.Second)
	if got, want := failedIDs(resp), []string{ev.Records[1].MessageId, ev.Records[2].MessageId}; !slices.Equal(got, want) {
		t.Errorf("failures %v, want group a's stalled record and the one behind it %v", got, want)
	}
}

func without(ids []string, id string) []string {
	var out []string
	for _, x := range ids {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

// An event whose records come from two queues (an event source mapping
// sends one queue's; a function composing handlers may not): the message
// groups of two FIFO queues are not one group because they share a name,
// and the records of a standard queue run on their own, never in a group.
func TestRecordsOfTwoQueues(t *testing.T) {
	f := newFake("30")
	f.CreateQueue("other.fifo", map[string]string{"FifoQueue": "true"})
	var evs []events.SQSMessage
	for _, s := range []struct{ queue, body string }{{"orders.fifo", "fail"}, {"other.fifo", "ok"}, {"orders", "fail"}, {"orders", "ok"}} {
		url := sqstest.QueueURL(s.queue)
		f.Send(url, s.body, func(in *sqs.SendMessageInput) {
			if strings.HasSuffix(s.queue, ".fifo") {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(s.body)
			}
		})
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("received %d of 1 from %s: %v", len(out.Messages), s.queue, err)
		}
		evs = append(evs, sqstest.SQSEvent(sqstest.QueueARN(s.queue), out.Messages).Records...)
	}
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true})
	resp, err := fn(context.Background(), events.SQSEvent{Records: evs})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := failedIDs(resp), []string{evs[0].MessageId, evs[2].MessageId}; !slices.Equal(got, want) {
		t.Errorf("failures %v, want the two failed records only %v", got, want)
	}
}

// A handler that ignored its context and succeeds after the invocation gave
// up on it at its deadline deletes its message: reported failed, Lambda
// will not, and the job, done, would run again when its visibility
// timeout ends (and be dead-lettered on its last receive).
func TestGivenUpRecordThatSucceedsLaterIsDeleted(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	url := sqstest.QueueURL("orders")
	release, returned := make(chan struct{}), make(chan struct{})
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "stall" {
			defer close(returned)
			<-release
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 2, SafetyMargin: time.Second, DisableHeartbeat: true})
	ev := received(t, f, "orders", "stall", "ok")
	resp := invokeBy(t, fn, ev, 2*time.Second)
	if got := failedIDs(resp); len(got) != 1 || got[0] != ev.Records[0].MessageId {
		t.Fatalf("failures %v, want the stalled record's alone", got)
	}
	close(release)
	<-returned
	deadline := time.Now().Add(10 * time.Second)
	for {
		// "ok" is left to Lambda's delete, which the test does not make.
		if _, inFlight, _ := f.Depth(url); inFlight == 1 {
			break
		}
		if time.Now().After(deadline) {
			_, inFlight, _ := f.Depth(url)
			t.Fatalf("%d messages in flight after the stalled handler succeeded, want 1 (\"ok\", for Lambda to delete): the stalled one not deleted", inFlight)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

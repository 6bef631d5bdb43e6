package lambda_test

// Records still waiting for a slot of the invocation's concurrency when the
// time to start records ends, on their last receive, on sqstest.Fake and on
// the emulator.

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
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

// stallThenWaiting is a handler for an invocation run one record at a time:
// "stall" ignores its context and holds the only slot until the test ends,
// so that the records behind it wait for a slot past the time to start
// records, and past the time the function stops waiting for handlers; they
// must not run then. Run with okKey in its context (the copies, once the
// deadline is no longer near), a record succeeds, counted in ran with its
// attempt number in attempts.
func stallThenWaiting(t *testing.T, ran *atomic.Int64, attempts chan<- int) sqsworker.Handler {
	release := make(chan struct{})
	t.Cleanup(func() {
		close(release)
		time.Sleep(50 * time.Millisecond) // the stalled handler's late return
	})
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if ctx.Value(okKey{}) != nil {
			ran.Add(1)
			attempts <- m.ReceiveCount
			return nil
		}
		if m.Body == "stall" {
			<-release
			return nil
		}
		t.Errorf("record %q ran after the time to start records", m.Body)
		return nil
	})
}

// stallFirst orders the event's records so that "stall" runs first.
func stallFirst(ev events.SQSEvent) {
	sort.SliceStable(ev.Records, func(i, k int) bool { return ev.Records[i].Body == "stall" && ev.Records[k].Body != "stall" })
}

// Records waiting for a slot (Concurrency 1, the slot held by a handler
// that ignores its context) when the time to start records ends, on the
// last receive the redrive policy allows (3), are released through the
// executor as those reaching their turn too late are: each waits in a fresh
// copy carrying one earlier attempt (of the two receives before, at most
// maxReceiveCount-2: SQS does not tell attempts from waits), and its
// original is deleted at once; run again, each runs once, as its second
// attempt. Nothing is
// dead-lettered. Before, they waited for a slot until the function stopped
// waiting for handlers, and were then reported failed and visible again at
// once: SQS moved them to the dead-letter queue on their next receive,
// though no handler failed.
func TestWaitingRecordsReleasedOnLastReceive(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	url := sqstest.QueueURL("orders")
	var ev events.SQSEvent
	for _, b := range []string{"wait1", "wait2", "wait3"} {
		ev.Records = append(ev.Records, lastAttempt(t, f, "orders", b).Records...)
	}
	ev.Records = append(ev.Records, received(t, f, "orders", "stall").Records...)
	stallFirst(ev)
	var ran atomic.Int64
	attempts := make(chan int, 3)
	fn := newHandler(t, stallThenWaiting(t, &ran, attempts), lambda.Config{Client: f, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	resp := invokeBy(t, fn, ev, 4*time.Second)
	if got := failedIDs(resp); len(got) != 1 || got[0] != ev.Records[0].MessageId {
		t.Errorf("failures %v, want the stalled record alone %s: the waiting records' copies were sent and the originals deleted", got, ev.Records[0].MessageId)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
		t.Errorf("%d messages dead-lettered on the next receive, want none: no handler failed", v)
	}
	if len(out.Messages) != 3 {
		t.Fatalf("received %d copies, want 3", len(out.Messages))
	}
	for _, m := range out.Messages {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
			t.Errorf("copy of %q: receive count %s, want a fresh copy's 1", aws.ToString(m.Body), n)
		}
		if p := aws.ToString(m.MessageAttributes[sqsworker.AttrPriorAttempts].StringValue); p != "1" {
			t.Errorf("copy of %q: prior attempts %q, want 1 (the release counts none, and a waiting copy at most maxReceiveCount-2 of the earlier receives)", aws.ToString(m.Body), p)
		}
	}
	resp, err = fn(context.WithValue(context.Background(), okKey{}, true), sqstest.SQSEvent(sqstest.QueueARN("orders"), out.Messages))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the copies: resp %v, err %v", resp, err)
	}
	close(attempts)
	for a := range attempts {
		if a != 2 {
			t.Errorf("a copy ran as attempt %d, want 2", a)
		}
	}
	if ran.Load() != 3 {
		t.Errorf("%d copies ran, want 3", ran.Load())
	}
	if v, fl, d := f.Depth(url); v+fl+d != 4 {
		t.Errorf("queue holds %d, want the stalled record and the 3 copies", v+fl+d)
	}
}

// On the emulator (maxReceiveCount 2): records waiting for the slot a
// handler that ignores its context holds, on their second receive, come
// back as fresh copies and run once each, as second attempts; nothing is
// dead-lettered. Before, they were made visible at the function's last
// moment and dead-lettered on their next receive.
func TestEmulatorWaitingRecordsReleasedOnLastReceive(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 120 * time.Second})
	var ran atomic.Int64
	attempts := make(chan int, 3)
	fn := newHandler(t, stallThenWaiting(t, &ran, attempts), lambda.Config{Client: sq, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	localtest.Send(t, sq, q.URL, "", "wait1", "wait2", "wait3")
	for _, m := range receiveN(t, sq, q.URL, 3) { // the first attempts failed
		if _, err := sq.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	last := receiveN(t, sq, q.URL, 3)
	for _, m := range last {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Fatalf("receive count %s, want 2", n)
		}
	}
	localtest.Send(t, sq, q.URL, "", "stall")
	stall := receiveN(t, sq, q.URL, 1)
	ev := sqstest.SQSEvent(q.ARN, append(stall, last...))
	resp := invokeBy(t, fn, ev, 4*time.Second)
	if got := failedIDs(resp); len(got) != 1 || got[0] != aws.ToString(stall[0].MessageId) {
		t.Errorf("failures %v, want the stalled record alone", got)
	}
	// What the event source mapping does: delete what was not reported
	// failed (the originals are gone already).
	for _, m := range last {
		_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
	}
	again := localtest.ReceiveAll(t, sq, q.URL, 2*time.Second, 30*time.Second)
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered on the next receive, want none: no handler failed", v+i+d)
	}
	if len(again) != 3 {
		t.Fatalf("received %d copies, want 3", len(again))
	}
	for _, m := range again {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
			t.Errorf("copy of %q: receive count %s, want a fresh copy's 1", aws.ToString(m.Body), n)
		}
		if p := aws.ToString(m.MessageAttributes[sqsworker.AttrPriorAttempts].StringValue); p != "1" {
			t.Errorf("copy of %q: prior attempts %q, want 1", aws.ToString(m.Body), p)
		}
	}
	resp, err := fn(context.WithValue(context.Background(), okKey{}, true), sqstest.SQSEvent(q.ARN, again))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the copies: resp %v, err %v", resp, err)
	}
	for _, m := range append(again, stall...) {
		_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
	}
	close(attempts)
	for a := range attempts {
		if a != 2 {
			t.Errorf("a copy ran as attempt %d, want 2", a)
		}
	}
	if ran.Load() != 3 {
		t.Errorf("%d copies ran, want 3", ran.Load())
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

// The example function under the Lambda Runtime Interface Emulator (a 4s
// timeout, the default Concurrency of 10): ten handlers that ignore their
// context hold every slot, so that an eleventh record (an event source
// mapping sends more than ten with a batching window), on its last receive
// (maxReceiveCount 2), waits for a slot until the time to start records
// ends. It is not reported failed but waits in a fresh copy, sent and its
// original deleted before the function answers; nothing is dead-lettered.
// Before, it was reported failed, visible at once, and dead-lettered by
// SQS on its next receive.
func TestRealInvocationWaitingRecordReleasedOnLastReceive(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg), "AWS_LAMBDA_FUNCTION_TIMEOUT=4")
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 120 * time.Second})
	localtest.Send(t, sq, q.URL, "", "ok")
	last := receiveLast(t, sq, q.URL)
	stalls := make([]string, 10)
	for i := range stalls {
		stalls[i] = "stall:1m"
	}
	localtest.Send(t, sq, q.URL, "", stalls...)
	stalled := receiveN(t, sq, q.URL, 10)
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, append(stalled, last...)))
	var resp events.SQSEventResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
		t.Fatalf("status %d, body %s", status, body)
	}
	for _, f := range resp.BatchItemFailures {
		if f.ItemIdentifier == aws.ToString(last[0].MessageId) {
			t.Errorf("the waiting record reported failed, want its copy sent and the original deleted")
		}
	}
	if len(resp.BatchItemFailures) != 10 {
		t.Errorf("%d failures, want the 10 stalled records", len(resp.BatchItemFailures))
	}
	again := receiveN(t, sq, q.URL, 1)
	if aws.ToString(again[0].Body) != "ok" || again[0].Attributes["ApproximateReceiveCount"] != "1" {
		t.Errorf("came back: %q with receive count %s, want the waiting record's fresh copy", aws.ToString(again[0].Body), again[0].Attributes["ApproximateReceiveCount"])
	}
	if p := aws.ToString(again[0].MessageAttributes[sqsworker.AttrPriorAttempts].StringValue); p != "1" {
		t.Errorf("prior attempts %q, want 1", p)
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
}

// On a FIFO queue (Concurrency 1, group a's first record holding the only
// slot, ignoring its context), the message groups still waiting for a slot
// when the time to start records ends are released then, in order: none of
// their records runs, each is reported failed and visible again at once.
func TestWaitingGroupsReleasedFIFO(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	url := sqstest.QueueURL("orders.fifo")
	for i, s := range []struct{ group, body string }{{"a", "stall"}, {"a", "a2"}, {"b", "b1"}, {"b", "b2"}, {"c", "c1"}} {
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
	var ran atomic.Int64
	fn := newHandler(t, stallThenWaiting(t, &ran, nil), lambda.Config{Client: f, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	resp := invokeBy(t, fn, ev, 4*time.Second)
	if got := failedIDs(resp); len(got) != 5 {
		t.Errorf("failures %v, want all 5: the stalled one, the one behind it, and the two groups released", got)
	}
	again, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, m := range again.Messages {
		bodies = append(bodies, aws.ToString(m.Body))
	}
	sort.Strings(bodies)
	if want := []string{"b1", "b2", "c1"}; !slices.Equal(bodies, want) {
		t.Errorf("visible again: %v, want groups b and c %v (group a waits behind its stalled record)", bodies, want)
	}
}

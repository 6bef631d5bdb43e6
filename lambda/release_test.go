package lambda_test

// Records released without an attempt (cut short by the invocation's
// deadline, or not started before it) on the last receive their redrive
// policy allows, on sqstest.Fake and on the emulator.

import (
	"context"
	"encoding/json"
	"errors"
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

// cutThenLate is a handler for two records run one at a time: "slow" waits
// for its context (the invocation's deadline cuts it short), and "late",
// whose turn comes after the time to start records, must not run; any
// other body (the copies, once the deadline is no longer near) succeeds,
// counted in ran with the attempt numbers in attempts.
func cutThenLate(t *testing.T, ran *atomic.Int64, attempts chan<- int) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if ctx.Value(okKey{}) != nil {
			ran.Add(1)
			attempts <- m.ReceiveCount
			return nil
		}
		switch m.Body {
		case "slow":
			<-ctx.Done()
			return ctx.Err()
		case "late":
			t.Errorf("record %q ran after the time to start records", m.Body)
		}
		return nil
	})
}

type okKey struct{}

// sortByBody orders the event's records by body, descending: "slow" before
// "late".
func sortByBody(ev events.SQSEvent) {
	sort.Slice(ev.Records, func(i, k int) bool { return ev.Records[i].Body > ev.Records[k].Body })
}

// A record cut short by the invocation's deadline, and one not started
// before it, on the last receive the redrive policy allows (3) are not left
// to SQS's move to the dead-letter queue on their next receive, though no
// handler failed: each waits in a fresh copy (receive count 1) carrying
// one earlier attempt (of the two receives before, at most
// maxReceiveCount-2), and its original is deleted at once. Run again, each
// runs as its second attempt, once. Before, both were released by
// their visibility and dead-lettered on their next receive.
func TestDeadlineReleaseOnLastReceive(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	url := sqstest.QueueURL("orders")
	ev := lastAttempt(t, f, "orders", "slow")
	ev.Records = append(ev.Records, lastAttempt(t, f, "orders", "late").Records...)
	sortByBody(ev)
	var ran atomic.Int64
	attempts := make(chan int, 2)
	fn := newHandler(t, cutThenLate(t, &ran, attempts), lambda.Config{Client: f, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none: both records' copies were sent and the originals deleted", failedIDs(resp))
	}
	if v, fl, d := f.Depth(url); v+fl+d != 2 {
		t.Errorf("queue holds %d, want the 2 copies", v+fl+d)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("received %d copies, %v; want 2", len(out.Messages), err)
	}
	for _, m := range out.Messages {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
			t.Errorf("copy of %q: receive count %s, want a fresh copy's 1", aws.ToString(m.Body), n)
		}
		if p := aws.ToString(m.MessageAttributes[sqsworker.AttrPriorAttempts].StringValue); p != "1" {
			t.Errorf("copy of %q: prior attempts %q, want 1 (the release counts none, and a waiting copy at most maxReceiveCount-2 of the earlier receives)", aws.ToString(m.Body), p)
		}
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v)
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
	if ran.Load() != 2 {
		t.Errorf("%d copies ran, want 2", ran.Load())
	}
}

// refusingSend is an SQS client whose SendMessage is refused.
type refusingSend struct{ *sqstest.Fake }

func (r refusingSend) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return nil, errors.New("connection refused")
}

// Should the copy's send fail, the record is released by its visibility, as
// before: reported failed, visible again at once, not lost.
func TestDeadlineReleaseCopyRefused(t *testing.T) {
	f := newFake("300")
	ev := lastAttempt(t, f, "orders", "late")
	var ran atomic.Int64
	attempts := make(chan int, 2)
	fn := newHandler(t, cutThenLate(t, &ran, attempts), lambda.Config{Client: refusingSend{f}, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	ctx, cancel := context.WithTimeout(context.Background(), 1*time.Second) // within the margin: nothing starts
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("resp %v, err %v; want the record reported failed", resp, err)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders")); v != 1 {
		t.Errorf("%d visible, want the record visible again at once", v)
	}
}

// On the emulator (maxReceiveCount 2): a record cut short by the deadline
// and one not started before it, on their second receive, come back as
// fresh copies and run as second attempts; nothing is dead-lettered. Before,
// both went to the dead-letter queue.
func TestEmulatorDeadlineReleaseOnLastReceive(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 30 * time.Second})
	var ran atomic.Int64
	attempts := make(chan int, 2)
	fn := newHandler(t, cutThenLate(t, &ran, attempts), lambda.Config{Client: sq, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	localtest.Send(t, sq, q.URL, "", "slow", "late")
	first := receiveN(t, sq, q.URL, 2)
	for _, m := range first { // the first attempts failed
		if _, err := sq.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	last := receiveN(t, sq, q.URL, 2)
	ev := sqstest.SQSEvent(q.ARN, last)
	sortByBody(ev)
	for _, r := range ev.Records {
		if n := r.Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Fatalf("receive count %s, want 2", n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	// What the event source mapping does: delete what was not reported
	// failed (the originals are gone already).
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, m := range last {
		if !failed[aws.ToString(m.MessageId)] {
			_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
		}
	}
	again := receiveN(t, sq, q.URL, 2)
	for _, m := range again {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
			t.Errorf("came back with receive count %s, want a fresh copy's 1", n)
		}
	}
	resp, err = fn(context.WithValue(context.Background(), okKey{}, true), sqstest.SQSEvent(q.ARN, again))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the copies: resp %v, err %v", resp, err)
	}
	for _, m := range again {
		_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
	}
	close(attempts)
	for a := range attempts {
		if a != 2 {
			t.Errorf("a copy ran as attempt %d, want 2", a)
		}
	}
	if ran.Load() != 2 {
		t.Errorf("%d copies ran, want 2", ran.Load())
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

// The example function under the Lambda Runtime Interface Emulator (a 20s
// timeout): a record cut short at the invocation's deadline on its last
// receive (maxReceiveCount 2) is not reported failed but waits in a fresh
// copy, sent and its original deleted before the function answers; nothing
// is dead-lettered.
func TestRealInvocationDeadlineReleaseOnLastReceive(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg), "AWS_LAMBDA_FUNCTION_TIMEOUT=20")
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 60 * time.Second})
	localtest.Send(t, sq, q.URL, "", "sleep:5m")
	last := receiveLast(t, sq, q.URL)
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, last))
	var resp events.SQSEventResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
		t.Fatalf("status %d, body %s", status, body)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none: the record's copy was sent and the original deleted", resp.BatchItemFailures)
	}
	again := receiveN(t, sq, q.URL, 1)
	if n := again[0].Attributes["ApproximateReceiveCount"]; n != "1" {
		t.Errorf("came back with receive count %s, want a fresh copy's 1", n)
	}
	if p := aws.ToString(again[0].MessageAttributes[sqsworker.AttrPriorAttempts].StringValue); p != "1" {
		t.Errorf("prior attempts %q, want 1", p)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 1 {
		t.Errorf("the queue holds %d, want the copy alone", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
}

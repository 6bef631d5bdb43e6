package lambda_test

// Records whose queue is unknown (an eventSourceARN Config.QueueURL cannot
// map), on sqstest.Fake and on the emulator.

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
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
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// logBuffer is a log destination safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// unknownQueue gives the event's records an eventSourceARN that
// QueueURLFromARN cannot map.
func unknownQueue(ev events.SQSEvent) events.SQSEvent {
	for i := range ev.Records {
		ev.Records[i].EventSourceARN = "arn:aws:sqs:eu-west-1:orders"
	}
	return ev
}

// checkUnknownLog asserts that an error log names the problem (the ARN
// that could not be mapped) and its fix.
func checkUnknownLog(t *testing.T, logs string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "queue unknown") &&
			strings.Contains(line, "Config.QueueURL") && strings.Contains(line, "arn:aws:sqs:eu-west-1:orders") {
			return
		}
	}
	t.Errorf("no error log names the unknown queue's ARN and Config.QueueURL, its fix:\n%s", logs)
}

// A record whose queue is unknown is never dead-lettered by the function,
// even with Config.DeadLetterQueueURL and MaxReceiveCount set: its failure
// metadata would name no source queue, and a redrive could not send it
// back. A Permanent failure, and a failure on the last attempt, are
// reported failed with the record's visibility left alone (the redrive
// policy, which SQS applies, decides what becomes of it), and an error log
// names the problem and its fix. Before, both were copied to the
// dead-letter queue with an empty source queue and reported handled.
func TestUnknownQueueRecordNotDeadLettered(t *testing.T) {
	f := newFake("300")
	var logs logBuffer
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true,
		DeadLetterQueueURL: sqstest.QueueURL("orders-dlq"), MaxReceiveCount: 3,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ev := received(t, f, "orders", "permanent")
	ev.Records = append(ev.Records, lastAttempt(t, f, "orders", "fail").Records...)
	ev = unknownQueue(ev)
	resp, err := fn(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 2 {
		t.Errorf("failures %v, want both records", got)
	}
	if v, fl, d := f.Depth(sqstest.QueueURL("orders-dlq")); v+fl+d != 0 {
		t.Errorf("%d messages dead-lettered by the function, want none", v+fl+d)
	}
	if v, fl, _ := f.Depth(sqstest.QueueURL("orders")); v != 0 || fl != 2 {
		t.Errorf("%d visible, %d in flight; want both records' visibility left alone", v, fl)
	}
	if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch) + f.Calls(sqstest.OpChangeMessageVisibility); n != 2 { // lastAttempt's two
		t.Errorf("%d visibility changes, want the two lastAttempt made", n)
	}
	checkUnknownLog(t, logs.String())
}

// On the emulator: a Permanent failure of a record whose queue is unknown
// is reported failed, left in flight, not dead-lettered.
func TestEmulatorUnknownQueueRecordNotDeadLettered(t *testing.T) {
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 60 * time.Second})
	var logs logBuffer
	fn := newHandler(t, jobs, lambda.Config{Client: sq, DisableHeartbeat: true, DeadLetterQueueURL: q.DLQURL,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	localtest.Send(t, sq, q.URL, "", "permanent")
	msgs := receiveN(t, sq, q.URL, 1)
	resp, err := fn(context.Background(), unknownQueue(sqstest.SQSEvent(q.ARN, msgs)))
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 1 {
		t.Errorf("failures %v, want the record", got)
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered by the function, want none", v+i+d)
	}
	if v, i, _ := localtest.Depth(t, sq, q.URL); v != 0 || i != 1 {
		t.Errorf("%d visible, %d in flight; want the record's visibility left alone", v, i)
	}
	checkUnknownLog(t, logs.String())
	_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: msgs[0].ReceiptHandle})
}

// A Config.QueueURL that returns an empty URL without an error leaves the
// record's queue unknown too: not read, not dead-lettered, its visibility
// left alone. Before, the adapter went on with an empty queue URL: a read
// of its attributes that failed, and visibility changes and deletes sent
// to no queue.
func TestEmptyQueueURLIsUnknown(t *testing.T) {
	f := newFake("300")
	var logs logBuffer
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true,
		DeadLetterQueueURL: sqstest.QueueURL("orders-dlq"),
		QueueURL:           func(string) (string, error) { return "", nil },
		Logger:             slog.New(slog.NewTextHandler(&logs, nil))})
	ev := received(t, f, "orders", "permanent", "fail")
	ev.Records[0].EventSourceARN = "arn:aws:sqs:eu-west-1:orders"
	ev.Records[1].EventSourceARN = "arn:aws:sqs:eu-west-1:orders"
	reads := f.Calls(sqstest.OpGetQueueAttributes)
	resp, err := fn(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 2 {
		t.Errorf("failures %v, want both records", got)
	}
	if n := f.Calls(sqstest.OpGetQueueAttributes) - reads; n != 0 {
		t.Errorf("%d reads of an empty queue URL's attributes, want none", n)
	}
	if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 0 {
		t.Errorf("%d visibility changes, want none", n)
	}
	if v, fl, d := f.Depth(sqstest.QueueURL("orders-dlq")); v+fl+d != 0 {
		t.Errorf("%d messages dead-lettered by the function, want none", v+fl+d)
	}
	checkUnknownLog(t, logs.String())
}

// On the emulator: a record whose eventSourceARN Config.QueueURL cannot map,
// but which names a queue the function can find by its name and account
// (GetQueueUrl), is handled as a record of that queue: held back on its
// last receive for a job an hour ahead, it waits in a fresh delayed copy.
// Before, its queue was unknown: the record was reported failed with its
// visibility left alone, and SQS moved it to the dead-letter queue on its
// next receive, though its time had not come.
func TestEmulatorUnmappedQueueFoundByName(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 30 * time.Second})
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran.Add(1); return nil })
	var logs logBuffer
	fn := newHandler(t, h, lambda.Config{Client: sq, DisableHeartbeat: true,
		QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil))})
	if _, err := sq.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("later"),
		MessageAttributes: notBefore(time.Now().Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	resp, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, receiveLast(t, sq, q.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 0 {
		t.Errorf("failures %v, want none: a copy waits in the record's place", got)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v != 0 || i != 0 || d != 1 {
		t.Errorf("%d visible, %d in flight, %d delayed; want the record deleted and its delayed copy", v, i, d)
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none", v+i+d)
	}
	if ran.Load() != 0 {
		t.Errorf("the handler ran %d times before the job's time", ran.Load())
	}
	if !strings.Contains(logs.String(), "GetQueueUrl") {
		t.Errorf("no log says the queue was found by GetQueueUrl:\n%s", logs.String())
	}
}

// A Config.QueueURL that maps a record's eventSourceARN to another queue
// (an operator's mistake) leaves the record's queue unknown: the function
// reads that queue's ARN with its attributes, sees it is not the record's,
// and moves, copies or deletes nothing in its name. Before, a Permanent
// failure of a "payments" record was copied to the other queue's
// dead-letter queue, with that queue named as its source (a redrive would
// send it to the wrong consumer), and reported handled, so that Lambda
// deleted it from its own queue.
func TestQueueURLOfAnotherQueueIsUnknown(t *testing.T) {
	f := newFake("300")
	f.CreateQueue("payments", nil)
	var logs logBuffer
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true,
		QueueURL: func(string) (string, error) { return sqstest.QueueURL("orders"), nil },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil))})
	url := sqstest.QueueURL("payments")
	f.Send(url, "permanent")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	resp, err := fn(context.Background(), sqstest.SQSEvent(sqstest.QueueARN("payments"), out.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 1 {
		t.Errorf("failures %v, want the record, left to its own queue's redrive policy", got)
	}
	if v, fl, d := f.Depth(sqstest.QueueURL("orders-dlq")); v+fl+d != 0 {
		t.Errorf("%d messages in the other queue's dead-letter queue, want none", v+fl+d)
	}
	if !strings.Contains(logs.String(), sqstest.QueueARN("orders")) {
		t.Errorf("no log names the queue Config.QueueURL mapped the record to:\n%s", logs.String())
	}
}

// lookups counts the adapter's GetQueueUrl calls.
type lookups struct {
	*sqs.Client
	n atomic.Int64
}

func (l *lookups) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	l.n.Add(1)
	return l.Client.GetQueueUrl(ctx, in, opts...)
}

// On the emulator: the records of an eventSourceARN that Config.QueueURL
// cannot map, naming a queue that does not exist, cost one GetQueueUrl for
// the execution environment's invocations of the next minute, not one each:
// SQS's answer that there is no such queue is kept. The records are still
// reported failed, left in flight: neither lost nor deleted. Before, every
// invocation asked again (4 lookups for 4 invocations).
func TestEmulatorMissingQueueLookedUpOnce(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 60 * time.Second})
	client := &lookups{Client: sq}
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		ran.Add(1)
		return fmt.Errorf("job failed")
	})
	var logs logBuffer
	fn := newHandler(t, h, lambda.Config{Client: client, DisableHeartbeat: true,
		QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) },
		Logger:   slog.New(slog.NewTextHandler(&logs, nil))})
	missing := q.ARN + "-missing"
	const invocations = 4
	for i := range invocations {
		localtest.Send(t, sq, q.URL, "", fmt.Sprint("job ", i))
		msgs := receiveN(t, sq, q.URL, 1)
		resp, err := fn(context.Background(), sqstest.SQSEvent(missing, msgs))
		if err != nil {
			t.Fatal(err)
		}
		if got := failedIDs(resp); len(got) != 1 || got[0] != aws.ToString(msgs[0].MessageId) {
			t.Errorf("invocation %d: failures %v, want its record", i, got)
		}
	}
	if n := client.n.Load(); n != 1 {
		t.Errorf("%d GetQueueUrl calls for %d invocations, want 1", n, invocations)
	}
	if ran.Load() != invocations {
		t.Errorf("%d records ran, want %d", ran.Load(), invocations)
	}
	if v, i, _ := localtest.Depth(t, sq, q.URL); v != 0 || i != invocations {
		t.Errorf("%d visible, %d in flight; want every record in flight, its visibility left alone", v, i)
	}
	if !strings.Contains(logs.String(), "queue unknown") {
		t.Errorf("no log says the records' queue is unknown:\n%s", logs.String())
	}
}

// SQS's answer that the queue an unmapped eventSourceARN names does not
// exist is kept a minute, not for the execution environment's life: a queue
// created later is found once the minute has passed, and its records run
// as its own. Within the minute no invocation asks again.
func TestMissingQueueAnswerRunsOut(t *testing.T) { // not parallel: sets the lookup clock
	clock := sqstest.NewClock(time.Now())
	lambda.SetLookupClock(t, clock.Now)
	f := newFake("300")
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		ran.Add(1)
		if m.Body == "fail" {
			return fmt.Errorf("job failed")
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, DisableHeartbeat: true,
		QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) }})
	later := sqstest.QueueARN("later")
	invoke := func(ev events.SQSEvent) []string {
		t.Helper()
		resp, err := fn(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		return failedIDs(resp)
	}
	ev := received(t, f, "orders", "fail")
	ev.Records[0].EventSourceARN = later
	if got := invoke(ev); len(got) != 1 {
		t.Fatalf("failures %v, want the record of the missing queue", got)
	}
	f.CreateQueue("later", nil)
	clock.Advance(30 * time.Second)
	ev = received(t, f, "orders", "fail")
	ev.Records[0].EventSourceARN = later
	if got := invoke(ev); len(got) != 1 {
		t.Fatalf("failures %v, want the record, its queue still unknown within the minute", got)
	}
	if n := f.Calls(sqstest.OpGetQueueUrl); n != 1 {
		t.Errorf("%d GetQueueUrl calls within the minute, want 1", n)
	}
	if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 0 {
		t.Errorf("%d visibility changes, want none: the records of an unknown queue are left alone", n)
	}
	clock.Advance(31 * time.Second)
	if got := invoke(received(t, f, "later", "fail")); len(got) != 1 {
		t.Errorf("failures %v, want the record of the queue created since", got)
	}
	if n := f.Calls(sqstest.OpGetQueueUrl); n != 2 {
		t.Errorf("%d GetQueueUrl calls, want 2: asked again once the minute passed", n)
	}
	// Its queue known, the failed record is retried with its backoff.
	if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 1 {
		t.Errorf("%d visibility changes, want the failed record's of the queue found", n)
	}
	if ran.Load() != 3 {
		t.Errorf("%d records ran, want 3", ran.Load())
	}
}

// A failure of GetQueueUrl that says nothing of the queue (throttling, a
// server fault, the network) is not kept: the next invocation asks again
// and finds the queue.
func TestTransientLookupFailureNotKept(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	f.CreateQueue("plain", nil) // no redrive policy: no lookup of a dead-letter queue
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true,
		QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) }})
	f.FailNext(sqstest.OpGetQueueUrl, &smithy.GenericAPIError{Code: "ThrottlingException", Fault: smithy.FaultServer}, 1)
	resp, err := fn(context.Background(), received(t, f, "plain", "fail"))
	if err != nil || len(resp.BatchItemFailures) != 1 || f.Calls(sqstest.OpChangeMessageVisibilityBatch) != 0 {
		t.Fatalf("throttled lookup: %v %v, %d visibility changes; want the record failed, left alone (its queue unknown)",
			failedIDs(resp), err, f.Calls(sqstest.OpChangeMessageVisibilityBatch))
	}
	resp, err = fn(context.Background(), received(t, f, "plain", "fail"))
	if err != nil {
		t.Fatal(err)
	}
	if n := f.Calls(sqstest.OpGetQueueUrl); n != 2 {
		t.Errorf("%d GetQueueUrl calls, want 2: the throttled lookup asked again", n)
	}
	// Its queue known, the failed record is retried with backoff: its
	// visibility changed.
	if got := failedIDs(resp); len(got) != 1 || f.Calls(sqstest.OpChangeMessageVisibilityBatch) == 0 {
		t.Errorf("failures %v, %d visibility changes: want the record of the queue found retried with its backoff", got, f.Calls(sqstest.OpChangeMessageVisibilityBatch))
	}
}

// The answers kept are bounded: with as many kept as the bound allows, a
// new missing queue's answer is not kept (its records ask again), until
// answers run out and make room.
func TestLookupsKeptBounded(t *testing.T) { // not parallel: sets the lookup clock
	clock := sqstest.NewClock(time.Now())
	lambda.SetLookupClock(t, clock.Now)
	f := sqstest.NewFake()
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true,
		QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) }})
	const bound = 100
	event := func(from, to int) events.SQSEvent {
		var ev events.SQSEvent
		for i := from; i < to; i++ {
			m := types.Message{MessageId: aws.String(fmt.Sprint("m", i)), ReceiptHandle: aws.String(fmt.Sprint("r", i)), Body: aws.String("fail"),
				Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": fmt.Sprint(time.Now().UnixMilli())}}
			ev.Records = append(ev.Records, sqstest.SQSEvent(sqstest.QueueARN(fmt.Sprint("missing-", i)), []types.Message{m}).Records...)
		}
		return ev
	}
	invoke := func(ev events.SQSEvent) {
		t.Helper()
		resp, err := fn(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != len(ev.Records) {
			t.Fatalf("failures %v, %v; want every record", failedIDs(resp), err)
		}
	}
	invoke(event(0, bound+1))
	invoke(event(0, bound+1))
	if n := f.Calls(sqstest.OpGetQueueUrl); n != bound+2 {
		t.Errorf("%d GetQueueUrl calls, want %d: the answers kept up to the bound, the one beyond asked again", n, bound+2)
	}
	clock.Advance(61 * time.Second)
	invoke(event(bound, bound+1))
	invoke(event(bound, bound+1))
	if n := f.Calls(sqstest.OpGetQueueUrl); n != bound+3 {
		t.Errorf("%d GetQueueUrl calls, want %d: the answers run out made room for the new one", n, bound+3)
	}
}

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

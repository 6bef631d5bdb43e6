package lambda_test

// Records whose copy was sent (to the dead-letter queue, or to wait) are
// deleted at once, not at the end of the invocation.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A record moved to the dead-letter queue is deleted as soon as its copy is
// sent, as the worker deletes it, not when the function returns: a function
// killed later in the batch (out of memory, a crash) would leave the
// original to be received again, and moved a second time, or run again and
// succeed while its copy waits in the dead-letter queue. Here the batch's
// second record looks at the queue while it runs.
func TestDeadLetteredRecordDeletedAtOnce(t *testing.T) {
	f := newFake("300")
	url := sqstest.QueueURL("orders")
	inFlight := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "permanent":
			return sqsworker.Permanent(errors.New("malformed job"))
		case "look":
			_, inFlight, _ = f.Depth(url)
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true})
	ev := received(t, f, "orders", "permanent", "look")
	resp, err := fn(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %v, err %v", resp, err)
	}
	if inFlight != 1 {
		t.Errorf("%d records of the queue in flight while the batch went on, want 1: the dead-lettered one not deleted yet", inFlight)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 1 {
		t.Errorf("dead-letter queue holds %d, want 1", v)
	}
}

// So is a record held for later whose waiting copy was sent.
func TestRequeuedRecordDeletedAtOnce(t *testing.T) {
	f := newFake("300")
	url := sqstest.QueueURL("orders")
	inFlight := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_, inFlight, _ = f.Depth(url)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true})
	later := map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: sqsworker.NotBeforeAttribute(time.Now().Add(5 * time.Minute))}
	f.Send(url, "later", func(in *sqs.SendMessageInput) { in.MessageAttributes = sqsmsg.ToSDKAttributes(later) })
	f.Send(url, "look")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 || *out.Messages[0].Body != "later" {
		t.Fatalf("received %d, %v; want the held record first", len(out.Messages), err)
	}
	ev := sqstest.SQSEvent(sqstest.QueueARN("orders"), out.Messages)
	resp, err := fn(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %v, err %v", resp, err)
	}
	if inFlight != 1 {
		t.Errorf("%d records of the queue in flight while the batch went on, want 1: the held one, whose copy was sent, not deleted yet", inFlight)
	}
}

// So is a record that succeeds on the last receive its queue's redrive
// policy allows (3 here): left to the end of the invocation, a function
// killed later in the batch would leave it to its next receive, at which
// SQS would move it, done, to the dead-letter queue. A record on an earlier
// receive waits for Lambda's delete, as before.
func TestLastReceiveSuccessDeletedAtOnce(t *testing.T) {
	for _, c := range []struct {
		count    string
		inFlight int
	}{{"3", 1}, {"2", 2}} {
		f := newFake("300")
		url := sqstest.QueueURL("orders")
		inFlight := -1
		h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if m.Body == "look" {
				_, inFlight, _ = f.Depth(url)
			}
			return nil
		})
		fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true})
		ev := received(t, f, "orders", "done", "look")
		ev.Records[0].Attributes[sqsworker.AttrReceiveCount] = c.count
		resp, err := fn(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("resp %v, err %v", resp, err)
		}
		if inFlight != c.inFlight {
			t.Errorf("receive %s of 3: %d records in flight while the batch went on, want %d", c.count, inFlight, c.inFlight)
		}
	}
}

// On the emulator (maxReceiveCount 1): a function killed after a record
// succeeded on its last receive (Lambda gets no answer, so deletes
// nothing) leaves only the records not done to SQS's redrive; the one
// done was deleted at once and is not dead-lettered.
func TestEmulatorLastReceiveSuccessOutlivesAKilledFunction(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 1})
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "killed" {
			return errors.New("the function is killed while this record runs")
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: sq, Concurrency: 1, DisableHeartbeat: true})
	localtest.Send(t, sq, q.URL, "", "done", "killed")
	msgs := receiveN(t, sq, q.URL, 2)
	if _, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, msgs)); err != nil {
		t.Fatal(err)
	}
	// Killed: no answer reaches Lambda, which deletes nothing; the
	// records' visibility timeout ends (made to end here at once), and
	// SQS's next receive moves what is left to the dead-letter queue.
	for _, m := range msgs {
		_, _ = sq.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
	}
	if out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1}); err != nil || len(out.Messages) != 0 {
		t.Fatalf("receive past maxReceiveCount: %v, %d messages", err, len(out.Messages))
	}
	var dead []string
	for _, m := range receiveUpTo(t, sq, q.DLQURL, 10, 5*time.Second) {
		dead = append(dead, aws.ToString(m.Body))
	}
	slices.Sort(dead)
	if !slices.Equal(dead, []string{"killed"}) {
		t.Errorf("dead-lettered %v, want [killed] alone: the record done on its last receive was not deleted at once", dead)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue", v+i+d)
	}
}

// stalledDeletes is the fake whose DeleteMessageBatch, once armed, does not
// answer until its context ends: SQS slow to delete.
type stalledDeletes struct {
	*sqstest.Fake
	armed atomic.Bool
}

func (s *stalledDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if s.armed.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Fake.DeleteMessageBatch(ctx, in, opts...)
}

// unlistedDeletes is the fake whose answers to DeleteMessageBatch, once
// armed, list no entry, neither as successful nor as failed.
type unlistedDeletes struct {
	*sqstest.Fake
	armed atomic.Bool
}

func (u *unlistedDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if u.armed.Load() {
		return &sqs.DeleteMessageBatchOutput{}, nil
	}
	return u.Fake.DeleteMessageBatch(ctx, in, opts...)
}

// A delete at once (a record done on its last receive) whose answer lists
// the entry neither as successful nor as failed is not taken as confirmed:
// it is logged as failed, and the record keeps its lease to the
// invocation's end, for Lambda's delete. It counted as deleted before.
func TestLastReceiveDeleteNotListedIsNotConfirmed(t *testing.T) {
	t.Parallel()
	f := &unlistedDeletes{Fake: newFake("300")}
	var logs logBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true, Logger: log})
	ev := received(t, f.Fake, "orders", "done")
	ev.Records[0].Attributes[sqsworker.AttrReceiveCount] = "3"
	f.armed.Store(true)
	resp := invokeBy(t, fn, ev, 10*time.Second)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none: the record's job is done", failedIDs(resp))
	}
	if !strings.Contains(logs.String(), "neither as successful nor as failed") {
		t.Errorf("logs do not report the unconfirmed delete:\n%s", logs.String())
	}
}

// A record done on its last receive whose delete at once SQS is slow to
// answer is reported done, not failed: Lambda's delete is still to come.
// Reported failed, it would come back past its last receive and be
// dead-lettered, done.
func TestLastReceiveSuccessSlowDeleteIsNotAFailure(t *testing.T) {
	t.Parallel()
	f := &stalledDeletes{Fake: newFake("300")}
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, SafetyMargin: time.Second, DisableHeartbeat: true})
	ev := received(t, f.Fake, "orders", "done")
	ev.Records[0].Attributes[sqsworker.AttrReceiveCount] = "3"
	f.armed.Store(true)
	resp := invokeBy(t, fn, ev, 3*time.Second)
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none: the record's job is done", failedIDs(resp))
	}
}

// Without the heartbeat, a record's lease is counted from the earliest its
// receive can have been: the batching window before the invocation, as
// with the heartbeat. A record that succeeds past that end (visibility 3 s,
// window 2 s, a handler of 1.5 s) is deleted at once, as a success past
// its lease is; counted from the invocation's start, its lease looked held
// a second and a half longer than SQS held it, and the record was left to
// Lambda's delete at the end, by then SQS's to hand out again.
func TestLeaseWithoutHeartbeatCountsTheBatchingWindow(t *testing.T) {
	t.Parallel()
	f := newFake("3")
	url := sqstest.QueueURL("orders")
	inFlight := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "slow":
			time.Sleep(1500 * time.Millisecond)
		case "look":
			_, inFlight, _ = f.Depth(url)
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true, BatchingWindow: 2 * time.Second})
	ev := received(t, f, "orders", "slow", "look")
	resp, err := fn(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %v, err %v", resp, err)
	}
	if inFlight != 1 {
		t.Errorf("%d records in flight once the slow one succeeded past its lease, want 1 (it deleted at once)", inFlight)
	}
}

// A record that succeeded on its last receive, whose delete at once is
// applied and its reply lost (the SDK sends the delete again, which finds
// the message gone), on the local SQS: the record is reported done, not
// failed, and its message is gone while the batch goes on (the next record
// looks at the queue), not left to Lambda's delete at the end.
func TestEmulatorLastReceiveSuccessDeleteReplyLost(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 1})
	p, via := proxiedSQS(t)
	inFlight := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "look" {
			_, inFlight = localtestDepth(t, sq, q.URL)
			return nil
		}
		// The next request through the proxy is this record's delete.
		return p.LoseReplies(1)
	})
	fn := newHandler(t, h, lambda.Config{Client: via, Concurrency: 1, DisableHeartbeat: true})
	localtest.Send(t, sq, q.URL, "", "done", "look")
	msgs := receiveN(t, sq, q.URL, 2)
	if msgs[0].Body == nil || *msgs[0].Body != "done" {
		msgs[0], msgs[1] = msgs[1], msgs[0]
	}
	resp, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, msgs))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %v, err %v; want every record done", resp, err)
	}
	if n := p.Stats().LostReplies; n != 1 {
		t.Fatalf("the proxy lost %d replies, want the delete's", n)
	}
	if inFlight != 1 {
		t.Errorf("%d messages in flight while the batch went on, want 1: the record done was not deleted at once", inFlight)
	}
}

// localtestDepth is the visible and in-flight counts of a queue.
func localtestDepth(t *testing.T, c *sqs.Client, url string) (visible, inFlight int) {
	v, f, _ := localtest.Depth(t, c, url)
	return v, f
}

// A queue whose visibility timeout is not longer than the batching window
// is named at once, with the fix: its records' leases look lost before
// they run. One whose timeout is longer is not.
func TestVisibilityNoLongerThanTheBatchingWindowIsLogged(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		window time.Duration
		logged bool
	}{{60 * time.Second, true}, {30 * time.Second, true}, {10 * time.Second, false}} {
		f := newFake("30")
		var logs logBuffer
		fn := newHandler(t, jobs, lambda.Config{Client: f, BatchingWindow: c.window, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if _, err := fn(context.Background(), received(t, f, "orders", "ok")); err != nil {
			t.Fatal(err)
		}
		got := strings.Contains(logs.String(), "visibility timeout is not longer than the event source mapping's batching window") &&
			strings.Contains(logs.String(), "at least six times the function's timeout plus the batching window")
		if got != c.logged {
			t.Errorf("window %s, visibility 30s: logged %v, want %v\n%s", c.window, got, c.logged, logs.String())
		}
	}
}

// TestLeaseWithoutHeartbeatCountsTheBatchingWindow on the local SQS: the
// record that succeeds past its lease, counted from the batching window's
// start, is deleted while the batch goes on.
func TestEmulatorLeaseWithoutHeartbeatCountsTheBatchingWindow(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 3 * time.Second})
	inFlight := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "slow":
			time.Sleep(1500 * time.Millisecond)
		case "look":
			_, inFlight = localtestDepth(t, sq, q.URL)
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: sq, Concurrency: 1, DisableHeartbeat: true, BatchingWindow: 2 * time.Second})
	localtest.Send(t, sq, q.URL, "", "slow", "look")
	msgs := receiveN(t, sq, q.URL, 2)
	if aws.ToString(msgs[0].Body) != "slow" {
		msgs[0], msgs[1] = msgs[1], msgs[0]
	}
	resp, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, msgs))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("resp %v, err %v", resp, err)
	}
	if inFlight != 1 {
		t.Errorf("%d records in flight once the slow one succeeded past its lease, want 1 (it deleted at once)", inFlight)
	}
}

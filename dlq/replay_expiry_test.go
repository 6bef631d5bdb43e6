package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// slowSends is the fake whose every SendMessage is applied, then takes step
// of its clock to answer: a destination slow to answer. After each, a
// second reader of the dead-letter queue (another operator's scan, say)
// takes what is visible there.
type slowSends struct {
	*sqstest.Fake
	clock *sqstest.Clock
	step  time.Duration
	read  func()
}

func (s slowSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := s.Fake.SendMessage(ctx, in, opts...)
	s.clock.Advance(s.step)
	s.read()
	return out, err
}

// clockedEnv is newFakeEnv on a clock of the test's own.
func clockedEnv() (*fakeEnv, *sqstest.Clock) {
	e := newFakeEnv()
	clock := sqstest.NewClock(time.Now())
	e.f.Now = clock.Now
	return e, clock
}

// otherReader returns a second reader of orders-dlq (another operator's
// scan, say), which takes what is visible there when called, and counts
// it in taken.
func otherReader(t *testing.T, e *fakeEnv, taken *int) func() {
	return func() {
		out, err := e.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(e.ordersDLQ), MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		if err != nil {
			t.Error(err)
			return
		}
		*taken += len(out.Messages)
	}
}

// expiryEnv dead-letters three jobs, and returns the fake's clock and a
// second reader of orders-dlq, which counts what it received.
func expiryEnv(t *testing.T) (*fakeEnv, *sqstest.Clock, func(), *int) {
	t.Helper()
	e, clock := clockedEnv()
	e.deadLetterJobs(3)
	taken := new(int)
	return e, clock, otherReader(t, e, taken), taken
}

// slowSendClient is a client of the local SQS whose every SendMessage is
// applied and answered delay late: a destination slow to answer. onSend,
// if set, is called as each send is applied.
func slowSendClient(t *testing.T, delay time.Duration, onSend func()) *sqs.Client {
	return localtest.NewSQS(t, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("slowSend",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleInitialize(ctx, in)
					if _, send := in.Parameters.(*sqs.SendMessageInput); send {
						if onSend != nil {
							onSend()
						}
						time.Sleep(delay)
					}
					return out, md, err
				}), middleware.After)
		})
	})
}

// A destination slow to answer outlasts the visibility timeout of the
// messages waiting their turn in a receive's batch. Each is hidden again
// before its copy is sent: no second reader takes one meanwhile, and none
// ends in both queues. Before, two of the three were copied, then their
// deletes refused (their receipt handles stale): in both queues, and read
// by the second reader too.
func TestReplayKeepsWaitingMessagesHidden(t *testing.T) {
	t.Parallel()
	e, clock, read, taken := expiryEnv(t)
	q := openOrdersDLQ(t, slowSends{Fake: e.f, clock: clock, step: 1500 * time.Millisecond, read: read})
	q.now = clock.Now
	res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 3 || res.NotDeleted != 0 || res.Expired != 0 || *taken != 0 {
		t.Errorf("moved %d, not deleted %d, expired %d; the second reader took %d; want 3 moved and no other", res.Moved, res.NotDeleted, res.Expired, *taken)
	}
	e.wantDLQDepth(t, "after the replay", 0, 0)
	if v, f, _ := e.f.Depth(e.orders); v != 3 || f != 0 {
		t.Errorf("orders holds %d visible, %d in flight, want the 3 jobs", v, f)
	}
}

// A message whose visibility timeout ran out before its turn, and which
// another reader received meanwhile, is not copied: it stays, counted in
// Expired and listed in Stayed with what to do. Before, it was copied and
// its delete refused: in both queues.
func TestReplayLeavesAMessageAnotherReaderTook(t *testing.T) {
	t.Parallel()
	e, clock, read, taken := expiryEnv(t)
	q := openOrdersDLQ(t, e.f)
	q.now = clock.Now
	first := true
	var actions []string
	audit := Audit{Record: func(_ context.Context, r AuditRecord) error {
		actions = append(actions, r.Action)
		return nil
	}}
	res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 2 * time.Second, Audit: audit, Progress: func(Progress) {
		if first {
			// After the first message's move: long enough for any hide.
			first = false
			clock.Advance(10 * time.Second)
			read()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || res.NotDeleted != 0 || res.Expired != 2 || *taken != 2 || len(res.Stayed) != 2 {
		t.Fatalf("moved %d, not deleted %d, expired %d, stayed %d; the second reader took %d; want 1 moved, 2 expired and taken", res.Moved, res.NotDeleted, res.Expired, len(res.Stayed), *taken)
	}
	if r := res.Stayed[0].Reason; !strings.Contains(r, "visibility timeout ran out") || !strings.Contains(r, "replay orders-dlq again") {
		t.Errorf("reason: %s", r)
	}
	// Each start closed: the one moved, then the two not copied.
	want := []string{ActionReplayStart, ActionReplay, ActionReplayStart, ActionReplayFailed, ActionReplayStart, ActionReplayFailed}
	if !slices.Equal(actions, want) {
		t.Errorf("audit actions %q, want %q", actions, want)
	}
	// The reader's two, in flight; the first job alone copied.
	e.wantDLQDepth(t, "after the replay", 0, 2)
	if v, _, _ := e.f.Depth(e.orders); v != 1 {
		t.Errorf("orders holds %d, want the one job moved", v)
	}
}

// TestReplayKeepsWaitingMessagesHidden on the local SQS: five messages,
// each copy's send applied and its reply a second late, with a visibility
// timeout of 4 s; a second reader polls the dead-letter queue from the
// first send on. Before, the fourth and fifth messages' hides ran out while
// the fourth was sent: the reader took them, and the replay's deletes with
// their stale receipt handles did nothing (the local SQS accepts them):
// both jobs in both queues, and the replay reporting every message moved.
func TestReplayKeepsWaitingMessagesHiddenOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	sendDeadLetters(t, c, orders.DLQURL, orders.URL, 5)
	// The second reader starts with the first copy's send: the replay has
	// received the batch by then.
	slow, taken, stop := secondReader(t, c, orders.DLQURL)
	q, err := Open(context.Background(), slow, orders.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 4 * time.Second})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 5 || res.NotDeleted != 0 || res.Expired != 0 || taken.Load() != 0 {
		t.Errorf("moved %d, not deleted %d, expired %d; the second reader took %d; want 5 moved and no other", res.Moved, res.NotDeleted, res.Expired, taken.Load())
	}
	if v, f := depth(t, c, orders.DLQURL); v+f != 0 {
		t.Errorf("the dead-letter queue holds %d visible, %d in flight, want none", v, f)
	}
	if v, f := depth(t, c, orders.URL); v != 5 || f != 0 {
		t.Errorf("orders holds %d visible, %d in flight, want the 5 jobs", v, f)
	}
}

// A copy whose send outlasts the visibility timeout of its original: the
// original is not deleted with a receipt handle that may no longer hold
// it (SQS may accept a stale handle and do nothing, the job then in both
// queues unsaid), whether it is visible again or another reader received
// it meanwhile; the replay says so: copied but not deleted, in both
// queues, with the reason.
func TestReplaySendLongerThanTheHide(t *testing.T) {
	t.Parallel()
	for _, other := range []bool{false, true} {
		t.Run(map[bool]string{false: "alone", true: "another reader"}[other], func(t *testing.T) {
			t.Parallel()
			e, clock := clockedEnv()
			e.deadLetterJobs(1)
			taken := 0
			read := func() {}
			if other {
				read = otherReader(t, e, &taken)
			}
			q := openOrdersDLQ(t, slowSends{Fake: e.f, clock: clock, step: 3 * time.Second, read: read})
			q.now = clock.Now
			res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if v, _, _ := e.f.Depth(e.orders); v != 1 {
				t.Errorf("orders holds %d, want the copy", v)
			}
			if res.Moved != 0 || res.NotDeleted != 1 || len(res.Messages) != 1 ||
				!strings.Contains(res.Messages[0].Note, "ran out before its delete") {
				t.Errorf("moved %d, not deleted %d, %+v; want 1 not deleted, said why", res.Moved, res.NotDeleted, res.Messages)
			}
			if other {
				if taken != 1 {
					t.Errorf("the other reader took %d, want 1", taken)
				}
				e.wantDLQDepth(t, "after the replay: the other reader's", 0, 1)
			} else {
				e.wantDLQDepth(t, "after the replay", 1, 0)
			}
		})
	}
}

// A copy's send applied, its reply 3 s late, past its original's 2 s
// visibility timeout, and no other reader, on the local SQS: it hides the
// original again (its receipt handle still the latest), so the replay
// deletes it within that hide, and the move is whole. (An SQS that would
// not hide it again leaves it not deleted, said so: see
// TestReplaySendLongerThanTheHide.)
func TestReplaySendLongerThanTheHideOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	sendDeadLetters(t, c, orders.DLQURL, orders.URL, 1)
	slow := slowSendClient(t, 3*time.Second, nil)
	q, err := Open(context.Background(), slow, orders.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || res.NotDeleted != 0 {
		t.Errorf("moved %d, not deleted %d (%+v); want the message moved", res.Moved, res.NotDeleted, res.Messages)
	}
	if v, f := depth(t, c, orders.DLQURL); v+f != 0 {
		t.Errorf("the dead-letter queue holds %d visible, %d in flight, want none", v, f)
	}
	if v, f := depth(t, c, orders.URL); v != 1 || f != 0 {
		t.Errorf("orders holds %d visible, %d in flight, want the job", v, f)
	}
}

// staleHandles is the fake whose visibility changes all fail as SQS fails
// those of a receipt handle that no longer holds its message (deleted, or
// visible again): InvalidParameterValue, naming the ReceiptHandle.
type staleHandles struct{ *sqstest.Fake }

func (s staleHandles) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), SenderFault: true,
			Message: aws.String("Value " + aws.ToString(e.ReceiptHandle) + " for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.")})
	}
	return out, nil
}

// A release of held messages whose receipt handles no longer hold them, as
// SQS answers it (InvalidParameterValue), is not an error: the messages are
// SQS's again already. Before, a replay or a scan whose held messages had
// come back (a slow run) ended with "releasing messages … failed".
func TestReleaseOfStaleHandlesIsNoError(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(3)
	q := openOrdersDLQ(t, staleHandles{e.f})
	if _, err := q.Scan(context.Background(), ScanConfig{}); err != nil {
		t.Errorf("scan: %v", err)
	}
}

// Messages that stay, held while the rest of their receive moves behind a
// slow destination, are kept hidden as the batch goes on: a second reader
// polling the dead-letter queue takes none of them. Before, once the
// held messages had been hidden again in one round, those held later in
// the batch were not, and came back to the other reader mid-run.
func TestReplayKeepsMessagesThatStayHidden(t *testing.T) {
	t.Parallel()
	e, clock := clockedEnv()
	var move []string
	for i := range 10 {
		id := deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}, fmt.Sprint("job ", i))
		if i%3 != 0 {
			move = append(move, id)
		}
	}
	taken := 0
	q := openOrdersDLQ(t, slowSends{Fake: e.f, clock: clock, step: 1500 * time.Millisecond, read: otherReader(t, e, &taken)})
	q.now = clock.Now
	res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 4 * time.Second, Filter: Filter{IDs: move}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != len(move) || taken != 0 {
		t.Errorf("moved %d of %d; the second reader took %d, want none", res.Moved, len(move), taken)
	}
	e.wantDLQDepth(t, "after the replay: the 4 that stay, released", 4, 0)
}

// A rate whose next turn comes after the context's deadline ends the
// replay as an interruption by that deadline, said so; before, the error
// read "…: %!w(<nil>)" and matched no deadline.
func TestReplayRatePastTheDeadline(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(3)
	q := openOrdersDLQ(t, e.f)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := q.Replay(ctx, ReplayConfig{PerSecond: 0.05, Visibility: time.Minute})
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "%!") || res.Moved != 1 || !res.Interrupted {
		t.Errorf("err %v, moved %d, interrupted %v; want an interruption by the deadline after 1 moved", err, res.Moved, res.Interrupted)
	}
}

// refusedHides is the fake whose visibility changes all fail with
// InvalidParameterValue and the given message.
type refusedHides struct {
	*sqstest.Fake
	message string
}

func (s refusedHides) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), SenderFault: true, Message: aws.String(s.message)})
	}
	return out, nil
}

// A re-hide refused with InvalidParameterValue is a message no longer
// held only when SQS names the ReceiptHandle: such messages stay, expired.
// Refused for its VisibilityTimeout (SQS's 12 hours), it is an error of the
// replay's own, which stops it, not taken for another reader's receive.
func TestReplayTellsARefusedHideByItsReason(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		message string
		expired int
		err     string
	}{
		{"Value AAAA for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change.", 2, ""},
		{"Value 43200 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]", 0, "hiding it for its move"},
	} {
		e, clock := clockedEnv()
		e.deadLetterJobs(3)
		q := openOrdersDLQ(t, refusedHides{Fake: e.f, message: c.message})
		q.now = clock.Now
		first := true
		res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 2 * time.Second, Progress: func(Progress) {
			if first {
				first = false
				clock.Advance(time.Second + 500*time.Millisecond) // less than half the hide left
			}
		}})
		if res.Expired != c.expired || (c.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("refused as %q: expired %d, err %v; want %d expired, error %q", c.message, res.Expired, err, c.expired, c.err)
		}
	}
}

// TestReplayKeepsMessagesThatStayHidden on the local SQS: ten messages,
// the four of another error class staying, each copy's send answered a
// second late, a visibility timeout of 4 s, and a second reader polling
// the dead-letter queue from the first send to the last message handled:
// it takes none of them.
func TestReplayKeepsMessagesThatStayHiddenOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(orders.DLQURL)}
	for i := range 10 {
		class := "move"
		if i%3 == 0 {
			class = "stay"
		}
		attrs, _ := sqsworker.Failure{ErrorClass: class, Error: "boom", Attempts: 1, SourceQueue: orders.URL,
			MessageID: fmt.Sprint("orig-", i), FailedAt: time.Now()}.AddTo(nil)
		in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
			Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprint("job ", i)), MessageAttributes: sdkAttributes(attrs)})
	}
	if out, err := c.SendMessageBatch(context.Background(), in); err != nil || len(out.Failed) > 0 {
		t.Fatalf("sending dead letters: %v %v", err, out)
	}
	slow, taken, stop := secondReader(t, c, orders.DLQURL)
	q, err := Open(context.Background(), slow, orders.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The reader stops once the last message is handled: the replay then
	// releases those that stay, visible to anyone.
	res, err := q.Replay(context.Background(), ReplayConfig{Visibility: 4 * time.Second, Filter: Filter{ErrorClasses: []string{"move"}},
		Progress: func(p Progress) {
			if p.Scanned == 10 {
				stop()
			}
		}})
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 6 || taken.Load() != 0 {
		t.Errorf("moved %d of 6; the second reader took %d, want none", res.Moved, taken.Load())
	}
	if v, f := depth(t, c, orders.URL); v != 6 || f != 0 {
		t.Errorf("orders holds %d visible, %d in flight, want the 6 jobs", v, f)
	}
}

// secondReader returns a client of the local SQS whose sends are answered
// a second late, and starts a second reader of dlqURL with the first of
// them (the replay has received its batch by then): it takes what it
// receives, hidden for 10 minutes, counted in taken, until stop, which
// waits for it and may be called more than once.
func secondReader(t *testing.T, c *sqs.Client, dlqURL string) (slow *sqs.Client, taken *atomic.Int32, stop func()) {
	t.Helper()
	sending, sent := make(chan struct{}), sync.Once{}
	slow = slowSendClient(t, time.Second, func() { sent.Do(func() { close(sending) }) })
	ctx, cancel := context.WithCancel(context.Background())
	taken = new(atomic.Int32)
	var reader sync.WaitGroup
	reader.Go(func() {
		select {
		case <-sending:
		case <-ctx.Done():
		}
		for ctx.Err() == nil {
			out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(dlqURL),
				MaxNumberOfMessages: 10, VisibilityTimeout: 600, WaitTimeSeconds: 1})
			if err == nil {
				taken.Add(int32(len(out.Messages)))
			}
		}
	})
	stop = func() { cancel(); reader.Wait() }
	t.Cleanup(stop)
	return slow, taken, stop
}

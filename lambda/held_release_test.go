package lambda_test

// A record held back for later (sqsworker.AttrNotBefore ahead) that the
// invocation's deadline leaves no time to start, on its last receive, on
// sqstest.Fake and on the emulator.

import (
	"context"
	"strconv"
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

// checkHeldCopy asserts that a copy of a job held until nb keeps its time
// and counts no attempt: its receives so far were waits.
func checkHeldCopy(t *testing.T, m types.Message, nb time.Time) {
	t.Helper()
	got := aws.ToString(m.MessageAttributes[sqsworker.AttrNotBefore].StringValue)
	if want := strconv.FormatInt(nb.UnixMilli(), 10); got != want {
		t.Errorf("the copy's not-before %s, want the job's %s", got, want)
	}
	if p, ok := m.MessageAttributes[sqsworker.AttrPriorAttempts]; ok {
		t.Errorf("the copy carries %s prior attempts, want none: the job never ran", aws.ToString(p.StringValue))
	}
}

// blockerThenHeld is a handler for an invocation run one record at a time:
// the first record holds the only slot past the time to start records,
// "slow" until its context ends (the held record's turn then comes too
// late), "stall" ignoring its context (the held record waits for a slot
// until the time to start records ends). Nothing else may run: ran counts
// what did.
func blockerThenHeld(t *testing.T, ran *atomic.Int64) sqsworker.Handler {
	release := make(chan struct{})
	t.Cleanup(func() {
		close(release)
		time.Sleep(50 * time.Millisecond) // the stalled handler's late return
	})
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "slow":
			<-ctx.Done()
			return ctx.Err()
		case "stall":
			<-release
			return nil
		}
		ran.Add(1)
		return nil
	})
}

// A record held back for an hour, on the last receive its redrive policy
// allows (3), which the invocation has no time to start (its turn comes
// after the time to start records, or it waits for a slot until then),
// waits in a copy that keeps its time and counts no attempt (its receives
// were waits). Before, the release's copy took the time of the release:
// the job was receivable at once, an hour early, and ran as its third
// attempt.
func TestHeldRecordReleasedKeepsItsTime(t *testing.T) {
	t.Parallel()
	for _, blocker := range []string{"slow", "stall"} {
		t.Run(blocker, func(t *testing.T) {
			t.Parallel()
			clock := sqstest.NewClock(time.Now())
			f := newFake("300")
			f.Now = clock.Now
			url := sqstest.QueueURL("orders")
			nb := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			attrs := sqsmsg.ToSDKAttributes(map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: sqsworker.NotBeforeAttribute(nb)})
			f.Send(url, "later", func(in *sqs.SendMessageInput) { in.MessageAttributes = attrs })
			receive := func() []types.Message {
				out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
				if err != nil {
					t.Fatal(err)
				}
				return out.Messages
			}
			for range 2 { // two receives that waited
				m := receive()
				if len(m) != 1 {
					t.Fatalf("received %d, want the held record", len(m))
				}
				if _, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: m[0].ReceiptHandle}); err != nil {
					t.Fatal(err)
				}
			}
			last := receive()
			if len(last) != 1 || last[0].Attributes["ApproximateReceiveCount"] != "3" {
				t.Fatalf("received %v, want the held record on its third receive", last)
			}
			f.Send(url, blocker)
			first := receive()
			if len(first) != 1 {
				t.Fatalf("received %d, want the %s record", len(first), blocker)
			}
			var ran atomic.Int64
			fn := newHandler(t, blockerThenHeld(t, &ran), lambda.Config{Client: f, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
			resp := invokeBy(t, fn, sqstest.SQSEvent(sqstest.QueueARN("orders"), append(first, last...)), 4*time.Second)
			for _, id := range failedIDs(resp) {
				if id == aws.ToString(last[0].MessageId) {
					t.Errorf("the held record reported failed, want its copy sent and the original deleted")
				}
			}
			for _, m := range receive() {
				if aws.ToString(m.Body) == "later" {
					t.Errorf("the held record receivable at once, want not before the job's time, an hour away")
					checkHeldCopy(t, m, nb)
				}
			}
			clock.Advance(sqsworker.MaxMessageDelay + time.Second)
			var again []types.Message
			for _, m := range receive() {
				if aws.ToString(m.Body) == "later" {
					again = append(again, m)
				}
			}
			if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
				t.Errorf("%d dead-lettered, want none", v)
			}
			if len(again) != 1 {
				t.Fatalf("received %d copies of the held record after the copy's delay, want 1", len(again))
			}
			checkHeldCopy(t, again[0], nb)
			if ran.Load() != 0 {
				t.Errorf("the held record's handler ran %d times, want none: its time has not come", ran.Load())
			}
		})
	}
}

// On the emulator (maxReceiveCount 2): a record held back for an hour, on
// its second receive, waiting for the slot a handler that ignores its
// context holds when the time to start records ends, is not receivable
// again at once: its copy waits, keeping the job's time. Before, the copy
// was visible at once, with the time of the release.
func TestEmulatorHeldRecordReleasedKeepsItsTime(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 120 * time.Second})
	nb := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := sq.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("later"),
		MessageAttributes: sqsmsg.ToSDKAttributes(map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: sqsworker.NotBeforeAttribute(nb)})}); err != nil {
		t.Fatal(err)
	}
	last := receiveLast(t, sq, q.URL)
	localtest.Send(t, sq, q.URL, "", "stall")
	stall := receiveN(t, sq, q.URL, 1)
	var ran atomic.Int64
	fn := newHandler(t, blockerThenHeld(t, &ran), lambda.Config{Client: sq, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
	resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, append(stall, last...)), 4*time.Second)
	if got := failedIDs(resp); len(got) != 1 || got[0] != aws.ToString(stall[0].MessageId) {
		t.Errorf("failures %v, want the stalled record alone: the held record's copy was sent and the original deleted", got)
	}
	if got := localtest.ReceiveAll(t, sq, q.URL, 2*time.Second, 30*time.Second); len(got) != 0 {
		t.Errorf("%d records receivable at once, want none: the job's time is an hour away", len(got))
		checkHeldCopy(t, got[0], nb)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v != 0 || i != 1 || d != 1 {
		t.Errorf("the queue holds %d visible, %d in flight, %d delayed; want the stalled record in flight and the delayed copy", v, i, d)
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d dead-lettered, want none", v+i+d)
	}
	if ran.Load() != 0 {
		t.Errorf("the held record's handler ran %d times, want none", ran.Load())
	}
	_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: stall[0].ReceiptHandle})
}

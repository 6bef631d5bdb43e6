package dlq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

// fullFailure returns a runtime's dead-letter copy's attributes (failure
// metadata from src) and a body that together make a message of exactly
// SQS's largest size: a copy can take no attribute more.
func fullFailure(src string) (string, sqsworker.Failure) {
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: src, MessageID: "m-1", FailedAt: time.Now().UTC()}
	attrs, _ := f.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}})
	return strings.Repeat("x", sqsworker.MaxMessageSize-sqsworker.MessageSize("", attrs)), f
}

// A dead-letter message of SQS's largest size (1 MiB, attributes
// included) has no room for the replay count: its copy goes without it,
// and says so, instead of being refused; the replay moves it, and the
// messages after it. Before, SQS refused every copy of it and the replay
// stopped there, leaving it and the rest in the dead-letter queue.
func TestReplayFullSizeMessage(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	body, f := fullFailure(e.orders)
	id := deadLetter(e.f, e.ordersDLQ, f, body)
	q := openOrdersDLQ(t, e.f)
	res, err := q.Replay(context.Background(), ReplayConfig{})
	if err != nil || res.Moved != 1 || len(res.Messages) != 1 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	m := res.Messages[0]
	if m.MessageID != id || m.Replays != 0 || !strings.Contains(m.Note, AttrReplays+" left out: SQS refused the copy with it") {
		t.Errorf("moved: %+v", m)
	}
	got := receiveJobs(t, e.f, e.orders)
	c := got[body]
	if c == nil || len(got) != 1 {
		t.Fatalf("orders holds %d message(s)", len(got))
	}
	if _, ok := c.MessageAttributes[AttrReplays]; ok || c.MessageAttributes["tenant"].StringValue != "acme" {
		t.Errorf("copy's attributes: %v", c.MessageAttributes)
	}
	e.wantDLQDepth(t, "after the replay", 0, 0)
}

// A message whose copy SQS refuses whatever is left out (larger than the
// destination's MaximumMessageSize) stays, with
// the reason and the fix, and the replay goes on with the others. Before,
// the replay stopped at it: every message after it stayed in the
// dead-letter queue, on every run.
func TestReplayRefusedCopyStays(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	small := e.f.CreateQueue("small", map[string]string{"MaximumMessageSize": "1024"})
	fail := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, FailedAt: time.Now()}
	big := deadLetter(e.f, e.ordersDLQ, fail, strings.Repeat("x", 1000))
	deadLetter(e.f, e.ordersDLQ, fail, "small")
	q := openOrdersDLQ(t, e.f)
	var recs []AuditRecord
	res, err := q.Replay(ctx, ReplayConfig{To: "small", Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		recs = append(recs, r)
		return nil
	}}})
	if err != nil || res.Moved != 1 || res.Unsent != 1 || res.Matched != 1 || len(res.Stayed) != 1 || res.Stayed[0].MessageID != big ||
		!strings.Contains(res.Stayed[0].Reason, "SQS refused its copy to small (") ||
		!strings.Contains(res.Stayed[0].Reason, "raise the MaximumMessageSize of small, or replay it to a queue that takes it") {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	if got := receiveJobs(t, e.f, small); len(got) != 1 || got["small"] == nil {
		t.Errorf("small holds %v", got)
	}
	e.wantDLQDepth(t, "after the replay", 1, 0)
	// Its replay-start record is followed by a replay-failed one.
	if len(recs) != 4 || recs[0].Action != ActionReplayStart || recs[0].DLQMessageID != big || recs[1].Action != ActionReplayFailed ||
		recs[1].DLQMessageID != big || !strings.Contains(recs[1].Note, "not copied: SQS refused it: ") || recs[3].Action != ActionReplay {
		t.Errorf("audit: %+v", recs)
	}
}

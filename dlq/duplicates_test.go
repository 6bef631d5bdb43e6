package dlq

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
)

// deadLetterKeyed is deadLetter with an idempotency-key attribute key
// (none when empty).
func deadLetterKeyed(e *fakeEnv, fl sqsworker.Failure, body, key string) string {
	attrs := map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}}
	if key != "" {
		attrs[jobkey.Attribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: key}
	}
	attrs, _ = fl.AddTo(attrs)
	return e.f.Send(e.ordersDLQ, body, func(in *sqs.SendMessageInput) { in.MessageAttributes = sdkAttributes(attrs) })
}

// duplicateFixture fills orders-dlq with two copies of one job (a
// dead-letter send whose reply was lost, sent again by the SDK), a third
// copy of it written later with another failure text and time (a runtime
// that stopped between its copy and the delete), and four messages that
// are each like them in all but one thing: another original message ID,
// another body, another idempotency key, another source queue. It returns
// the IDs of the three copies.
func duplicateFixture(e *fakeEnv) []string {
	at := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	fl := sqsworker.Failure{ErrorClass: "c", Error: "boom", Attempts: 2, SourceQueue: e.orders, MessageID: "orig-1", FailedAt: at}
	later := fl
	later.Error, later.FailedAt = "boom again", at.Add(time.Minute)
	otherID, otherSource := fl, fl
	otherID.MessageID = "orig-2"
	otherSource.SourceQueue = e.billing
	copies := []string{
		deadLetterKeyed(e, fl, "job 1", "order-1"),
		deadLetterKeyed(e, fl, "job 1", "order-1"),
		deadLetterKeyed(e, later, "job 1", "order-1"),
	}
	deadLetterKeyed(e, otherID, "job 1", "order-1")
	deadLetterKeyed(e, fl, "job 1 (edited)", "order-1")
	deadLetterKeyed(e, fl, "job 1", "order-2")
	deadLetterKeyed(e, otherSource, "job 1", "order-1")
	return copies
}

// A scan marks the later copies of one job as duplicates of the first one
// read, and nothing else: messages that differ in their original message
// ID, body, idempotency key or source queue are other jobs.
func TestScanMarksDuplicates(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	copies := duplicateFixture(e)
	q := openOrdersDLQ(t, e.f)
	res, err := q.Scan(context.Background(), ScanConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Scanned != 7 || res.Duplicates != 2 {
		t.Errorf("scanned %d, %d duplicates; want 7 and 2", res.Scanned, res.Duplicates)
	}
	for _, m := range res.Messages {
		want := ""
		if m.ID == copies[1] || m.ID == copies[2] {
			want = copies[0]
		}
		if m.DuplicateOf != want {
			t.Errorf("message %s (original %s, body %q): DuplicateOf %q, want %q", m.ID, m.OriginalID(), m.Body, m.DuplicateOf, want)
		}
	}
	e.wantDLQDepth(t, "after the scan", 7, 0)
}

// A replay moves one copy of the job and deletes the other two, audited,
// reporting them; the four look-alikes are replayed each (the one from
// billing stays: billing does not send its dead letters to orders-dlq). The
// dry run before it says the same and changes nothing.
func TestReplayDropsDuplicateCopies(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	copies := duplicateFixture(e)
	q := openOrdersDLQ(t, e.f)
	ctx := context.Background()
	plan, err := q.Plan(ctx, ReplayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Matched != 4 || plan.Duplicates != 2 || len(plan.Dropped) != 2 || plan.Refused != 1 {
		t.Errorf("plan: %d matched, %d duplicates (%v), %d refused; want 4, 2, 1", plan.Matched, plan.Duplicates, plan.Dropped, plan.Refused)
	}
	e.wantDLQDepth(t, "after the plan", 7, 0)
	var audit []AuditRecord
	res, err := q.Replay(ctx, ReplayConfig{Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		audit = append(audit, r)
		return nil
	}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 4 || res.Duplicates != 2 || res.Refused != 1 {
		t.Errorf("replay: moved %d, %d duplicates, %d refused; want 4, 2, 1", res.Moved, res.Duplicates, res.Refused)
	}
	for _, d := range res.Dropped {
		if d.DuplicateOf != copies[0] || (d.MessageID != copies[1] && d.MessageID != copies[2]) || d.OriginalMessageID != "orig-1" || d.Note != "" {
			t.Errorf("dropped %+v, want copies %v of %s", d, copies[1:], copies[0])
		}
	}
	drops, starts := 0, 0
	for _, r := range audit {
		if r.Action == ActionReplayStart {
			starts++
		}
		if r.Action == ActionDropDuplicate {
			drops++
			if !r.Deleted || !strings.Contains(r.Note, copies[0]) {
				t.Errorf("audit record %+v", r)
			}
		}
	}
	// Each of the four moves recorded before its send and after it, each
	// of the two drops before its delete and after it.
	if drops != 2 || starts != 6 || len(audit) != 12 {
		t.Errorf("%d audit records, %d of dropped duplicates, %d replay starts; want 12, 2 and 6", len(audit), drops, starts)
	}
	e.wantDLQDepth(t, "after the replay", 1, 0) // the one naming billing
	if v, _, _ := e.f.Depth(e.orders); v != 4 {
		t.Errorf("orders holds %d messages, want 4: the job once, and the three look-alikes", v)
	}
}

// Past the replay's limit, a copy of a job it moved is still deleted.
func TestReplayDropsDuplicatesPastLimit(t *testing.T) {
	e := newFakeEnv()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	deadLetterKeyed(e, fl, "job 1", "")
	deadLetterKeyed(e, fl, "job 1", "")
	q := openOrdersDLQ(t, e.f)
	res, err := q.Replay(context.Background(), ReplayConfig{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || res.Duplicates != 1 {
		t.Errorf("moved %d, %d duplicates; want 1 and 1", res.Moved, res.Duplicates)
	}
	e.wantDLQDepth(t, "after the replay", 0, 0)
}

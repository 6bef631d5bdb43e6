package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
)

// A duplicate copy is recorded in the audit log before it is deleted: an
// audit log that fails (disk full) at the duplicate leaves it in the
// dead-letter queue and stops the replay, rather than deleting a message
// with no record of it. (A kill -9 at the same point leaves the record.)
func TestDropDuplicateRecordedBeforeDelete(t *testing.T) {
	e := newFakeEnv()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	kept := deadLetterKeyed(e, fl, "job 1", "order-1")
	dup := deadLetterKeyed(e, fl, "job 1", "order-1")
	q := openOrdersDLQ(t, e.f)
	full := errors.New("disk full")
	var audit []AuditRecord
	res, err := q.Replay(context.Background(), ReplayConfig{Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		if r.DLQMessageID == dup {
			return full
		}
		audit = append(audit, r)
		return nil
	}}})
	if !errors.Is(err, full) {
		t.Errorf("replay: %v; want the audit log's error", err)
	}
	if res.Moved != 1 || res.Duplicates != 0 {
		t.Errorf("moved %d, %d duplicates dropped; want 1 (%s) and 0", res.Moved, res.Duplicates, kept)
	}
	e.wantDLQDepth(t, "after an audit log that failed at the duplicate", 1, 0)
	if v, _, _ := e.f.Depth(e.orders); v != 1 {
		t.Errorf("orders holds %d messages, want the job once", v)
	}
}

// Each duplicate's records: a replay-start before its delete, then
// drop-duplicate; a delete that fails closes its replay-start with
// replay-failed, and the copy stays.
func TestDropDuplicateAuditPairs(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	deadLetterKeyed(e, fl, "job 1", "order-1")
	dup := deadLetterKeyed(e, fl, "job 1", "order-1")
	q := openOrdersDLQ(t, e.f)
	var audit []AuditRecord
	res, err := q.Replay(context.Background(), ReplayConfig{Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		audit = append(audit, r)
		return nil
	}}})
	if err != nil || res.Moved != 1 || res.Duplicates != 1 {
		t.Fatalf("replay: %v, moved %d, %d duplicates; want 1 and 1", err, res.Moved, res.Duplicates)
	}
	var got []string
	for _, r := range audit {
		if r.DLQMessageID == dup {
			got = append(got, r.Action)
		}
	}
	if len(got) != 2 || got[0] != ActionReplayStart || got[1] != ActionDropDuplicate {
		t.Errorf("records of the duplicate: %v; want [%s %s]", got, ActionReplayStart, ActionDropDuplicate)
	}
}

// failDelete fails the nth DeleteMessage (from 1).
type failDelete struct {
	API
	n, calls int
}

func (f *failDelete) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	f.calls++
	if f.calls == f.n {
		return nil, errors.New("connection reset")
	}
	return f.API.DeleteMessage(ctx, in, opts...)
}

// A duplicate whose delete fails stays, listed with a note, and its
// replay-start is closed by a replay-failed record.
func TestDropDuplicateDeleteFailsRecorded(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	deadLetterKeyed(e, fl, "job 1", "order-1")
	dup := deadLetterKeyed(e, fl, "job 1", "order-1")
	q := openOrdersDLQ(t, &failDelete{API: e.f, n: 2})
	var got []string
	res, err := q.Replay(context.Background(), ReplayConfig{Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		if r.DLQMessageID == dup {
			got = append(got, r.Action)
		}
		return nil
	}}})
	if err != nil || res.Moved != 1 || res.Duplicates != 0 || len(res.Dropped) != 1 || res.Dropped[0].Note == "" {
		t.Fatalf("replay: %v, moved %d, %d duplicates, dropped %+v; want 1, 0, one noted", err, res.Moved, res.Duplicates, res.Dropped)
	}
	if len(got) != 2 || got[0] != ActionReplayStart || got[1] != ActionReplayFailed {
		t.Errorf("records of the duplicate: %v; want [%s %s]", got, ActionReplayStart, ActionReplayFailed)
	}
	e.wantDLQDepth(t, "after the replay", 1, 0)
}

// Two copies of a job whose copy SQS refuses (larger than the
// destination's MaximumMessageSize): neither is dropped, as no copy of the
// job was sent; both stay, each with its reason, and the job is not lost.
func TestDuplicatesOfRefusedCopyStay(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.f.CreateQueue("small", map[string]string{"MaximumMessageSize": "1024"})
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	deadLetterKeyed(e, fl, strings.Repeat("x", 1000), "order-1")
	deadLetterKeyed(e, fl, strings.Repeat("x", 1000), "order-1")
	q := openOrdersDLQ(t, e.f)
	plan, err := q.Plan(context.Background(), ReplayConfig{To: "small"})
	if err != nil || plan.Duplicates != 1 {
		t.Fatalf("plan: %v, %+v", err, plan)
	}
	res, err := q.Replay(context.Background(), ReplayConfig{To: "small"})
	if err != nil || res.Moved != 0 || res.Unsent != 2 || res.Duplicates != 0 || len(res.Dropped) != 0 {
		t.Errorf("replay: %v, moved %d, %d unsent, %d duplicates dropped %v; want 0, 2, 0", err, res.Moved, res.Unsent, res.Duplicates, res.Dropped)
	}
	e.wantDLQDepth(t, "after the replay", 2, 0)
}

// expiredDelete fails the first DeleteMessage with err.
type expiredDelete struct {
	API
	err   error
	calls int
}

func (f *expiredDelete) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error) {
	if f.calls++; f.calls == 1 {
		return nil, f.err
	}
	return f.API.DeleteMessage(ctx, in, opts...)
}

// A delete refused for its own receipt handle (expired: SQS's
// InvalidParameterValue naming the ReceiptHandle) is that message's fault:
// the replay goes on with the others. A delete refused otherwise (the
// network, throttling, access) stops it after that message: every message
// copied from then on would stay in both queues too.
func TestReplayStopsOnlyWhenSQSRefusesDeletes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		stop bool
	}{
		{"expired receipt", &smithy.GenericAPIError{Code: "InvalidParameterValue", Message: "Value x for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."}, false},
		{"connection reset", errors.New("connection reset"), true},
	} {
		e := newFakeEnv()
		for i := range 2 {
			fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: fmt.Sprint("orig-", i), FailedAt: time.Now()}
			deadLetterKeyed(e, fl, fmt.Sprint("job ", i), fmt.Sprint("order-", i))
		}
		q := openOrdersDLQ(t, &expiredDelete{API: e.f, err: c.err})
		res, err := q.Replay(context.Background(), ReplayConfig{})
		stopped := err != nil && strings.Contains(err.Error(), "stopped after message")
		if stopped != c.stop || res == nil || res.NotDeleted != 1 {
			t.Errorf("%s: %v, %+v; want stopped %v, one copied but not deleted", c.name, err, res, c.stop)
		}
	}
}

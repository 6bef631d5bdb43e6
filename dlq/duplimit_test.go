package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
)

// A replay stopped by its limit before it read the other copy of a job it
// moved (another receive: here one message per receive, at --rate) leaves
// that copy in the dead-letter queue; the next replay sends it, under the
// job's idempotency key, which the first copy carried too: a handler keyed
// by it runs the job once.
func TestReplayLimitLeavesUnreadDuplicate(t *testing.T) {
	e := newFakeEnv()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	deadLetterKeyed(e, fl, "job 1", "")
	deadLetterKeyed(e, fl, "job 1", "")
	q := openOrdersDLQ(t, e.f)
	cfg := ReplayConfig{Limit: 1, PerSecond: 2, Visibility: time.Second}
	res, err := q.Replay(context.Background(), cfg)
	if err != nil || res.Moved != 1 || !res.LimitHit {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	t.Logf("first replay: moved %d, %d duplicates dropped, scanned %d", res.Moved, res.Duplicates, res.Scanned)
	first := receiveJobs(t, e.f, e.orders)["job 1"]
	if first == nil {
		t.Fatal("the job is not in orders")
	}
	e.wantDLQDepth(t, "after the first replay", 1, 0)
	res, err = q.Replay(context.Background(), cfg)
	if err != nil || res.Moved != 1 {
		t.Fatalf("second replay: %v, %+v", err, res)
	}
	// The first copy is still hidden by the receive above: this is the
	// second.
	second := receiveJobs(t, e.f, e.orders)["job 1"]
	if second == nil || second.ID == first.ID {
		t.Fatalf("the second replay's copy is not in orders: %+v", second)
	}
	if a, b := jobkey.Default(first), jobkey.Default(second); a != b || a != jobkey.OfID("orig-1") {
		t.Errorf("keys of the job's two replayed copies: %s and %s; want %s twice", a, b, jobkey.OfID("orig-1"))
	}
}

package executor_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/internal/executor"
)

// A replayed job (no idempotency-key attribute: the idempotency
// middleware's DefaultKey is the first message's ID, from the failure
// metadata the replay keeps) fails for good and is dead-lettered by the
// runtime, whose delete of it then meets SQS refusing connections (the
// test's fault proxy), as after a crash. The job comes back and succeeds;
// the dead letter is replayed as well. Under the idempotency middleware on
// DynamoDB Local the effect is applied once: the dead-letter copy keeps the
// job's key. Before, its new failure metadata named the replayed message,
// whose own ID then keyed the replay, and the effect ran twice.
func TestEmulatorDeadLetterOfAReplayedJobKeepsItsKey(t *testing.T) {
	var calls atomic.Int32
	k := newKeyedReplay(t, 5, func(*sqsworker.Message) error {
		if calls.Add(1) == 1 {
			return sqsworker.Permanent(errors.New("bad order"))
		}
		return nil
	})
	ex := k.executor(5)
	ex.Requeue = executor.Requeue{}
	ex.Run(k.job, k.ack)
	if k.ack.err == nil || ex.Counters.DeadLettered.Load() != 1 {
		t.Fatalf("delete error %v, %d dead-lettered: want a refused delete after one dead-letter copy", k.ack.err, ex.Counters.DeadLettered.Load())
	}

	// The operator replays the dead letter; a runtime goes on.
	ctx := context.Background()
	dq, err := dlq.Open(ctx, k.direct, k.q.DLQURL, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := dq.Replay(ctx, dlq.ReplayConfig{To: k.q.URL}); err != nil || res.Moved != 1 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	k.runOnce(t, 30*time.Second, "the job and its replayed dead letter did not both run")
}

package schedule_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/idemtest"
	"github.com/sqsworker/sqsworker/schedule"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// runs counts the handler's runs by occurrence key.
type runs struct {
	mu sync.Mutex
	n  map[string]int
}

func (r *runs) add(k string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil {
		r.n = map[string]int{}
	}
	r.n[k]++
}

func (r *runs) get(k string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[k]
}

// An occurrence sent twice at once (a schedule that fires twice), and once
// more after its job completed (a late retry of the scheduler), runs its
// handler once, on the local SQS with the idempotency middleware on
// DynamoDB Local; another occurrence of the same schedule runs as well. A
// malformed envelope never runs and is dead-lettered with its reason.
func TestOccurrenceFiredTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 5})

	store := idemtest.NewStore(t, db, idempotency.StoreConfig{})
	// A duplicate of a job running elsewhere, or here for more than 5 s,
	// is postponed for the claim's lease: a short grace brings it back
	// soon.
	guard, err := idempotency.New(store, idempotency.Config{Key: schedule.Key, ClaimGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}

	var r runs
	started := make(chan struct{}, 8)
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		o, err := schedule.Parse(m)
		if err != nil {
			return sqsworker.Permanent(err)
		}
		started <- struct{}{}
		time.Sleep(500 * time.Millisecond) // both copies are in flight together
		r.add(o.Key())
		return nil
	}), guard.Middleware)

	w, err := worker.New(sq, worker.Config{QueueURL: q.URL, Concurrency: 4, WaitTime: time.Second,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), h) }()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	first, _ := schedule.Envelope("nightly-report", at, map[string]string{"report": "sales"})
	next, _ := schedule.Envelope("nightly-report", at.Add(24*time.Hour), map[string]string{"report": "sales"})
	localtest.Send(t, sq, q.URL, "", first, first, next)
	drained := func() bool {
		v, f, d := localtest.Depth(t, sq, q.URL)
		return v+f+d == 0
	}
	localtest.Eventually(t, 60*time.Second, drained, "queue not drained")

	// The scheduler's late retry of the first occurrence.
	localtest.Send(t, sq, q.URL, "", first)
	localtest.Eventually(t, 60*time.Second, drained, "queue not drained after the late copy")

	k1 := "schedule:nightly-report@2026-12-01T03:00:00Z"
	k2 := "schedule:nightly-report@2026-12-02T03:00:00Z"
	if got := r.get(k1); got != 1 {
		t.Errorf("first occurrence ran %d times, want once", got)
	}
	if got := r.get(k2); got != 1 {
		t.Errorf("next occurrence ran %d times, want once", got)
	}
	if s := guard.Stats(); s.Claimed != 2 || s.Duplicates < 2 {
		t.Errorf("idempotency stats %+v, want 2 claims and at least 2 duplicates", s)
	}
	if dl := localtest.ReceiveAll(t, sq, q.DLQURL, 2*time.Second, 30*time.Second); len(dl) != 0 {
		t.Errorf("%d messages dead-lettered, want none", len(dl))
	}

	// A malformed envelope: the handler's Parse fails it as permanent.
	localtest.Send(t, sq, q.URL, "", `{"sqsworker.schedule":{"name":"nightly-report","scheduledTime":"tomorrow"}}`)
	var dl []string
	localtest.Eventually(t, 60*time.Second, func() bool {
		for _, m := range localtest.ReceiveAll(t, sq, q.DLQURL, time.Second, 30*time.Second) {
			dl = append(dl, aws.ToString(m.Body))
			attrs := map[string]sqsworker.MessageAttribute{}
			for k, v := range m.MessageAttributes {
				attrs[k] = sqsworker.MessageAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue)}
			}
			f, ok := sqsworker.ParseFailure(attrs)
			if !ok || f.ErrorClass != "*schedule.MalformedError" || !strings.HasPrefix(f.Error, "permanent:") || !strings.Contains(f.Error, `malformed envelope: scheduledTime "tomorrow" is not an RFC 3339 time`) {
				t.Errorf("dead-lettered with %+v (ok %t), want the permanent MalformedError", f, ok)
			}
		}
		return len(dl) > 0
	}, "malformed envelope not dead-lettered")
	if len(started) != 2 {
		t.Errorf("the handler ran %d times past Parse, want 2", len(started))
	}
}

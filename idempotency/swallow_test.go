package idempotency_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// DynamoDB accepting connections but never answering, for a handler whose
// context has no deadline (the worker's, with its visibility heartbeat):
// the claim gives up like the middleware's other requests, with an error
// the runtimes' circuit breaker counts (sqsworker.Unavailable), rather than
// holding the message, and a worker's slot, for as long as DynamoDB is
// silent. The handler does not run; the job runs once DynamoDB answers.
func TestSwallowedClaimIsUnavailable(t *testing.T) {
	t.Parallel()
	store, db, proxy := storeBehindProxy(t)
	effects := newEffectsTable(t, db)
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(effectHandler(effects, &runs))
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.HandleMessage(context.Background(), msg("swallowed", "payload")) }()
	err := wait(t, done, "end of the claim while DynamoDB swallows requests")
	if !sqsworker.IsUnavailable(err) || runs.Load() != 0 {
		t.Fatalf("claim while DynamoDB swallows requests: %v (runs %d), want an Unavailable error and no run", err, runs.Load())
	}
	t.Logf("error: %v", err)
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	if err := h.HandleMessage(context.Background(), msg("swallowed", "payload")); err != nil || runs.Load() != 1 {
		t.Errorf("after the outage: %v (runs %d), want run at once", err, runs.Load())
	}
	if n := applied(t, db, effects, "swallowed"); n != 1 {
		t.Errorf("effect applied %d times", n)
	}
}

// DynamoDB swallowing requests in the middle of a worker's run, with the
// visibility heartbeat on (handlers' contexts without a deadline): the
// claims fail as Unavailable, the circuit breaker opens, and once DynamoDB
// answers again every job has run once, none dead-lettered. Before, the
// claims waited for DynamoDB for as long as it was silent, unseen by the
// breaker (the handlers' completions, which fail without failing the job,
// tell it nothing either).
func TestWorkerDynamoDBSwallowing(t *testing.T) {
	t.Parallel()
	store, _, proxy := storeBehindProxy(t)
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 4 * time.Second, MaxReceiveCount: 3})
	guard, _ := idempotency.New(store, idempotency.Config{ClaimGrace: time.Second, Logger: quiet()})
	var eff effects
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := idempotency.KeyFromContext(ctx)
		eff.add(k)
		return nil
	}), guard.Middleware)
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("swallowed-%02d", i)
	}
	sendKeyed(t, sq, q.URL, keys)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 4,
		Breaker: sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Second, MaxProbeInterval: 2 * time.Second},
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second}}, h)
	localtest.Eventually(t, 60*time.Second, func() bool { return len(eff.snapshot()) >= 5 }, "no progress before the outage")
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 60*time.Second, func() bool { return w.Stats().BreakerOpens > 0 },
		"the circuit breaker did not open while DynamoDB swallowed requests")
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 120*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained after the outage")
	got := eff.snapshot()
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("%s: %d effects", k, got[k])
		}
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 || w.Stats().DeadLettered != 0 {
		t.Errorf("%d messages dead-lettered (worker stats %+v)", v+f+d, w.Stats())
	}
	t.Logf("worker %+v; idempotency %+v", w.Stats(), guard.Stats())
}

package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
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

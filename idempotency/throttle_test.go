package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// DynamoDB throttling, on the wire (ProvisionedThroughputExceededException,
// which the SDK retries with backoff): a throttled claim fails the job as
// Unavailable without running it; a throttled completion or commit is retried until
// DynamoDB takes it, and the job succeeds with one effect, its duplicate
// acknowledged.
func TestThrottledRequests(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store, direct := proxiedStore(t, p, db)
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	other, _ := idempotency.New(direct, idempotency.Config{Logger: quiet()})
	throttled := func(target string, times int) {
		p.setRule(func(op string, n int) fault {
			if op == target && n <= times {
				return throttle
			}
			return forward
		})
	}

	var runs atomic.Int64
	h := g.Middleware(effectHandler(effects, &runs))
	throttled("PutItem", 1<<30)
	err := h.HandleMessage(context.Background(), msg("throttled-claim", "payload"))
	// The SDK's retries either run out (the throttling error) or are cut
	// by the claim's bound (a timeout): an outage both ways.
	var pte *types.ProvisionedThroughputExceededException
	if !sqsworker.IsUnavailable(err) || !(errors.As(err, &pte) || errors.Is(err, context.DeadlineExceeded)) || runs.Load() != 0 || p.faults("PutItem") == 0 {
		t.Errorf("throttled claim: %v (runs %d), want Unavailable, no run", err, runs.Load())
	}
	p.setRule(nil)
	if err := h.HandleMessage(context.Background(), msg("throttled-claim", "payload")); err != nil || runs.Load() != 1 {
		t.Errorf("claim after the throttling: %v (runs %d)", err, runs.Load())
	}

	// More throttled attempts than one call of the SDK makes.
	for _, c := range []struct{ key, op string }{{"throttled-commit", "TransactWriteItems"}, {"throttled-complete", "UpdateItem"}} {
		t.Run(c.op, func(t *testing.T) {
			var runs atomic.Int64
			work := effectHandler(effects, &runs)
			if c.op == "UpdateItem" {
				work = sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil })
			}
			throttled(c.op, p.requests(c.op)+8)
			if err := g.Middleware(work).HandleMessage(context.Background(), msg(c.key, "payload")); err != nil {
				t.Errorf("job whose %s was throttled for a while: %v", c.op, err)
			}
			if n := p.faults(c.op); n < 8 {
				t.Errorf("%d %s requests throttled", n, c.op)
			}
			if err := other.Middleware(work).HandleMessage(context.Background(), msg(c.key, "payload")); err != nil || runs.Load() != 1 {
				t.Errorf("duplicate: %v (runs %d), want acknowledged", err, runs.Load())
			}
		})
	}
	if n := applied(t, db, effects, "throttled-commit"); n != 1 {
		t.Errorf("throttled commit's effect applied %d times", n)
	}
}

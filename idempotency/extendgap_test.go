package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/visibility"
)

// slowClaim is a Store whose claims return only once the visibility lease
// of ctx has been extended: a claim slower than a heartbeat round (the
// SDK's retries of a throttled request, say).
type slowClaim struct{ idempotency.Store }

func (s slowClaim) Claim(ctx context.Context, key, hash string, leaseUntil time.Time, by idempotency.Receive) (string, *idempotency.Record, error) {
	lease := visibility.FromContext(ctx)
	first := lease.Deadline()
	for lease.Deadline().Equal(first) {
		select {
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return s.Store.Claim(ctx, key, hash, leaseUntil, by)
}

// The heartbeat extends the message while its claim is being made: the
// claim follows that extension too, not only the following ones. Before,
// the claim kept the deadline read before the request, plus the grace, and
// with the next extension far off (a long Extension) it lapsed while its
// message was held: the handler was cancelled with ErrNotHolder, a failure
// counted against a healthy job.
func TestClaimFollowsExtensionDuringClaim(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, _ := idempotency.New(slowClaim{b.direct}, idempotency.Config{ClaimGrace: 100 * time.Millisecond, Logger: quiet()})
		ctx, m := leasedContextWith(t, "extended-while-claiming", "payload", visibility.Config{
			VisibilityTimeout: 2 * time.Second, Extension: 10 * time.Second, Threshold: 1500 * time.Millisecond, Interval: 250 * time.Millisecond,
		})
		lease := visibility.FromContext(ctx)
		firstDeadline := lease.Deadline()
		var cause error
		work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			// Past the first deadline plus the grace, while the
			// message is held until far later.
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(time.Until(firstDeadline.Add(time.Second))):
				return nil
			}
		})
		if err := g.Middleware(work).HandleMessage(ctx, m); err != nil || cause != nil {
			t.Errorf("job whose message was extended during its claim: %v (context ended with %v), want it run to the end", err, cause)
		}
		if !lease.Deadline().After(firstDeadline.Add(time.Second)) {
			t.Errorf("the message was held until %s only", lease.Deadline())
		}
	})
}

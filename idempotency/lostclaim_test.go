package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
)

// A handler that ignores its context, whose claim lapsed because DynamoDB
// swallowed its lease extensions, and whose key a duplicate then took: its
// commit is refused (ErrNotHolder, nothing applied), and the job's failure
// is marked sqsworker.Unavailable, as when such a handler returns an error,
// so that it is never dead-lettered for the outage (its duplicate applies
// the effect). Before, the refused commit's error was plain, counted as the
// job's own failure.
func TestLostClaimCommitInOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, _ := idempotency.New(b.store, idempotency.Config{ClaimGrace: 500 * time.Millisecond, Logger: quiet()})
		var runs atomic.Int64
		var cause error
		work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			runs.Add(1)
			b.fail(idempotency.OpExtendLease, true)
			<-ctx.Done() // the claim's lease lapsed...
			cause = context.Cause(ctx)
			b.takeOver("ignored") // ...a duplicate claimed the key...
			b.heal()
			return idempotency.AddWrites(context.WithoutCancel(ctx), effectWrite(b.effects, "ignored")) // ...and the handler goes on
		})
		ctx, m := leasedContext(t, "ignored", "payload", 2*time.Second)
		err := g.Middleware(work).HandleMessage(ctx, m)
		// The memory store's faults are not outages: there the cause is
		// unmarked, and the job's error is marked PartlyUnavailable, as
		// for any claim another holder took (no failure of the job's).
		_, mem := b.store.(*idempotency.MemStore)
		if !errors.Is(cause, idempotency.ErrNotHolder) || sqsworker.IsUnavailable(cause) == mem {
			t.Fatalf("the handler's context ended with %v, want the claim lost to the outage", cause)
		}
		if !errors.Is(err, idempotency.ErrNotHolder) || !sqsworker.IsUnavailable(err) || sqsworker.IsPartlyUnavailable(err) != mem {
			t.Errorf("commit of a claim lost to an outage: %v, want ErrNotHolder, marked Unavailable as the loss", err)
		}
		if n := b.applied("ignored"); n != 0 {
			t.Errorf("effect applied %d times by a holder that lost its claim", n)
		}
		if tok := b.holder("ignored"); tok != "another-holder" {
			t.Errorf("the key is held by %q, want the duplicate's claim left alone", tok)
		}
	})
}

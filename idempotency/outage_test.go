package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// storeBehindProxy returns a store whose requests go through a TCP fault
// proxy (passing), a direct client to the same DynamoDB Local, and the
// proxy.
func storeBehindProxy(t *testing.T) (*idempotency.DynamoStore, *dynamodb.Client, *faultproxy.Proxy) {
	t.Helper()
	localtest.RequireDynamoDB(t)
	proxy, err := faultproxy.ForEndpoint(localtest.DynamoDBEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	db := localtest.NewDynamoDB(t)
	direct := newStore(t, db, idempotency.StoreConfig{})
	store, err := idempotency.NewDynamoStore(context.Background(), localtest.NewDynamoDB(t, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
	}), direct.Config())
	if err != nil {
		t.Fatal(err)
	}
	return store, db, proxy
}

// DynamoDB refusing connections: the claim fails with an error the
// runtimes' circuit breaker counts (sqsworker.Unavailable), the handler
// does not run, and the job runs once DynamoDB is back.
func TestRefusedClaimIsUnavailable(t *testing.T) {
	t.Parallel()
	store, db, proxy := storeBehindProxy(t)
	effects := newEffectsTable(t, db)
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(effectHandler(effects, &runs))
	if err := proxy.Refuse(); err != nil {
		t.Fatal(err)
	}
	err := h.HandleMessage(context.Background(), msg("refused", "payload"))
	var p *sqsworker.PermanentError
	if !sqsworker.IsUnavailable(err) || errors.As(err, &p) || runs.Load() != 0 {
		t.Fatalf("claim while DynamoDB refuses connections: %v (runs %d), want an Unavailable error, not Permanent, and no run", err, runs.Load())
	}
	t.Logf("error: %v", err)
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	if err := h.HandleMessage(context.Background(), msg("refused", "payload")); err != nil || runs.Load() != 1 {
		t.Errorf("after the outage: %v, runs %d", err, runs.Load())
	}
	if n := applied(t, db, effects, "refused"); n != 1 {
		t.Errorf("effect applied %d times", n)
	}
}

// DynamoDB refusing connections from the commit on: the commit is retried
// until the claim's lease ends, then the job fails as Unavailable without
// its effect; its retry after the outage applies it once.
func TestRefusedCommitIsUnavailable(t *testing.T) {
	t.Parallel()
	store, db, proxy := storeBehindProxy(t)
	effects := newEffectsTable(t, db)
	g, _ := idempotency.New(store, idempotency.Config{Lease: time.Second, ClaimGrace: time.Second, Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if runs.Add(1) == 1 {
			if err := proxy.Refuse(); err != nil {
				return err
			}
		}
		return idempotency.AddWrites(ctx, effectWrite(effects, "commit-refused"))
	}))
	err := h.HandleMessage(context.Background(), msg("commit-refused", "payload"))
	if !sqsworker.IsUnavailable(err) {
		t.Fatalf("commit while DynamoDB refuses connections: %v, want an Unavailable error", err)
	}
	if n := applied(t, db, effects, "commit-refused"); n != 0 {
		t.Fatalf("effect applied %d times by a failed commit", n)
	}
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	// The claim (whose release failed too) holds until its lease ends:
	// the retry is postponed meanwhile, then runs.
	localtest.Eventually(t, 30*time.Second, func() bool {
		err := h.HandleMessage(context.Background(), msg("commit-refused", "payload"))
		if err != nil && !isPostponed(err) {
			t.Fatalf("retry: %v", err)
		}
		return err == nil
	}, "the job did not run again after the outage")
	if n := applied(t, db, effects, "commit-refused"); n != 1 || runs.Load() != 2 {
		t.Errorf("effect applied %d times, %d runs; want 1 and 2", n, runs.Load())
	}
}

// Every reply of the commit lost: the commit was applied, but the job
// cannot know it and fails as Unavailable; its retry finds the record
// completed (the release kept it) and is acknowledged: one effect.
func TestCommitAppliedRepliesLost(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store, direct := proxiedStore(t, p, db)
	g, _ := idempotency.New(store, idempotency.Config{Lease: time.Second, ClaimGrace: time.Second, Logger: quiet()})
	p.setRule(func(op string, n int) fault {
		if op == "TransactWriteItems" {
			return dropResponse
		}
		return forward
	})
	var runs atomic.Int64
	h := g.Middleware(effectHandler(effects, &runs))
	if err := h.HandleMessage(context.Background(), msg("all-lost", "payload")); !sqsworker.IsUnavailable(err) {
		t.Errorf("commit whose replies were all lost: %v, want an Unavailable error", err)
	}
	if r := itemOf(t, db, direct.Config().Table, "all-lost"); r["status"] != idempotency.StatusCompleted {
		t.Errorf("record %v, want it completed (and kept by the release)", r)
	}
	p.setRule(nil)
	if err := h.HandleMessage(context.Background(), msg("all-lost", "payload")); err != nil || runs.Load() != 1 {
		t.Errorf("retry: %v (runs %d), want acknowledged as a duplicate", err, runs.Load())
	}
	if n := applied(t, db, effects, "all-lost"); n != 1 {
		t.Errorf("effect applied %d times", n)
	}
}

// A claim whose outcome is unknown (every reply lost, the SDK's retries
// spent) is released with its token as a best effort: the job fails as
// Unavailable, and its retry runs at once instead of waiting for the lease.
func TestUnknownClaimReleased(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	store, direct := proxiedStore(t, p, localtest.NewDynamoDB(t))
	p.setRule(func(op string, n int) fault {
		if op == "PutItem" {
			return dropResponse
		}
		return forward
	})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	if err := h.HandleMessage(context.Background(), msg("unknown", "payload")); !sqsworker.IsUnavailable(err) || runs.Load() != 0 {
		t.Fatalf("claim whose replies were lost: %v (runs %d), want an Unavailable error and no run", err, runs.Load())
	}
	if n := p.requests("DeleteItem"); n != 1 {
		t.Errorf("%d DeleteItem requests, want one best-effort release", n)
	}
	if r := itemOf(t, localtest.NewDynamoDB(t), direct.Config().Table, "unknown"); r != nil {
		t.Errorf("record %v left in progress", r)
	}
	p.setRule(nil)
	if err := h.HandleMessage(context.Background(), msg("unknown", "payload")); err != nil || runs.Load() != 1 {
		t.Errorf("retry: %v (runs %d), want run at once", err, runs.Load())
	}
}

// Lease extensions refused until the claim's lease ends: the handler's
// context is cancelled with ErrNotHolder, and the job's failure is marked
// Unavailable, for the circuit breaker.
func TestLapsedClaimInOutageIsUnavailable(t *testing.T) {
	t.Parallel()
	store, _, proxy := storeBehindProxy(t)
	g, _ := idempotency.New(store, idempotency.Config{ClaimGrace: 500 * time.Millisecond, Logger: quiet()})
	ctx, m := leasedContext(t, "lapsing-in-outage", "payload", 2*time.Second)
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if err := proxy.Refuse(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return errors.New("the context was not cancelled within 30s")
		}
	}))
	err := h.HandleMessage(ctx, m)
	if !sqsworker.IsUnavailable(err) || !errors.Is(err, idempotency.ErrNotHolder) || !errors.Is(err, context.Canceled) {
		t.Errorf("job whose claim lapsed while DynamoDB refused connections: %v, want the handler's error, Unavailable, matching ErrNotHolder", err)
	}
	t.Logf("error: %v", err)
}

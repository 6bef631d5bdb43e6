package idempotency_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A claim whose lease outlasts StoreConfig.TTL (a job longer than the time
// its completed record keeps duplicates away): while its holder runs, and
// after its lease was extended, a duplicate is postponed, not run. Before,
// the in-progress record expired after TTL like a completed one, and a
// duplicate took the key over from its live holder: two effects.
func TestClaimOutlivesTTL(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	db := localtest.NewDynamoDB(t)
	for _, c := range []struct {
		name  string
		store idempotency.Store
	}{
		{"memory", idempotency.NewMemStore(ttl)},
		{"dynamodb", newStore(t, db, idempotency.StoreConfig{TTL: ttl})},
	} {
		t.Run(c.name, func(t *testing.T) {
			expiry := func(key string) int64 {
				if s, ok := c.store.(*idempotency.MemStore); ok {
					r, _ := s.Get(key)
					return r.Expiry.Unix()
				}
				e, _ := strconv.ParseInt(itemOf(t, db, c.store.(*idempotency.DynamoStore).Config().Table, key)["expiry"], 10, 64)
				return e
			}
			holder, _ := idempotency.New(c.store, idempotency.Config{Lease: time.Minute, Logger: quiet()})
			other, _ := idempotency.New(c.store, idempotency.Config{Logger: quiet()})
			var eff effects
			started, finish := make(chan struct{}), make(chan struct{})
			work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				if m.ID == "holder" {
					close(started)
					<-finish
				}
				eff.add("long")
				return nil
			})
			first := msg("long", "payload")
			first.ID = "holder"
			done := make(chan error, 1)
			go func() { done <- holder.Middleware(work).HandleMessage(context.Background(), first) }()
			wait(t, started, "start of the holder")
			// Past the record's expiry as first written (claim time +
			// TTL, had it not been made to cover the lease).
			claimedAt := time.Now()
			localtest.Eventually(t, time.Minute, func() bool {
				return time.Now().Unix() > claimedAt.Add(ttl).Unix()+1
			}, "the clock did not pass the TTL")
			if e := expiry("long"); e <= time.Now().Unix() {
				t.Errorf("the in-progress record expires at %s, before its lease ends", time.Unix(e, 0))
			}
			if err := other.Middleware(work).HandleMessage(context.Background(), msg("long", "payload")); !isPostponed(err) {
				t.Errorf("duplicate while the holder runs, past the TTL: %v, want postponed", err)
			}
			close(finish)
			if err := wait(t, done, "end of the holder"); err != nil {
				t.Errorf("holder: %v", err)
			}
			if err := other.Middleware(work).HandleMessage(context.Background(), msg("long", "payload")); err != nil {
				t.Errorf("duplicate after the holder completed: %v", err)
			}
			if n := eff.snapshot()["long"]; n != 1 {
				t.Errorf("%d effects, want 1", n)
			}

			// A lease extended past the TTL holds the key as long.
			ctx := context.Background()
			token, _, err := c.store.Claim(ctx, "extended", "h", time.Now().Add(time.Second), idempotency.Receive{})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.store.ExtendLease(ctx, "extended", token, time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			claimedAt = time.Now()
			localtest.Eventually(t, time.Minute, func() bool {
				return time.Now().Unix() > claimedAt.Add(time.Second).Unix()+1
			}, "the clock did not pass the first lease")
			if _, existing, err := c.store.Claim(ctx, "extended", "h", time.Now().Add(time.Minute), idempotency.Receive{}); err != nil || existing == nil || existing.Token != token {
				t.Errorf("claim of a key whose lease was extended past the TTL: existing %+v, %v; want the holder's record", existing, err)
			}
		})
	}
}

// An extension that lands after a later one (a request the network held
// while the SDK, or the keeper, sent the next) leaves the lease where the
// later one put it, and succeeds: on DynamoDB Local and in memory. Before,
// it moved the lease back, and another holder could take the key while
// this one still ran. An extension by a token that does not hold the key
// still fails with ErrNotHolder.
func TestLateExtensionDoesNotShortenTheLease(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	ctx := context.Background()
	for _, c := range []struct {
		name  string
		store idempotency.Store
	}{
		{"memory", idempotency.NewMemStore(time.Hour)},
		{"dynamodb", newStore(t, db, idempotency.StoreConfig{})},
	} {
		t.Run(c.name, func(t *testing.T) {
			lease := func() time.Time {
				if s, ok := c.store.(*idempotency.MemStore); ok {
					r, _ := s.Get("k")
					return r.LeaseExpiry
				}
				ms, _ := strconv.ParseInt(itemOf(t, db, c.store.(*idempotency.DynamoStore).Config().Table, "k")["lease_expiry"], 10, 64)
				return time.UnixMilli(ms)
			}
			now := time.Now()
			token, held, err := c.store.Claim(ctx, "k", "h", now.Add(time.Minute), idempotency.Receive{})
			if err != nil || held != nil {
				t.Fatalf("Claim: %v %+v", err, held)
			}
			later := now.Add(10 * time.Minute).Truncate(time.Millisecond)
			if err := c.store.ExtendLease(ctx, "k", token, later); err != nil {
				t.Fatalf("ExtendLease: %v", err)
			}
			if err := c.store.ExtendLease(ctx, "k", token, now.Add(5*time.Minute)); err != nil {
				t.Errorf("an earlier extension landing late: %v, want nil: the lease is held longer already", err)
			}
			if got := lease(); !got.Equal(later) {
				t.Errorf("lease ends at %s, want %s: a late extension moved it back", got, later)
			}
			if err := c.store.ExtendLease(ctx, "k", "another", now.Add(20*time.Minute)); !errors.Is(err, idempotency.ErrNotHolder) {
				t.Errorf("extension by another token: %v, want ErrNotHolder", err)
			}
			if err := c.store.ExtendLease(ctx, "k", "another", now.Add(time.Minute)); !errors.Is(err, idempotency.ErrNotHolder) {
				t.Errorf("earlier extension by another token: %v, want ErrNotHolder", err)
			}
		})
	}
}

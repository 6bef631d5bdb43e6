package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
)

// sameRecord describes how two records differ, or returns "".
func sameRecord(a, b *idempotency.Record) string {
	var diff []string
	if a.Key != b.Key {
		diff = append(diff, fmt.Sprintf("Key %q != %q", a.Key, b.Key))
	}
	if a.Status != b.Status {
		diff = append(diff, fmt.Sprintf("Status %q != %q", a.Status, b.Status))
	}
	if a.Token != b.Token {
		diff = append(diff, fmt.Sprintf("Token %q != %q", a.Token, b.Token))
	}
	if a.PayloadHash != b.PayloadHash {
		diff = append(diff, fmt.Sprintf("PayloadHash %q != %q", a.PayloadHash, b.PayloadHash))
	}
	if string(a.Result) != string(b.Result) {
		diff = append(diff, fmt.Sprintf("Result %q != %q", a.Result, b.Result))
	}
	if !a.Expiry.Equal(b.Expiry) {
		diff = append(diff, fmt.Sprintf("Expiry %s != %s", a.Expiry, b.Expiry))
	}
	if !a.LeaseExpiry.Equal(b.LeaseExpiry) {
		diff = append(diff, fmt.Sprintf("LeaseExpiry %s != %s", a.LeaseExpiry, b.LeaseExpiry))
	}
	return strings.Join(diff, "; ")
}

// Defect 1: a key reused for another payload fails as Permanent when the
// completed key is in the in-memory cache, as when the store answers.
func TestCachedDuplicateChecksPayload(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, err := idempotency.New(b.store, idempotency.Config{CacheSize: 10, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int64
		h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
		if err := h.HandleMessage(context.Background(), msg("reused", `{"amount":10}`)); err != nil {
			t.Fatal(err)
		}
		err = h.HandleMessage(context.Background(), msg("reused", `{"amount":99}`))
		var p *sqsworker.PermanentError
		if !errors.As(err, &p) || !strings.Contains(err.Error(), `key "reused"`) {
			t.Errorf("key reused for another payload, with the key cached: %v, want a Permanent error naming the key", err)
		}
		if err := h.HandleMessage(context.Background(), msg("reused", `{"amount":10}`)); err != nil {
			t.Errorf("duplicate with the same payload: %v", err)
		}
		if s := g.Stats(); runs.Load() != 1 || s.PayloadChanged != 1 || s.Duplicates != 1 || s.CacheHits != 1 {
			t.Errorf("runs %d, stats %+v: want 1 run, 1 changed payload, 1 duplicate answered from the cache", runs.Load(), s)
		}
	})
}

// Defect 1: OnDuplicate gets the same Record from the cache as from the store,
// its saved result included, whether the cache was filled by the key's own
// completion or by a duplicate the store answered.
func TestCachedDuplicateGetsSavedRecord(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		var mu sync.Mutex
		var got []*idempotency.Record
		onDup := func(_ context.Context, _ *sqsworker.Message, r *idempotency.Record) error {
			mu.Lock()
			defer mu.Unlock()
			c := *r
			c.Result = append([]byte(nil), r.Result...)
			got = append(got, &c)
			if len(r.Result) > 0 {
				r.Result[0] = 'X' // must not change what is cached
			}
			return nil
		}
		cfg := idempotency.Config{CacheSize: 10, OnDuplicate: onDup, Logger: quiet()}
		completer, _ := idempotency.New(b.store, cfg) // caches its own completion
		reader, _ := idempotency.New(b.direct, cfg)   // caches what the store returned
		cfg.CacheSize = 0
		plain, _ := idempotency.New(b.direct, cfg) // always asks the store
		var runs atomic.Int64
		h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			runs.Add(1)
			idempotency.SetResult(ctx, []byte("receipt-42"))
			return nil
		})
		m := msg("with-result", "payload")
		for i, g := range []*idempotency.Guard{completer, completer, completer, plain, reader, reader} {
			if err := g.Middleware(h).HandleMessage(context.Background(), m); err != nil {
				t.Fatalf("delivery %d: %v", i, err)
			}
		}
		if runs.Load() != 1 || len(got) != 5 {
			t.Fatalf("runs %d, %d duplicates seen", runs.Load(), len(got))
		}
		if s := completer.Stats(); s.CacheHits != 2 {
			t.Errorf("completer stats %+v, want its duplicates answered from the cache", s)
		}
		if s := reader.Stats(); s.CacheHits != 1 {
			t.Errorf("reader stats %+v, want its second duplicate answered from the cache", s)
		}
		fromStore := got[2]
		if string(fromStore.Result) != "receipt-42" || fromStore.Status != idempotency.StatusCompleted {
			t.Fatalf("the store's record: %+v", fromStore)
		}
		for i, r := range []*idempotency.Record{got[0], got[1], got[3], got[4]} {
			if d := sameRecord(r, fromStore); d != "" {
				t.Errorf("duplicate %d: the cached record differs from the store's: %s", i, d)
			}
		}
	})
}

package idempotency_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// BenchmarkMiddleware measures, against DynamoDB Local, the DynamoDB requests
// and the latency the middleware adds per message: for a first-time key
// (claim + complete), for a duplicate of a completed key (one claim that
// fails with the old record), and for a duplicate answered by the in-memory
// cache. "none" is the handler alone. Run with
// `go test -run '^$' -bench Middleware ./idempotency` (needs the local stack).
func BenchmarkMiddleware(b *testing.B) {
	var counter localtest.Counter
	db := localtest.NewCountingDynamoDB(b, &counter)
	cfg := idempotency.StoreConfig{Table: localtest.UniqueName(b, false)}
	if err := idempotency.CreateTable(context.Background(), db, cfg); err != nil {
		b.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(b, db, cfg.Table)
	store, err := idempotency.NewDynamoStore(context.Background(), db, cfg)
	if err != nil {
		b.Fatal(err)
	}
	noop := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	run := func(b *testing.B, h sqsworker.Handler, key func(i int) string) {
		counter.Reset()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if err := h.HandleMessage(context.Background(), msg(key(i), "payload")); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(counter.Total())/float64(b.N), "requests/msg")
	}
	plain, _ := idempotency.New(store, idempotency.Config{})
	cached, _ := idempotency.New(store, idempotency.Config{CacheSize: 1000})
	round := 0
	b.Run("none", func(b *testing.B) { run(b, noop, func(i int) string { return "" }) })
	b.Run("first-time", func(b *testing.B) {
		round++
		r := round
		run(b, plain.Middleware(noop), func(i int) string { return fmt.Sprintf("new-%d-%d", r, i) })
	})
	if err := plain.Middleware(noop).HandleMessage(context.Background(), msg("dup", "payload")); err != nil {
		b.Fatal(err)
	}
	b.Run("duplicate", func(b *testing.B) { run(b, plain.Middleware(noop), func(int) string { return "dup" }) })
	b.Run("duplicate-cached", func(b *testing.B) { run(b, cached.Middleware(noop), func(int) string { return "dup" }) })
}

package idempotency_test

import (
	"context"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
)

// WritesAdded counts the writes a handler added so far: none outside the
// middleware, each AddWrites call's within it.
func TestWritesAdded(t *testing.T) {
	if n := idempotency.WritesAdded(context.Background()); n != 0 {
		t.Errorf("outside the middleware: %d", n)
	}
	g, err := idempotency.New(idempotency.NewMemStore(0), idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		got = append(got, idempotency.WritesAdded(ctx))
		if err := idempotency.AddWrites(ctx, effectWrite("effects", "a"), effectWrite("effects", "b")); err != nil {
			return err
		}
		got = append(got, idempotency.WritesAdded(ctx))
		if err := idempotency.AddWrites(ctx, effectWrite("effects", "c")); err != nil {
			return err
		}
		got = append(got, idempotency.WritesAdded(ctx))
		return nil
	}))
	if err := h.HandleMessage(context.Background(), msg("added", "payload")); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0] != 0 || got[1] != 2 || got[2] != 3 {
		t.Errorf("WritesAdded along the handler: %v, want [0 2 3]", got)
	}
}

package idempotency

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

// A panicking handler's claim is released like a failed one's, so that its
// retry runs at once instead of being postponed until the claim's lease
// ends; the runtime still sees the panic.
func TestPanickingHandlerReleasesClaim(t *testing.T) {
	store := NewMemStore(time.Hour)
	g, err := New(store, Config{})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { panic("job exploded") }))
	m := &sqsworker.Message{ID: "m1", Body: "{}"}
	err = h.HandleMessage(context.Background(), m)
	var p *sqsworker.PanicError
	if !errors.As(err, &p) || p.Value != "job exploded" {
		t.Fatalf("error %v, want the panic as a *sqsworker.PanicError", err)
	}
	if r, ok := store.Get(DefaultKey(m)); ok {
		t.Errorf("claim still held after the panic: %+v", r)
	}
	if s := g.Stats(); s.Released != 1 {
		t.Errorf("stats %+v, want the claim released", s)
	}
}

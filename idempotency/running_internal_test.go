package idempotency

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

// keyed returns a message of id with the idempotency key "order-1".
func keyed(id string) *sqsworker.Message {
	return &sqsworker.Message{ID: id, Body: "payload", MessageAttributes: map[string]sqsworker.MessageAttribute{
		KeyAttribute: {DataType: "String", StringValue: "order-1"}}}
}

// waitersOf reports whether a duplicate waits for the holder of key in g.
func waitersOf(g *Guard, key string) bool {
	g.runningMu.Lock()
	defer g.runningMu.Unlock()
	r := g.running[key]
	return r != nil && r.done != nil
}

// A duplicate whose key a handler of the same Guard is handling (two copies
// in one batch, or a send retried after its reply was lost) waits for that
// handler rather than being postponed for the claim's lease, which would
// spend a receive and hold the job for the lease (the visibility timeout and
// the 30 s grace): it is acknowledged when the holder completes, runs when
// the holder fails, and is postponed as before when the holder outlasts the
// wait; it is not acknowledged when its context ends first. The Guard's map
// of running keys is empty once its handlers return.
func TestDuplicateWaitsForAHolderInTheSameGuard(t *testing.T) {
	for _, c := range []struct {
		name     string
		fail     error // the holder's outcome
		slow     bool  // the holder outlasts the wait
		cancel   bool  // the duplicate's context ends while it waits
		runs     int64 // of the handler, in all
		postpone bool  // the duplicate is postponed
	}{
		{name: "holder completes", runs: 1},
		{name: "holder fails", fail: errors.New("webhook down"), runs: 2},
		{name: "holder outlasts the wait", slow: true, runs: 1, postpone: true},
		{name: "duplicate's context ends", cancel: true, runs: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.slow {
				defer func(d time.Duration) { localWait = d }(localWait)
				localWait = 200 * time.Millisecond
			}
			g, err := New(NewMemStore(0), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			started, finish := make(chan struct{}), make(chan struct{})
			h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				if runs.Add(1) > 1 {
					return nil
				}
				close(started)
				<-finish
				return c.fail
			}))
			first := make(chan error, 1)
			go func() { first <- h.HandleMessage(context.Background(), keyed("m-1")) }()
			<-started
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			second := make(chan error, 1)
			go func() { second <- h.HandleMessage(ctx, keyed("m-2")) }()
			for !waitersOf(g, "order-1") {
				time.Sleep(time.Millisecond)
			}
			if c.cancel {
				cancel()
			}
			var err2 error
			if c.slow || c.cancel {
				err2 = <-second // gave up waiting, the holder still running
				close(finish)
			} else {
				close(finish)
				err2 = <-second
			}
			if err := <-first; !errors.Is(err, c.fail) {
				t.Errorf("holder: %v, want %v", err, c.fail)
			}
			var ra *sqsworker.RetryAfterError
			postponed := errors.As(err2, &ra) && ra.Err == nil
			switch {
			case c.cancel:
				if err2 == nil {
					t.Error("duplicate: acknowledged after its context ended, its holder still running")
				}
			case postponed != c.postpone || (!c.postpone && err2 != nil):
				t.Errorf("duplicate: %v, postponed %v, want %v", err2, postponed, c.postpone)
			}
			if n := runs.Load(); n != c.runs {
				t.Errorf("handler ran %d times, want %d", n, c.runs)
			}
			s := g.Stats()
			if waited := !c.postpone && !c.cancel; s.Waited != map[bool]int64{true: 1}[waited] || (c.postpone && s.InProgress != 1) {
				t.Errorf("stats %+v: want Waited %d, and the slow holder's duplicate postponed", s, map[bool]int64{true: 1}[waited])
			}
			g.runningMu.Lock()
			defer g.runningMu.Unlock()
			if len(g.running) != 0 {
				t.Errorf("%d claims still noted as running", len(g.running))
			}
		})
	}
}

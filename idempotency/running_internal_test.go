package idempotency

import (
	"context"
	"errors"
	"fmt"
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

// waitersOf reports whether a message waits for the handler of key in g.
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
// the 30 s grace): it is acknowledged when the holder completes, and runs
// when the holder fails. It is postponed as before when the holder runs
// past localWait from its start (whether the duplicate came early and
// waited, or late and did not), or when half of what was left to its
// context's deadline has passed; when its context is cancelled while it
// waits, it returns the cause without a request to the store. The Guard's
// map of running keys is empty once its handlers return.
func TestDuplicateWaitsForAHolderInTheSameGuard(t *testing.T) {
	for _, c := range []struct {
		name     string
		fail     error         // the holder's outcome
		wait     time.Duration // localWait
		late     bool          // the duplicate comes after localWait
		deadline time.Duration // of the duplicate's context
		cancel   bool          // the duplicate's context is cancelled while it waits
		runs     int64         // of the handler, in all
		postpone bool          // the duplicate is postponed
	}{
		{name: "holder completes", wait: time.Hour, runs: 1},
		{name: "holder fails", wait: time.Hour, fail: errors.New("webhook down"), runs: 2},
		{name: "holder outlasts the wait", wait: 200 * time.Millisecond, runs: 1, postpone: true},
		{name: "duplicate comes late", wait: 200 * time.Millisecond, late: true, runs: 1, postpone: true},
		{name: "duplicate's deadline", wait: time.Hour, deadline: 400 * time.Millisecond, runs: 1, postpone: true},
		{name: "duplicate's context cancelled", wait: time.Hour, cancel: true, runs: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := NewMemStore(0)
			g, err := New(store, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			g.localWait = c.wait
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
			if c.late {
				time.Sleep(2 * c.wait)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if c.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			claims := store.Calls(OpClaim)
			second := make(chan error, 1)
			go func() { second <- h.HandleMessage(ctx, keyed("m-2")) }()
			var err2 error
			if c.postpone || c.cancel {
				if c.cancel {
					for !waitersOf(g, "order-1") {
						time.Sleep(time.Millisecond)
					}
					cancel()
				}
				err2 = <-second // gave up waiting, the holder still running
				close(finish)
			} else {
				for !waitersOf(g, "order-1") {
					time.Sleep(time.Millisecond)
				}
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
				if !errors.Is(err2, context.Canceled) || store.Calls(OpClaim) != claims {
					t.Errorf("duplicate: %v after %d claims, want context.Canceled and no claim", err2, store.Calls(OpClaim)-claims)
				}
			case postponed != c.postpone || (!c.postpone && err2 != nil):
				t.Errorf("duplicate: %v, postponed %v, want %v", err2, postponed, c.postpone)
			}
			if n := runs.Load(); n != c.runs {
				t.Errorf("handler ran %d times, want %d", n, c.runs)
			}
			s := g.Stats()
			if waited := !c.postpone && !c.cancel; s.Waited != map[bool]int64{true: 1}[waited] || (c.postpone && s.InProgress != 1) || s.StoreErrors != 0 {
				t.Errorf("stats %+v: want Waited %d, no store error, and a postponed duplicate counted", s, map[bool]int64{true: 1}[waited])
			}
			g.runningMu.Lock()
			defer g.runningMu.Unlock()
			if len(g.running) != 0 {
				t.Errorf("%d keys still noted as running", len(g.running))
			}
		})
	}
}

// A Guard's middleware nested in its own (a configuration mistake), or in
// another Guard's of the same store, does not wait for itself, and runs the
// handler once, under the outer claim. The inner one claimed the key again,
// found the outer claim and postponed the job: the handler never ran, the
// job postponed on every receive, never dead-lettered.
func TestNestedGuardDoesNotWaitForItself(t *testing.T) {
	store := NewMemStore(0)
	g, err := New(store, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	other, err := New(store, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	g.localWait, other.localWait = time.Hour, time.Hour
	for name, inner := range map[string]*Guard{"itself": g, "another Guard of the store": other} {
		var runs atomic.Int64
		h := g.Middleware(inner.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
			runs.Add(1)
			return nil
		})))
		done := make(chan error, 1)
		m := keyed("m-" + name)
		m.MessageAttributes[KeyAttribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: "order-" + name}
		go func() { done <- h.HandleMessage(context.Background(), m) }()
		select {
		case err := <-done:
			if err != nil || runs.Load() != 1 {
				t.Errorf("nested in %s: %v, the handler ran %d times; want nil, once", name, err, runs.Load())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("nested in %s: the inner middleware waits for the outer one", name)
		}
	}
	if s := g.Stats(); s.Waited != 0 || s.Claimed != 2 {
		t.Errorf("stats %+v, want 2 claims, no wait", s)
	}
}

// Sixteen messages of one key at once under one Guard (a batch of copies)
// run the handler once: the first claims, the others wait for it one after
// another (each waking to find the key completed, or held by the next
// waiter), and are acknowledged, none postponed. Nothing is left noted as
// running.
func TestManyWaitersOfOneKey(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(map[bool]string{false: "holder completes", true: "first holder fails"}[fail], func(t *testing.T) {
			g, err := New(NewMemStore(0), Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			g.localWait = time.Hour
			var runs atomic.Int64
			h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
				time.Sleep(20 * time.Millisecond)
				if runs.Add(1) == 1 && fail {
					return errors.New("webhook down")
				}
				return nil
			}))
			errs := make(chan error, 16)
			for i := range 16 {
				go func() { errs <- h.HandleMessage(context.Background(), keyed(fmt.Sprint("m-", i))) }()
			}
			failed := 0
			for range 16 {
				if err := <-errs; err != nil {
					failed++
					if !fail {
						t.Errorf("a copy: %v", err)
					}
				}
			}
			want := map[bool]int64{false: 1, true: 2}[fail]
			if n := runs.Load(); n != want || failed != int(want-1) {
				t.Errorf("handler ran %d times, %d copies failed; want %d runs, %d failed", n, failed, want, want-1)
			}
			if s := g.Stats(); s.InProgress != 0 || s.Waited != 15 {
				t.Errorf("stats %+v: want 15 waited, none postponed", s)
			}
			g.runningMu.Lock()
			defer g.runningMu.Unlock()
			if len(g.running) != 0 {
				t.Errorf("%d keys still noted as running", len(g.running))
			}
		})
	}
}

package worker_test

// Tests of the per-receive-loop handler contexts: whatever the
// shape of the consumer (several receive loops, heartbeat on or off, FIFO
// groups, a MultiWorker, Run's context cancelled rather than Shutdown), a
// handler that outlives the shutdown deadline sees its context cancelled
// with the cause ErrShutdown, its message is released, and every handler
// context is done once Run has returned.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// blockers is a handler that blocks until its context ends, recording the
// contexts and their causes.
type blockers struct {
	mu      sync.Mutex
	ctxs    []context.Context
	causes  []error
	started chan struct{}
}

func newBlockers(n int) *blockers { return &blockers{started: make(chan struct{}, n)} }

func (b *blockers) HandleMessage(ctx context.Context, m *sqsworker.Message) error {
	b.mu.Lock()
	b.ctxs = append(b.ctxs, ctx)
	b.mu.Unlock()
	b.started <- struct{}{}
	<-ctx.Done()
	b.mu.Lock()
	b.causes = append(b.causes, context.Cause(ctx))
	b.mu.Unlock()
	return ctx.Err()
}

// shutDownAtDeadline waits until n handlers have started, then shuts the
// runtime down with a deadline of 200 ms, which they all outlast.
func (b *blockers) shutDownAtDeadline(t *testing.T, n int, shutdown func(context.Context) error) {
	t.Helper()
	for range n {
		select {
		case <-b.started:
		case <-time.After(20 * time.Second):
			t.Fatal("handlers did not start")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = shutdown(ctx)
}

func (b *blockers) check(t *testing.T, n int) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.causes) != n {
		t.Errorf("%d handlers ended, want %d", len(b.causes), n)
	}
	for _, c := range b.causes {
		if !errors.Is(c, worker.ErrShutdown) {
			t.Errorf("handler context cause = %v, want ErrShutdown", c)
		}
	}
	for _, ctx := range b.ctxs {
		if ctx.Err() == nil {
			t.Error("a handler context is not done after Run returned")
		}
	}
}

func TestLoopContextsShutdownCause(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cfg  worker.Config
		fifo bool
	}{
		"pollers4":             {cfg: worker.Config{Pollers: 4, Concurrency: 8}},
		"pollers4-noheartbeat": {cfg: worker.Config{Pollers: 4, Concurrency: 8, DisableHeartbeat: true}},
		"fifo":                 {cfg: worker.Config{Pollers: 2, Concurrency: 8}, fifo: true},
		"fifo-noheartbeat":     {cfg: worker.Config{Pollers: 2, Concurrency: 8, DisableHeartbeat: true}, fifo: true},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := sqstest.NewFake()
			var url string
			n := 6
			if tc.fifo {
				url = fakeFIFO(f, "loopctx", map[string]string{"VisibilityTimeout": "300"})
				// Two messages per group: the second waits behind the
				// blocked first and is released unhandled.
				fakeGroup(f, url, "a", "a0", "a1")
				fakeGroup(f, url, "b", "b0", "b1")
				fakeGroup(f, url, "c", "c0", "c1")
				n = 3
			} else {
				url = f.CreateQueue("loopctx", map[string]string{"VisibilityTimeout": "300"})
				for _, b := range []string{"m0", "m1", "m2", "m3", "m4", "m5"} {
					f.Send(url, b)
				}
			}
			b := newBlockers(16)
			cfg := tc.cfg
			cfg.QueueURL = url
			r := start(t, f, cfg, b)
			b.shutDownAtDeadline(t, n, r.w.Shutdown)
			r.stop(20 * time.Second)
			b.check(t, n)
			total := 6
			// At least every message released, none failed. (More than
			// total when the last long poll took a message released at
			// the deadline again: see
			// TestShutdownDeadlineReleaseNotReceivedAgain.)
			if s := r.w.Stats(); s.Released < int64(total) || s.Failed != 0 || s.DeadLettered != 0 {
				t.Errorf("stats = %+v, want at least %d released, none failed", s, total)
			}
		})
	}
}

// Run's context cancelled: the handlers get ShutdownTimeout, then ErrShutdown.
func TestLoopContextsRunCtxCancelled(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("loopctx", map[string]string{"VisibilityTimeout": "300"})
	f.Send(url, "m0")
	f.Send(url, "m1")
	b := newBlockers(4)
	w, err := worker.New(f, worker.Config{QueueURL: url, Pollers: 3, WaitTime: time.Second, ShutdownTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, b) }()
	<-b.started
	<-b.started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return")
	}
	b.check(t, 2)
}

// MultiWorker: the same for the handlers of every queue.
func TestLoopContextsMultiShutdownCause(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	a := f.CreateQueue("a", map[string]string{"VisibilityTimeout": "300"})
	c := f.CreateQueue("c", map[string]string{"VisibilityTimeout": "300"})
	for _, u := range []string{a, c} {
		f.Send(u, "x")
		f.Send(u, "y")
	}
	b := newBlockers(8)
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 4, Queues: []worker.QueueConfig{
		{Config: worker.Config{QueueURL: a, Pollers: 2}, Priority: 1, Reserved: 2},
		{Config: worker.Config{QueueURL: c, Pollers: 2}, Reserved: 2},
	}}, b)
	b.shutDownAtDeadline(t, 4, r.w.Shutdown)
	r.stop(20 * time.Second)
	b.check(t, 4)
}

// A handler that ignores its context holds Run up past the deadline; when it
// returns, its context has been cancelled with ErrShutdown (not with the
// cancel of its receive loop's context, which comes only once Run returns),
// and its message is released, not counted as a failure.
func TestLoopContextsHandlerIgnoringCtx(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("loopctx", map[string]string{"VisibilityTimeout": "300"})
	f.Send(url, "m0")
	started := make(chan struct{})
	unblock := make(chan struct{})
	cause := make(chan error, 1)
	r := start(t, f, worker.Config{QueueURL: url, Pollers: 4}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			close(started)
			<-unblock // ignores ctx past the deadline
			// Shutdown returns at its deadline, perhaps before the worker
			// has cancelled the handlers: wait for that, bounded.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
			cause <- context.Cause(ctx)
			return errors.New("gave up")
		}))
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := r.w.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded", err)
	}
	close(unblock)
	r.stop(20 * time.Second)
	if c := <-cause; !errors.Is(c, worker.ErrShutdown) {
		t.Errorf("cause = %v, want ErrShutdown", c)
	}
	if s := r.w.Stats(); s.Released != 1 || s.Failed != 0 {
		t.Errorf("stats = %+v, want 1 released, none failed", s)
	}
}

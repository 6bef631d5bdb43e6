package worker_test

// Review tests of the per-receive-loop handler contexts: whatever the
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

func TestReviewLoopContextsShutdownCause(t *testing.T) {
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
			for range n {
				select {
				case <-b.started:
				case <-time.After(20 * time.Second):
					t.Fatal("handlers did not start")
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_ = r.w.Shutdown(ctx)
			r.stop(20 * time.Second)
			b.check(t, n)
			total := 6
			if s := r.w.Stats(); s.Released != int64(total) || s.Failed != 0 || s.DeadLettered != 0 {
				t.Errorf("stats = %+v, want %d released, none failed", s, total)
			}
		})
	}
}

// Run's context cancelled: the handlers get ShutdownTimeout, then ErrShutdown.
func TestReviewLoopContextsRunCtxCancelled(t *testing.T) {
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
func TestReviewLoopContextsMultiShutdownCause(t *testing.T) {
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
	for range 4 {
		select {
		case <-b.started:
		case <-time.After(20 * time.Second):
			t.Fatal("handlers did not start")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	r.stop(20 * time.Second)
	b.check(t, 4)
}

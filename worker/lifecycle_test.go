package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

var quiet = slog.New(slog.DiscardHandler)

// runner is what a Worker and a MultiWorker have in common.
type runner interface {
	Run(context.Context, sqsworker.Handler) error
	Shutdown(context.Context) error
	Ready() bool
}

// Both runtimes run once: a second Run while running returns ErrRunning,
// and after Run has returned, or when Shutdown came first, ErrClosed.
// Shutdown of one that never ran returns at once.
func TestFakeRunsOnce(t *testing.T) {
	t.Parallel()
	nop := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	makers := map[string]func(t *testing.T, f *sqstest.Fake) runner{
		"Worker": func(t *testing.T, f *sqstest.Fake) runner {
			w, err := worker.New(f, worker.Config{QueueURL: f.CreateQueue("q", nil), WaitTime: time.Second, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return w
		},
		"MultiWorker": func(t *testing.T, f *sqstest.Fake) runner {
			w, err := worker.NewMulti(f, worker.MultiConfig{Concurrency: 4, Logger: quiet, Queues: []worker.QueueConfig{
				{Config: worker.Config{QueueURL: f.CreateQueue("a", nil), WaitTime: time.Second}},
				{Config: worker.Config{QueueURL: f.CreateQueue("b", nil), WaitTime: time.Second}},
			}})
			if err != nil {
				t.Fatal(err)
			}
			return w
		},
	}
	for name, newRunner := range makers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()

			w := newRunner(t, sqstest.NewFake())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, nop) }()
			for !w.Ready() {
				if ctx.Err() != nil {
					t.Fatal("never ready")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := w.Run(ctx, nop); !errors.Is(err, worker.ErrRunning) {
				t.Errorf("Run while running = %v, want ErrRunning", err)
			}
			if err := w.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown = %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil after Shutdown", err)
			}
			if err := w.Run(ctx, nop); !errors.Is(err, worker.ErrClosed) {
				t.Errorf("Run after Run = %v, want ErrClosed", err)
			}

			w = newRunner(t, sqstest.NewFake())
			if err := w.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown before Run = %v", err)
			}
			if err := w.Run(ctx, nop); !errors.Is(err, worker.ErrClosed) {
				t.Errorf("Run after Shutdown = %v, want ErrClosed", err)
			}
		})
	}
}

// Shutdown with a context already ended, of a runtime that never ran or
// whose Run has returned, has nothing to wait for: it returns nil, not the
// context's error (a select on both would pick either at random).
func TestFakeShutdownWithEndedContextOfStoppedRuntime(t *testing.T) {
	t.Parallel()
	nop := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", nil)
	for i := range 20 {
		w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Shutdown(ended); err != nil {
			t.Fatalf("try %d: Shutdown before Run with an ended context = %v, want nil", i, err)
		}
		m, err := worker.NewMulti(f, worker.MultiConfig{Concurrency: 2, Logger: quiet,
			Queues: []worker.QueueConfig{{Config: worker.Config{QueueURL: url, WaitTime: time.Second}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Shutdown(ended); err != nil {
			t.Fatalf("try %d: MultiWorker.Shutdown before Run with an ended context = %v, want nil", i, err)
		}
	}
	// After Run has returned.
	w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ended, nop); err != nil {
		t.Fatalf("Run with an ended context = %v", err)
	}
	for i := range 20 {
		if err := w.Shutdown(ended); err != nil {
			t.Fatalf("try %d: Shutdown after Run returned, with an ended context = %v, want nil", i, err)
		}
	}
}

package batch_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A chunk on its last attempt whose run the runtime cuts short because it
// stops (a worker's shutdown deadline, a Lambda invocation's deadline) is
// released, not dead-lettered (on its last receive it waits in a fresh
// copy): the batch does not record it failed, but shows it pending.
// Before, it was listed failed ("context canceled") while it was back on
// its queue, until its copy ran. A run cut short for another cause (its
// handler timeout), after which the runtime dead-letters it, is recorded
// failed as before.
func TestStoppingIsNotRecordedFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause  error
		failed int
	}{
		{worker.ErrShutdown, 0},
		{lambda.ErrDeadline, 0},
		{worker.ErrHandlerTimeout, 1},
	} {
		t.Run(tc.cause.Error(), func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, batch.Config{MaxReceiveCount: 1})
			ctx := context.Background()
			if err := e.coord.Create(ctx, e.spec("stop", 1)); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancelCause(ctx)
			h := e.coord.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				cancel(tc.cause)
				<-ctx.Done()
				return ctx.Err()
			}))
			if err := h.HandleMessage(rctx, receive(t, e.sqs, e.work, 1)[0]); !errors.Is(err, context.Canceled) {
				t.Fatalf("the run: %v", err)
			}
			if p := progress(t, e.coord, "stop"); p.Failed != tc.failed || p.Pending != 1-tc.failed {
				t.Errorf("cut short by %v: %+v, want %d failed", tc.cause, p, tc.failed)
			}
		})
	}
}

// The same in a worker on the local SQS whose queue dead-letters a chunk
// after one receive: the worker stops while the chunk runs, releases it
// (nothing dead-lettered) and the batch shows it pending, not failed; the
// next worker runs it once more, counts it and sends the completion.
func TestEmulatorShutdownOnLastReceiveIsNotFailed(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 1)
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("stop", 1)); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	var cut atomic.Bool // the first run was cut short
	h := e.coord.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if cut.CompareAndSwap(false, true) {
			close(started)
			<-ctx.Done() // until the worker cuts it short
			return ctx.Err()
		}
		return nil
	}))
	w, err := worker.New(e.sqs, worker.Config{QueueURL: e.work, WaitTime: time.Second, DisableDepth: true,
		ShutdownTimeout: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(rctx, h) }()
	<-started
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, f, d := localtest.Depth(t, e.sqs, e.chunks.DLQURL); v+f+d != 0 {
		t.Fatalf("%d chunks dead-lettered", v+f+d)
	}
	if p := progress(t, e.coord, "stop"); p.Failed != 0 || p.Pending != 1 {
		t.Errorf("after the worker stopped: %+v, want the chunk pending, not failed", p)
	}
	e.runWorker(t, h, "the chunk counted, the completion sent", func() bool {
		return !progress(t, e.coord, "stop").Notified.IsZero()
	})
	if p := progress(t, e.coord, "stop"); p.Done != 1 || p.Failed != 0 {
		t.Errorf("after the next worker: %+v", p)
	}
}

package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// readyLog drops the logs of the Ready tests.
var readyLog = slog.New(slog.DiscardHandler)

// Ready is false before Run, true once Run has read the queue, and false
// from the start of the shutdown on — while a handler still runs — and
// after Run returns.
func TestReadyLifecycle(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	started, release := make(chan struct{}), make(chan struct{})
	w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, Logger: readyLog})
	if err != nil {
		t.Fatal(err)
	}
	if w.Ready() {
		t.Fatal("Ready before Run")
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			close(started)
			<-release
			return nil
		}))
	}()
	localtest.Eventually(t, 5*time.Second, w.Ready, "not ready after Run started")
	f.Send(url, "slow")
	<-started

	shut := make(chan error, 1)
	go func() { shut <- w.Shutdown(context.Background()) }()
	localtest.Eventually(t, 5*time.Second, func() bool { return !w.Ready() }, "still ready after Shutdown started")
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while its handler was blocked", err)
	default:
	}
	close(release)
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if w.Ready() {
		t.Error("Ready after Run returned")
	}
}

// A cancelled context stops the worker like Shutdown: Ready turns false.
func TestReadyContextCancelled(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, Logger: readyLog})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	localtest.Eventually(t, 5*time.Second, w.Ready, "not ready after Run started")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if w.Ready() {
		t.Error("Ready after Run returned")
	}
}

// While Run retries an unreachable queue, and when the queue does not
// exist, the worker is not ready.
func TestReadyNotBeforeQueueRead(t *testing.T) {
	t.Parallel()
	nop := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })

	t.Run("unreachable", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		url := f.CreateQueue("jobs", nil)
		f.FailNext(sqstest.OpGetQueueAttributes, &smithy.GenericAPIError{Code: "RequestThrottled", Fault: smithy.FaultClient}, 1000)
		w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, Logger: readyLog})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx, nop) }()
		localtest.Eventually(t, 5*time.Second, func() bool { return f.Calls(sqstest.OpGetQueueAttributes) >= 2 }, "queue not retried")
		if w.Ready() {
			t.Error("Ready while the queue cannot be read")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if w.Ready() {
			t.Error("Ready after Run returned")
		}
	})

	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		w, err := worker.New(f, worker.Config{QueueURL: sqstest.QueueURL("nope"), WaitTime: time.Second, Logger: readyLog})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Run(context.Background(), nop); err == nil || errors.Is(err, worker.ErrClosed) {
			t.Fatalf("Run on a missing queue returned %v, want its error", err)
		}
		if w.Ready() {
			t.Error("Ready after Run failed")
		}
	})
}

package worker_test

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// handlerGoroutines counts the goroutines of synctest bubbles parked in, or
// running, the run queue's serve loop: those of the test's worker, not of
// workers other tests left running.
func handlerGoroutines() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		header, _, _ := strings.Cut(g, "\n")
		if strings.Contains(header, "synctest bubble") && strings.Contains(g, "worker.(*runq).serve(") {
			n++
		}
	}
	return n
}

// A burst of 200 slow messages on a worker with Concurrency 200 starts a
// handler goroutine for each; two minutes after it, with the queue empty,
// those goroutines have returned, and messages sent later are handled.
func TestFakeIdleHandlerGoroutinesReturn(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "60"})
		for range 200 {
			f.Send(url, "burst")
		}
		w, err := worker.New(f, worker.Config{QueueURL: url, Concurrency: 200, WaitTime: time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			time.Sleep(2 * time.Second)
			return nil
		})
		done := make(chan error, 1)
		go func() { done <- w.Run(context.Background(), h) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := handlerGoroutines(); n < 200 {
			t.Fatalf("%d handler goroutines during the burst of 200 slow messages", n)
		}
		time.Sleep(3 * time.Minute)
		synctest.Wait()
		if n := handlerGoroutines(); n != 0 {
			t.Errorf("%d handler goroutines after 3 minutes idle, want 0", n)
		}
		for range 5 {
			f.Send(url, "later")
		}
		time.Sleep(30 * time.Second)
		if s := w.Stats(); s.Succeeded != 205 {
			t.Errorf("%d messages handled, want 205", s.Succeeded)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown = %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

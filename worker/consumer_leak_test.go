package worker_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

// A Run that fails on a configuration only the queue's attributes show to
// be wrong (a heartbeat Threshold not below the queue's visibility
// timeout) leaves nothing running behind it: no timer keeps the worker
// alive, and it is garbage collected once dropped.
func TestFakeFailedRunLeavesNothing(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "30"})
	collected := make(chan struct{})
	func() {
		w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, Logger: quiet,
			Heartbeat: visibility.Config{Threshold: time.Minute}})
		if err != nil {
			t.Skipf("New refuses the configuration already: %v", err)
		}
		runtime.AddCleanup(w, func(ch chan struct{}) { close(ch) }, collected)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = w.Run(ctx, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
		if err == nil {
			t.Fatal("Run = nil for a heartbeat Threshold above the queue's visibility timeout")
		}
		t.Logf("Run = %v", err)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		runtime.GC()
		select {
		case <-collected:
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the Worker whose Run failed is still reachable 20s later: something it started is left running")
		}
	}
}

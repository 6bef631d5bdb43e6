package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A circuit breaker probe whose handler hangs (a call to the dependency
// that never returns, with no timeout, and the handler ignores its context)
// gives its turn back after MaxProbeInterval: the dependency back, the next
// probe succeeds and the worker takes messages again, rather than stay
// half-open, taking nothing, for as long as the call hangs.
func TestFakeStuckProbeGivesItsTurnBack(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("stuck", map[string]string{"VisibilityTimeout": "60"})
	f.Send(url, "first")
	hang := make(chan struct{})
	var calls, ok atomic.Int32
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 4, Backoff: noDelay,
		Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 200 * time.Millisecond, MaxProbeInterval: 2 * time.Second}},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			switch calls.Add(1) {
			case 1:
				return sqsworker.Unavailable(errors.New("down"))
			case 2: // the probe: its call hangs, whatever its context says
				<-hang
				return nil
			}
			ok.Add(1)
			return nil
		}))
	t.Cleanup(func() { close(hang) }) // before the worker's stop, which waits for it
	localtest.Eventually(t, 10*time.Second, func() bool { return calls.Load() >= 2 }, "no probe: %+v", r.w.Stats())
	f.Send(url, "second")
	f.Send(url, "third")
	localtest.Eventually(t, 30*time.Second, func() bool { return ok.Load() >= 2 }, "the worker took nothing after its probe hung: %+v", r.w.Stats())
}

package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
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

// handled counts the handler calls that returned, by the HandlerDuration the
// executor observes once it has recorded the call's outcome with the
// circuit breaker.
type handled struct {
	metrics.Nop
	n atomic.Int64
}

func (h *handled) Observe(name string, _ float64, _ metrics.Dims) {
	if name == metrics.HandlerDuration {
		h.n.Add(1)
	}
}

// A probe given up on (out for MaxProbeInterval) whose handler returns late
// with success, while the newer probe is still out and the dependency still
// down, does not close the breaker: only the newer probe's outcome settles
// it, and its failure keeps the breaker open. The messages sent meanwhile
// stay in the queue, their receives unspent. Before, the stale success
// closed the breaker: the worker took the waiting messages at once and ran
// them against the dependency still down.
func TestFakeStaleProbeSuccessDoesNotClose(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("stale", map[string]string{"VisibilityTimeout": "60"})
	down := sqsworker.Unavailable(errors.New("connection refused"))
	hung, slow := make(chan struct{}), make(chan struct{})
	started := make(chan string, 4)
	var others atomic.Int32
	var ended handled
	// A failed message keeps away until the test is over: none but those
	// sent for it are probes.
	away := sqsworker.ExponentialBackoff{Base: time.Minute, Cap: time.Minute, Jitter: func() float64 { return 0.99 }}
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 4, Backoff: away, Metrics: &ended,
		Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 2 * time.Second, MaxProbeInterval: 5 * time.Second, CloseAfter: 1}},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			switch m.Body {
			case "open":
				return down
			case "hang": // the first probe: its call hangs, then succeeds
				started <- m.Body
				<-hung
				return nil
			case "slow": // the second probe: the dependency still down
				started <- m.Body
				<-slow
				return down
			}
			others.Add(1)
			return down
		}))
	t.Cleanup(func() { close(slow) })
	wait := func(body string) {
		t.Helper()
		select {
		case got := <-started:
			if got != body {
				t.Fatalf("%q started, want %q", got, body)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%q did not start: %+v", body, r.w.Stats())
		}
	}
	f.Send(url, "open")
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().BreakerOpens == 1 }, "the breaker did not open: %+v", r.w.Stats())
	time.Sleep(1500 * time.Millisecond) // a long poll made before it opened has ended
	f.Send(url, "hang")
	wait("hang")
	f.Send(url, "slow")
	wait("slow") // after MaxProbeInterval
	if p := r.w.Stats().BreakerProbes; p != 2 {
		t.Fatalf("%d probes, want 2: the hung one and the one after it", p)
	}
	for range 3 {
		f.Send(url, "other")
	}
	n := ended.n.Load()
	close(hung)
	localtest.Eventually(t, 10*time.Second, func() bool { return ended.n.Load() > n }, "the hung probe did not end")
	// Closed, the worker would take the others at once.
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline) && others.Load() == 0; {
		time.Sleep(10 * time.Millisecond)
	}
	if n := others.Load(); n > 0 {
		t.Fatalf("%d messages ran against the dependency still down, after the given-up probe's late success", n)
	}
	slow <- struct{}{}
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().BreakerOpens == 2 }, "the newer probe's failure did not open the breaker: %+v", r.w.Stats())
	if visible, inFlight, _ := f.Depth(url); visible != 3 || others.Load() != 0 {
		t.Errorf("%d visible, %d in flight, %d run: want the 3 others in the queue, not received", visible, inFlight, others.Load())
	}
}

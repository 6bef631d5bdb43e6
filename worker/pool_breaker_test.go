package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// breakerRace is a MultiWorker of two queues sharing a pool of two slots:
// a high one (priority 1) whose dependency is down, and a low one. The
// high queue's circuit breaker opens exactly between its receive loop's
// question to the breaker and the loop's acting on the answer: the hook
// there, once the loop has received high messages, lets their handlers
// (held until then) fail with an outage-class error and waits until the
// breaker has opened. It stays open for at least 48 minutes (a probe
// interval of an hour, jittered by ±20%).
type breakerRace struct {
	m *MultiWorker

	gate   chan struct{} // closed by the hook: the high handlers fail
	opened chan struct{} // closed when the high queue's breaker opens
	once   sync.Once
	fired  atomic.Bool // the hook opened the breaker
	low    atomic.Int64
}

func newBreakerRace(t *testing.T, api API, high, low string) *breakerRace {
	t.Helper()
	r := &breakerRace{gate: make(chan struct{}), opened: make(chan struct{})}
	highH := sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
		return sqsworker.Unavailable(errors.New("payments service down"))
	})
	lowH := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		r.low.Add(1)
		return nil
	})
	m, err := NewMulti(api, MultiConfig{
		Concurrency: 2,
		Logger:      slog.New(slog.DiscardHandler),
		Queues: []QueueConfig{
			{Config: Config{QueueURL: high, WaitTime: time.Second, Metrics: breakerOpened{r},
				Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour}}, Priority: 1, Handler: highH},
			{Config: Config{QueueURL: low, WaitTime: time.Second}, Handler: lowH},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	hw := m.workers[0]
	// Only the high queue's one receive loop runs it.
	hw.breakerAsked = func() {
		if r.fired.Load() || hw.counts.Received.Load() == 0 {
			return
		}
		r.fired.Store(true)
		close(r.gate)
		<-r.opened
	}
	r.m = m
	return r
}

// breakerOpened is the high queue's metrics: it closes opened when the
// queue's breaker opens.
type breakerOpened struct{ r *breakerRace }

func (b breakerOpened) Add(string, int64, metrics.Dims)       {}
func (b breakerOpened) Observe(string, float64, metrics.Dims) {}
func (b breakerOpened) Set(name string, v float64, _ metrics.Dims) {
	if name == metrics.BreakerState && v == float64(breaker.Open) {
		b.r.once.Do(func() { close(b.r.opened) })
	}
}

// check asserts the outcome: all lowN low messages handled and deleted,
// while the high queue's breaker, opened once by the hook, is still open
// (no probe let through).
func (r *breakerRace) check(t *testing.T, lowN int) {
	t.Helper()
	if !r.fired.Load() {
		t.Fatal("the high queue's breaker did not open between its receive loop's question and its act: the test did not set up the race")
	}
	s := r.m.Stats()
	if s[0].BreakerOpens != 1 || s[0].BreakerProbes != 0 {
		t.Errorf("high queue: breaker opened %d times and let %d probes through, want opened once and still open: %+v",
			s[0].BreakerOpens, s[0].BreakerProbes, s[0])
	}
	if n := r.low.Load(); n != int64(lowN) || s[1].Deleted != int64(lowN) {
		t.Errorf("low queue: %d of %d messages handled, %d deleted, while the high queue's breaker is open: held back by it: %+v",
			n, lowN, s[1].Deleted, s[1])
	}
}

// stop shuts the worker down and checks that Run returned nil.
func (r *breakerRace) stop(t *testing.T, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.m.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

// A high queue's breaker that opens between its receive loop's question to
// the breaker and the loop's acting on the answer pauses the loop, rather
// than have it wait out the open breaker counted active: the low queue's
// messages are all handled within a minute, while the high breaker stays
// open for at least 48. On fake time: the outcome does not depend on
// timing.
func TestFakeMultiBreakerOpeningMidCheckLetsLowerQueuesRun(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		high, low := f.CreateQueue("high", nil), f.CreateQueue("low", nil)
		for range 50 {
			f.Send(high, "high")
		}
		const lowN = 20
		for range lowN {
			f.Send(low, "low")
		}
		r := newBreakerRace(t, f, high, low)
		done := make(chan error, 1)
		go func() { done <- r.m.Run(context.Background(), nil) }()
		time.Sleep(time.Minute)
		synctest.Wait()
		r.check(t, lowN)
		r.stop(t, done)
	})
}

// The same on the emulator: the low queue's messages are all handled while
// the high queue's breaker, opened between its receive loop's question and
// its act, is open.
func TestMultiBreakerOpeningMidCheckLetsLowerQueuesRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	high := localtest.NewQueue(t, c, localtest.QueueOptions{})
	low := localtest.NewQueue(t, c, localtest.QueueOptions{})
	bodies := func(body string, n int) []string {
		b := make([]string, n)
		for i := range b {
			b[i] = body
		}
		return b
	}
	localtest.Send(t, c, high.URL, "", bodies("high", 50)...)
	const lowN = 20
	localtest.Send(t, c, low.URL, "", bodies("low", lowN)...)
	r := newBreakerRace(t, c, high.URL, low.URL)
	done := make(chan error, 1)
	go func() { done <- r.m.Run(context.Background(), nil) }()
	t.Cleanup(func() { r.stop(t, done) })
	// A generous deadline: the outcome, not how fast, is asserted.
	for deadline := time.Now().Add(time.Minute); r.m.Stats()[1].Deleted < lowN && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	r.check(t, lowN)
}

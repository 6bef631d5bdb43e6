package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// dependency is a downstream service a handler calls, down for a while.
type dependency struct {
	down atomic.Bool
	mu   sync.Mutex
	// attempts counts the handler's calls per body while it was down.
	attempts map[string]int
	applied  map[string]int
}

func newDependency() *dependency {
	return &dependency{attempts: map[string]int{}, applied: map[string]int{}}
}

func (d *dependency) handle(_ context.Context, m *sqsworker.Message) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.down.Load() {
		d.attempts[m.Body]++
		return sqsworker.Unavailable(errors.New("dial tcp 127.0.0.1:5432: connection refused"))
	}
	d.applied[m.Body]++
	return nil
}

func (d *dependency) check(t *testing.T, bodies []string) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	worst := 0
	for _, b := range bodies {
		if d.applied[b] != 1 {
			t.Errorf("message %s applied %d times, want once", b, d.applied[b])
		}
		worst = max(worst, d.attempts[b])
	}
	t.Logf("most failed attempts of one message during the outage: %d", worst)
}

// A dependency down for a while opens the breaker: the worker stops
// receiving, so the messages' receive counts stay below the redrive policy's
// maxReceiveCount, nothing is dead-lettered, and everything is handled once
// the dependency is back.
func TestFakeBreakerKeepsOutageOutOfDLQ(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	dlq := f.CreateQueue("dlq", nil)
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "5",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":5}`})
	dep := newDependency()
	dep.down.Store(true)
	var bodies []string
	for i := range 100 {
		bodies = append(bodies, fmt.Sprint(i))
		f.Send(url, bodies[i])
	}
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 16, Backoff: noDelay,
		Breaker: sqsworker.BreakerConfig{ProbeInterval: time.Second, MaxProbeInterval: 2 * time.Second}},
		sqsworker.HandlerFunc(dep.handle))
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().BreakerOpens >= 1 }, "breaker never opened: %+v", r.w.Stats())
	time.Sleep(8 * time.Second) // the outage goes on
	received := r.w.Stats().Received
	dep.down.Store(false)
	localtest.Eventually(t, 60*time.Second, func() bool { v, fl, d := f.Depth(url); return v+fl+d == 0 }, "not drained: %+v", r.w.Stats())
	if v, fl, d := f.Depth(dlq); v+fl+d != 0 {
		t.Errorf("%d messages dead-lettered during the outage, want none", v+fl+d)
	}
	dep.check(t, bodies)
	s := r.w.Stats()
	if s.BreakerProbes == 0 {
		t.Errorf("no probe made: %+v", s)
	}
	// 100 messages, 16 at a time: without the breaker the 8 s outage would
	// take hundreds of receives.
	if received > 60 {
		t.Errorf("%d messages received during the outage, want the breaker to stop receiving", received)
	}
	t.Logf("stats %+v", s)
}

// The same against the local SQS: a dependency down for 60 s with
// maxReceiveCount 5 and a 5 s visibility timeout leaves the receive counts
// unspent and the DLQ empty.
func TestBreakerSixtySecondOutage(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 5})
	dep := newDependency()
	dep.down.Store(true)
	bodies := make([]string, 200)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 16, WaitTime: time.Second}, sqsworker.HandlerFunc(dep.handle))
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().BreakerOpens >= 1 }, "breaker never opened: %+v", r.w.Stats())
	time.Sleep(60 * time.Second)
	dep.down.Store(false)
	emptyEventually(t, c, q.URL, 3*time.Minute)
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered by a 60 s outage, want none", v+f+d)
	}
	dep.check(t, bodies)
	t.Logf("stats %+v", r.w.Stats())
}

// A dependency down with a redrive policy of maxReceiveCount 2, on the
// fake and on the emulator: the breaker alone cannot keep the messages'
// receive counts below 2 (the first failures and every probe spend one),
// so a message failing for a dependency on its last receive waits in a
// fresh copy instead of being moved by SQS on the next. Nothing is
// dead-lettered; every message is handled once the dependency is back.
func TestUnavailableOnLastReceiveNotDeadLettered(t *testing.T) {
	t.Parallel()
	run := func(t *testing.T, api worker.API, url string, depth func(string) int, dlq string, send func(bodies []string)) {
		dep := newDependency()
		dep.down.Store(true)
		bodies := make([]string, 6)
		for i := range bodies {
			bodies[i] = fmt.Sprint("job ", i)
		}
		r := start(t, api, worker.Config{QueueURL: url, Concurrency: 2, WaitTime: time.Second,
			Backoff: sqsworker.ExponentialBackoff{Base: 100 * time.Millisecond, Cap: 500 * time.Millisecond},
			Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 300 * time.Millisecond, MaxProbeInterval: 600 * time.Millisecond}},
			sqsworker.HandlerFunc(dep.handle))
		send(bodies)
		// Three failed attempts per message: past maxReceiveCount (or
		// some messages dead-lettered, which never come back).
		localtest.Eventually(t, 120*time.Second, func() bool {
			if depth(dlq) > 0 {
				return true
			}
			dep.mu.Lock()
			defer dep.mu.Unlock()
			for _, b := range bodies {
				if dep.attempts[b] < 3 {
					return false
				}
			}
			return true
		}, "the messages were not tried three times: %+v", r.w.Stats())
		if n := depth(dlq); n != 0 {
			t.Fatalf("%d messages dead-lettered during the outage, want none", n)
		}
		dep.down.Store(false)
		localtest.Eventually(t, 120*time.Second, func() bool { return depth(url) == 0 }, "not drained: %+v", r.w.Stats())
		if n := depth(dlq); n != 0 {
			t.Errorf("%d messages dead-lettered during the outage, want none", n)
		}
		dep.check(t, bodies)
		if s := r.w.Stats(); s.Requeued == 0 {
			t.Errorf("no message waited in a copy: %+v", s)
		}
	}
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		dlq := f.CreateQueue("dlq", nil)
		url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "2",
			"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":2}`})
		run(t, f, url, func(u string) int { v, fl, d := f.Depth(u); return v + fl + d }, dlq, func(bodies []string) {
			for _, b := range bodies {
				f.Send(url, b)
			}
		})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		localtest.Require(t)
		c := localtest.NewSQS(t)
		q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 2})
		run(t, c, q.URL, func(u string) int { v, fl, d := localtest.Depth(t, c, u); return v + fl + d }, q.DLQURL, func(bodies []string) {
			localtest.Send(t, c, q.URL, "", bodies...)
		})
	})
}

// A handler cut short by its context (here HandlerTimeout; the worker
// stopping or the lease lost alike) with an error the breaker does not
// count says nothing of the dependency: it counts as nothing, and does not
// break a run of dependency failures. Before, it counted as a success: with
// Threshold 3, failures, a cut, a failure left the breaker closed, and a
// dependency hanging every other call never opened it. On the emulator.
func TestCutHandlerDoesNotBreakARunOfFailures(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 10})
	localtest.Send(t, c, q.URL, "", "1", "2", "3", "4")
	var calls atomic.Int64
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 1, MaxMessages: 1, WaitTime: time.Second, Backoff: noDelay,
		HandlerTimeout: 500 * time.Millisecond,
		Breaker:        sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: time.Second, MaxProbeInterval: time.Second}},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			switch calls.Add(1) {
			case 1, 2, 4:
				return sqsworker.Unavailable(errors.New("dependency down"))
			case 3: // hangs until the handler's deadline
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().BreakerOpens >= 1 },
		"breaker never opened after failures, a cut handler and a failure: %+v, %d calls", r.w.Stats(), calls.Load())
	emptyEventually(t, c, q.URL, time.Minute)
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered, want none", v+f+d)
	}
	t.Logf("stats %+v, %d calls", r.w.Stats(), calls.Load())
}

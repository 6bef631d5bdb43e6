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

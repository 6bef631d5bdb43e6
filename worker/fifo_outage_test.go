package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// FIFO, on the emulator: a dependency down for 40 s (every attempt
// Unavailable) while one group's messages wait. The worker's circuit
// breaker opens and probes; the group's head is received again at each
// postponement and probe, and on a FIFO queue no copy can wait in its
// place. Its receives must not run out: no message of the group is
// dead-lettered, and each is handled once, in order, once the dependency is
// back.
func TestFIFODependencyOutageDeadLettersNothing(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 5})
	localtest.Send(t, c, q.URL, "g", "m0", "m1", "m2")
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	var done []string
	var attempts atomic.Int32
	r := start(t, c, worker.Config{QueueURL: q.URL}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			attempts.Add(1)
			if down.Load() {
				return sqsworker.Unavailable(errors.New("the dependency is down"))
			}
			mu.Lock()
			done = append(done, m.Body)
			mu.Unlock()
			return nil
		}))
	time.Sleep(40 * time.Second)
	down.Store(false)
	t.Logf("%d attempts while down; stats %+v", attempts.Load(), r.w.Stats())
	localtest.Eventually(t, 180*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 3
	}, "not every message handled: %+v", r.w.Stats())
	mu.Lock()
	got := slices.Clone(done)
	mu.Unlock()
	if !slices.Equal(got, []string{"m0", "m1", "m2"}) {
		t.Errorf("handled %v, want m0 m1 m2 once each, in order", got)
	}
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("dead-letter queue holds %d messages, want none", v+fl+d)
	}
	if !strings.Contains(r.logs.String(), "kept in flight") {
		t.Errorf("no message waited in flight")
	}
}

// FIFO, on the fake: a message waiting in flight on its last receive (its
// dependency down) when the worker begins to stop runs once more at once,
// rather than hold the stop up for its wait, and is then released.
func TestFakeFIFOWaitInFlightEndsAtStop(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	f.CreateQueue("wait-dlq.fifo", map[string]string{"FifoQueue": "true"})
	url := fakeFIFO(f, "wait", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, sqstest.QueueARN("wait-dlq.fifo"))})
	fakeGroup(f, url, "g", "m0")
	var calls atomic.Int32
	r := start(t, f, worker.Config{QueueURL: url, Backoff: sqsworker.BackoffFunc(func(int, error) time.Duration { return time.Minute })}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			calls.Add(1)
			return sqsworker.Unavailable(errors.New("down"))
		}))
	localtest.Eventually(t, 10*time.Second, func() bool { return strings.Contains(r.logs.String(), "kept in flight") }, "the message did not wait in flight")
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls before the stop, want 1 (then a wait of a minute)", n)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		shut <- r.w.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Shutdown waited for the in-flight wait")
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2: once more at the stop", n)
	}
	if s := r.w.Stats(); s.Deleted != 0 || s.InFlight != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// FIFO, on the emulator, with a visibility timeout of 5 s: the heartbeat
// extends a lease when about a third of it is left (1.7 s), later than the
// 2 s a wait in flight keeps back for the visibility change that would
// settle its message. A message on its last receive waiting in flight
// through a 20 s outage of its dependency must wait for that extension,
// not take the lease for lost and be made visible again, which dead-letters
// it on its next receive: none is dead-lettered, and each is handled once,
// in order, once the dependency is back.
func TestFIFOWaitInFlightWithShortVisibilityTimeout(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 1, VisibilityTimeout: 5 * time.Second})
	localtest.Send(t, c, q.URL, "g", "m0", "m1")
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	var done []string
	r := start(t, c, worker.Config{QueueURL: q.URL}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			if down.Load() {
				return sqsworker.Unavailable(errors.New("the dependency is down"))
			}
			mu.Lock()
			done = append(done, m.Body)
			mu.Unlock()
			return nil
		}))
	time.Sleep(20 * time.Second)
	down.Store(false)
	localtest.Eventually(t, 60*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		v, fl, d := localtest.Depth(t, c, q.DLQURL)
		return len(done) == 2 || v+fl+d > 0
	}, "neither handled nor dead-lettered: %+v", r.w.Stats())
	mu.Lock()
	got := slices.Clone(done)
	mu.Unlock()
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("dead-letter queue holds %d messages, want none; handled %v", v+fl+d, got)
	} else if !slices.Equal(got, []string{"m0", "m1"}) {
		t.Errorf("handled %v, want m0 m1 once each, in order", got)
	}
	if !strings.Contains(r.logs.String(), "kept in flight") {
		t.Errorf("no message waited in flight")
	}
}

package breaker

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newTest(cfg sqsworker.BreakerConfig) (*Breaker, *clock, *[]string) {
	c := &clock{t: time.Unix(1_000_000, 0)}
	var changes []string
	var mu sync.Mutex
	b := New(cfg, func(from, to State, err error) {
		mu.Lock()
		changes = append(changes, fmt.Sprintf("%s>%s", from, to))
		mu.Unlock()
	})
	b.now = c.now
	return b, c, &changes
}

var down = sqsworker.Unavailable(errors.New("connection refused"))

func TestOpensAfterThresholdInARow(t *testing.T) {
	b, _, changes := newTest(sqsworker.BreakerConfig{Threshold: 3})
	b.Record(down, 0)
	b.Record(down, 0)
	b.Record(errors.New("bad message"), 0) // not a dependency failure: resets
	b.Record(down, 0)
	b.Record(down, 0)
	if b.State() != Closed {
		t.Fatal("opened before 3 dependency failures in a row")
	}
	b.Record(down, 0)
	if b.State() != Open {
		t.Fatal("not open after 3 dependency failures in a row")
	}
	if ok, _, wait := b.Allow(); ok || wait < 4*time.Second || wait > 6*time.Second {
		t.Errorf("Allow while open = %v, wait %s; want no, 5s±20%%", ok, wait)
	}
	if opens, _ := b.Counts(); opens != 1 || len(*changes) != 1 {
		t.Errorf("opens %d, changes %v", opens, *changes)
	}
}

func TestProbesThenCloses(t *testing.T) {
	b, c, changes := newTest(sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 10 * time.Second, MaxProbeInterval: 30 * time.Second})
	b.Record(down, 0)
	c.add(13 * time.Second)
	ok, probe, _ := b.Allow()
	if !ok || probe == 0 {
		t.Fatalf("after the interval: ok %v probe %v, want the probe", ok, probe)
	}
	if ok, _, _ := b.Allow(); ok {
		t.Fatal("a second message allowed while the probe is out")
	}
	// The probe fails: open again for twice as long.
	b.Record(down, probe)
	if ok, _, wait := b.Allow(); ok || wait < 16*time.Second || wait > 24*time.Second {
		t.Fatalf("after a failed probe: ok %v wait %s, want 20s±20%%", ok, wait)
	}
	c.add(25 * time.Second)
	if _, probe, _ = b.Allow(); probe == 0 {
		t.Fatal("no probe after the doubled interval")
	}
	b.Record(down, probe) // doubles again, capped at 30s
	if _, _, wait := b.Allow(); wait > 36*time.Second {
		t.Fatalf("wait %s beyond MaxProbeInterval", wait)
	}
	c.add(40 * time.Second)
	if _, probe, _ = b.Allow(); probe == 0 {
		t.Fatal("no probe after the capped interval")
	}
	b.Abort(probe) // a receive that brought nothing
	ok, probe, _ = b.Allow()
	if !ok || probe == 0 {
		t.Fatal("the probe was not given back by Abort")
	}
	b.Record(nil, probe)
	if b.State() != HalfOpen {
		t.Fatal("closed after one successful probe, want CloseAfter 2")
	}
	_, probe, _ = b.Allow()
	b.Record(errors.New("the message's own failure"), probe)
	if b.State() != Closed {
		t.Fatal("not closed after two successful probes")
	}
	_, probes := b.Counts()
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>open", "open>half-open", "half-open>closed"}
	if fmt.Sprint(*changes) != fmt.Sprint(want) || probes != 5 {
		t.Errorf("changes %v, probes %d; want %v, 5", *changes, probes, want)
	}
}

func TestClassesAndNil(t *testing.T) {
	b, _, _ := newTest(sqsworker.BreakerConfig{Threshold: 1, Classes: []string{"*net.OpError"}})
	if b.IsDependencyFailure(errors.New("x")) || !b.IsDependencyFailure(down) {
		t.Error("classification")
	}
	var nb *Breaker
	if ok, _, _ := nb.Allow(); !ok || nb.State() != Closed {
		t.Error("a nil breaker must allow")
	}
	nb.Record(down, 0)
	if New(sqsworker.BreakerConfig{Disabled: true}, nil) != nil {
		t.Error("Disabled gives a breaker")
	}
}

func TestWaitWakesAndCancels(t *testing.T) {
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour})
	b.Record(down, 0)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := b.Wait(ctx); done <- err }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want canceled", err)
	}
	c.add(2 * time.Hour)
	probe, err := b.Wait(context.Background())
	if err != nil || probe == 0 {
		t.Fatalf("Wait = %v, %v; want the probe", probe, err)
	}
	got := make(chan Probe, 1)
	go func() { p, _ := b.Wait(context.Background()); got <- p }()
	b.Record(nil, probe) // frees the probe: the waiter gets the next one
	select {
	case p := <-got:
		if p == 0 {
			t.Error("second waiter did not get a probe")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not wake when the probe came back")
	}
}

// The lock-free answers (Allow and State while closed, Record of a success
// while closed with no failure counted) read mirrors of the state that every
// unlock sets: whenever the lock is free, they match the state, whatever
// mix of calls ran before. Successes, dependency failures, probes and aborts
// race here while the clock moves the breaker to half-open.
func TestMirrorsMatchStateWheneverUnlocked(t *testing.T) {
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: time.Second, MaxProbeInterval: 2 * time.Second, CloseAfter: 2})
	check := func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		if b.closed.Load() != (b.state == Closed) || b.clean.Load() != (b.state == Closed && b.failures == 0) {
			t.Fatalf("state %s, %d failures: closed mirror %v, clean mirror %v", b.state, b.failures, b.closed.Load(), b.clean.Load())
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range 2000 {
				ok, probe, _ := b.Allow()
				_ = b.State()
				switch {
				case !ok:
				case probe != 0 && i%7 == 0:
					b.Abort(probe)
				case rand.N(2) == 0:
					b.Record(down, probe)
				default:
					b.Record(nil, probe)
				}
				if i%50 == 0 {
					c.add(700 * time.Millisecond)
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for checked := false; !checked; {
		select {
		case <-done:
			checked = true
		default:
		}
		check()
	}
	if opens, probes := b.Counts(); opens == 0 || probes == 0 {
		t.Errorf("opens %d, probes %d: the test did not exercise them", opens, probes)
	}
}

// A partial dependency failure (sqsworker.PartlyUnavailable: one tenant's
// table missing, say) is no failure to the breaker: however many in a row,
// it stays closed; between whole failures it breaks their run; as a probe's
// outcome it counts as a success. The runtimes still treat it as a
// dependency failure (IsDependencyFailure), never dead-lettering for it.
func TestPartialFailureNotCounted(t *testing.T) {
	part := sqsworker.PartlyUnavailable(fmt.Errorf("commit: %w", errors.New("table tenant-b missing")))
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Second, CloseAfter: 1})
	if !b.IsDependencyFailure(part) {
		t.Error("a partial failure is not a dependency failure to the runtimes: it would be dead-lettered")
	}
	for range 10 {
		b.Record(part, 0)
	}
	if b.State() != Closed {
		t.Fatal("opened by partial failures")
	}
	b.Record(down, 0)
	b.Record(part, 0)
	b.Record(down, 0)
	if b.State() != Closed {
		t.Fatal("a partial failure did not break the run of dependency failures")
	}
	b.Record(down, 0)
	if b.State() != Open {
		t.Fatal("not open after 2 dependency failures in a row")
	}
	c.add(2 * time.Second)
	ok, probe, _ := b.Allow()
	if !ok || probe == 0 {
		t.Fatal("no probe after the interval")
	}
	b.Record(part, probe)
	if b.State() != Closed {
		t.Errorf("a probe failing partly did not close the breaker: %s", b.State())
	}
}

// A message held in flight waiting for a probe (WaitHeld) takes the next
// one before the receives do: a receive's probe, given back, is not taken
// again by a receive while it waits.
func TestWaitHeldGoesBeforeReceives(t *testing.T) {
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 10 * time.Second})
	b.Record(down, 0)
	c.add(13 * time.Second) // half-open
	ok, received, _ := b.Allow()
	if !ok || received == 0 {
		t.Fatalf("Allow = %v, %v; want the probe", ok, received)
	}
	got := make(chan Probe, 1)
	go func() {
		probe, err := b.WaitHeld(context.Background(), nil)
		if err != nil {
			t.Error(err)
		}
		got <- probe
	}()
	for {
		b.lock()
		n := b.held
		b.unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.Abort(received) // the receive brought nothing
	if ok, _, _ := b.Allow(); ok {
		t.Error("a receive took the probe while a held message waited for it")
	}
	probe := <-got
	if probe == 0 {
		t.Error("WaitHeld did not run as the probe")
	}
	b.Record(nil, probe)
	b.lock()
	n := b.held
	b.unlock()
	if n != 0 {
		t.Errorf("%d held after WaitHeld returned", n)
	}
}

// A probe out for MaxProbeInterval without an outcome (a call that hangs, a
// handler that ignores its context) frees the breaker for another: before
// then, Allow refuses and waits no longer than what is left of it; after,
// the next message goes as the probe, and its outcome settles the breaker
// (a stale one's does not: see TestStaleProbeSuccessDoesNotClose).
func TestProbeOutTooLongGivesAnother(t *testing.T) {
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 10 * time.Second, MaxProbeInterval: 30 * time.Second, CloseAfter: 1})
	b.Record(down, 0)
	c.add(13 * time.Second) // half-open
	if ok, probe, _ := b.Allow(); !ok || probe == 0 {
		t.Fatal("no probe after the interval")
	}
	c.add(25 * time.Second)
	if ok, _, wait := b.Allow(); ok || wait > 5*time.Second {
		t.Fatalf("probe out 25s of 30: ok %v wait %s, want refused, waiting at most 5s", ok, wait)
	}
	c.add(5 * time.Second)
	ok, probe, _ := b.Allow()
	if !ok || probe == 0 {
		t.Fatalf("probe out 30s: ok %v probe %v, want another probe", ok, probe)
	}
	b.Record(nil, probe)
	if b.State() != Closed {
		t.Errorf("the newer probe's success did not close the breaker: %s", b.State())
	}
}

// WaitHeld returns ErrStopped once its stop channel is closed, the breaker
// still open.
func TestWaitHeldStops(t *testing.T) {
	b, _, _ := newTest(sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour})
	b.Record(down, 0)
	stop := make(chan struct{})
	close(stop)
	if _, err := b.WaitHeld(context.Background(), stop); !errors.Is(err, ErrStopped) {
		t.Fatalf("WaitHeld = %v, want ErrStopped", err)
	}
}

// TestWaitHeldGoesBeforeReceives without its race: while a held message
// waits (held counted), a receive's Allow is refused the half-open
// breaker's probe, and the held waiter's turn takes it.
func TestHeldWaiterTakesProbeBeforeReceives(t *testing.T) {
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 10 * time.Second})
	b.Record(down, 0)
	c.add(13 * time.Second) // half-open, no probe out
	b.lock()
	b.held = 1
	b.unlock()
	if ok, _, _ := b.Allow(); ok {
		t.Error("a receive took the probe while a held message waited for it")
	}
	b.lock()
	ok, probe, _ := b.allowLocked(true)
	b.unlock()
	if !ok || probe == 0 {
		t.Errorf("the held message's turn: ok %v probe %v, want the probe", ok, probe)
	}
}

// A postponed job (RetryAfter with a nil error: a duplicate waiting for its
// claim, a job of an endpoint its own breaker holds back) did not call the
// dependency: it neither breaks a run of failures nor, as the probe,
// closes the breaker; the next message probes instead.
func TestPostponementCountsAsNothing(t *testing.T) {
	postponed := fmt.Errorf("wrapped: %w", sqsworker.RetryAfter(time.Minute, nil))
	b, c, _ := newTest(sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Second, CloseAfter: 1})
	b.Record(down, 0)
	b.Record(postponed, 0)
	b.Record(down, 0)
	if b.State() != Open {
		t.Fatal("a postponement broke the run of dependency failures")
	}
	c.add(2 * time.Second)
	ok, probe, _ := b.Allow()
	if !ok || probe == 0 {
		t.Fatal("no probe after the interval")
	}
	b.Record(postponed, probe)
	if b.State() != HalfOpen {
		t.Fatalf("a postponed probe moved the breaker to %s", b.State())
	}
	if ok, probe, _ = b.Allow(); !ok || probe == 0 {
		t.Fatal("a postponed probe did not give its turn to the next message")
	}
	b.Record(nil, probe)
	if b.State() != Closed {
		t.Fatalf("the next probe's success left the breaker %s", b.State())
	}
	// A RetryAfter with an error is a failure like any other.
	b.Record(sqsworker.RetryAfter(time.Second, sqsworker.Unavailable(errors.New("429"))), 0)
	b.Record(sqsworker.RetryAfter(time.Second, sqsworker.Unavailable(errors.New("429"))), 0)
	if b.State() != Open {
		t.Fatal("RetryAfter of a dependency failure not counted")
	}
}

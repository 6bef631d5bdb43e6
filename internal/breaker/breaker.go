// Package breaker is the circuit breaker both runtimes put in front of their
// handler (see sqsworker.BreakerConfig): it counts dependency failures,
// opens after a threshold of them in a row, lets one probe through at a
// jittered, growing interval, and closes after enough successful probes.
//
// It is a small state machine rather than a general breaker library: the
// runtimes need to know when to stop receiving and how long until the next
// probe, not to wrap a call.
package breaker

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqsworker/sqsworker"
)

// State is the breaker's state.
type State int32

// The states.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "closed"
}

// Probe names one probe the breaker let through, for Record and Abort:
// only the probe out now (the current one) settles the half-open state.
// A probe given up on is stale: one found out for MaxProbeInterval by a
// message asking to run, or given back with Abort (by a runtime that gave
// up on its handler, say). Its outcome may still come, late, and must not
// settle the state on behalf of a newer probe. The zero Probe is none: a
// message that runs as no probe.
type Probe uint32

// Breaker is safe for concurrent use. A nil *Breaker is a disabled one:
// it always allows and records nothing.
type Breaker struct {
	cfg sqsworker.BreakerConfig
	// onChange, if set, runs after every state change, outside the
	// breaker's lock, with the error that opened it.
	onChange func(from, to State, err error)
	now      func() time.Time

	mu        sync.Mutex
	state     State
	failures  int // dependency failures in a row, while closed
	successes int // successful probes in a row, while half-open
	interval  time.Duration
	openUntil time.Time
	probe     Probe         // the probe out, if any; 0 when none
	lastProbe Probe         // the last probe given: the next is the one after
	probeAt   time.Time     // when the probe went out
	held      int           // messages held in flight waiting in WaitHeld
	changed   chan struct{} // closed at each state change or freed probe
	pending   []change      // state changes to report once unlocked

	opens, probes atomic.Int64
	// closed mirrors state == Closed, and clean state == Closed with no
	// failure counted, both set before the lock is released: the common
	// case (closed, a handler succeeded) takes no lock.
	closed, clean atomic.Bool
}

type change struct {
	from, to State
	err      error
}

// lock takes the breaker's lock and moves an open breaker whose interval
// passed to half-open.
func (b *Breaker) lock() {
	b.mu.Lock()
	if b.state == Open && !b.now().Before(b.openUntil) {
		b.setLocked(HalfOpen, nil)
		b.probe = 0
	}
}

// unlock releases the lock, then reports the state changes made under it.
func (b *Breaker) unlock() {
	pending := b.pending
	b.pending = nil
	b.closed.Store(b.state == Closed)
	b.clean.Store(b.state == Closed && b.failures == 0)
	b.mu.Unlock()
	if b.onChange != nil {
		for _, c := range pending {
			b.onChange(c.from, c.to, c.err)
		}
	}
}

func (b *Breaker) setLocked(to State, err error) {
	if b.state == to {
		return
	}
	b.pending = append(b.pending, change{b.state, to, err})
	b.state = to
	b.signalLocked()
}

// New returns a breaker for cfg, or nil when cfg disables it. onChange, if
// not nil, is called after each state change, with the error that caused it
// when it opens.
func New(cfg sqsworker.BreakerConfig, onChange func(from, to State, err error)) *Breaker {
	if cfg.Disabled {
		return nil
	}
	b := &Breaker{cfg: cfg.WithDefaults(), onChange: onChange, now: time.Now, changed: make(chan struct{})}
	b.closed.Store(true)
	b.clean.Store(true)
	return b
}

// IsDependencyFailure reports whether err is the failure of a dependency,
// not of the message: an Unavailable error (partial or not), or one of the
// configured error classes. The runtimes never dead-letter a message for
// it. Record counts it toward opening the breaker unless it is partial.
func (b *Breaker) IsDependencyFailure(err error) bool {
	if err == nil {
		return false
	}
	if sqsworker.IsUnavailable(err) {
		return true
	}
	return b != nil && len(b.cfg.Classes) > 0 && slices.Contains(b.cfg.Classes, sqsworker.ErrorClass(err))
}

// counts reports whether err counts toward opening the breaker: a
// dependency failure not marked sqsworker.PartlyUnavailable. A partial one
// (one tenant's table missing, say) concerns only the jobs that need that
// part: it must not stop the others.
func (b *Breaker) counts(err error) bool {
	return b.IsDependencyFailure(err) && !sqsworker.IsPartlyUnavailable(err)
}

// State returns the current state.
func (b *Breaker) State() State {
	if b == nil || b.closed.Load() {
		return Closed
	}
	b.lock()
	defer b.unlock()
	return b.state
}

// Counts returns how often the breaker opened and how many probes it let
// through.
func (b *Breaker) Counts() (opens, probes int64) {
	if b == nil {
		return 0, 0
	}
	return b.opens.Load(), b.probes.Load()
}

// Allow reports whether a message may run now. When it may run as the
// probe, probe is not 0 and the caller must Record its outcome (or Abort)
// with it. When it may not, wait is how long until it might.
func (b *Breaker) Allow() (ok bool, probe Probe, wait time.Duration) {
	if b == nil || b.closed.Load() {
		return true, 0, 0
	}
	b.lock()
	defer b.unlock()
	return b.allowLocked(false)
}

// allowLocked is Allow; held is true for a message waiting in WaitHeld,
// whose probes go first.
func (b *Breaker) allowLocked(held bool) (ok bool, probe Probe, wait time.Duration) {
	switch b.state {
	case Closed:
		return true, 0, 0
	case Open:
		return false, 0, b.openUntil.Sub(b.now())
	}
	now := b.now()
	if b.probe != 0 {
		probeEnd := b.probeAt.Add(b.cfg.MaxProbeInterval)
		if now.Before(probeEnd) {
			return false, 0, min(b.interval, probeEnd.Sub(now))
		}
		// Out for MaxProbeInterval: its outcome may never come (a call
		// to the dependency that hangs, a handler that ignores its
		// context), and the breaker would take nothing for as long.
		// Another probe goes; should the late outcome come, it is
		// stale (see Record).
		b.probe = 0
	}
	if !held && b.held > 0 {
		return false, 0, b.interval
	}
	if b.lastProbe++; b.lastProbe == 0 { // wrapped: 0 is no probe
		b.lastProbe++
	}
	b.probe, b.probeAt = b.lastProbe, now
	b.probes.Add(1)
	return true, b.probe, 0
}

// Wait blocks until a message may run, and returns its probe when it runs
// as one (else 0). It returns ctx's error when ctx ends first.
func (b *Breaker) Wait(ctx context.Context) (probe Probe, err error) {
	return b.wait(ctx, nil, false)
}

// WaitHeld is Wait for a message the runtime holds already (a FIFO
// message waiting in flight, its group locked by it): while it waits, the
// probes are its, not a receive's, which could not bring a message of its
// group anyway. It also returns, with ErrStopped, once stop is closed (the
// runtime stops); a nil stop never is.
func (b *Breaker) WaitHeld(ctx context.Context, stop <-chan struct{}) (probe Probe, err error) {
	if b == nil {
		return 0, nil
	}
	b.lock()
	b.held++
	b.unlock()
	defer func() {
		b.lock()
		b.held--
		b.signalLocked()
		b.unlock()
	}()
	return b.wait(ctx, stop, true)
}

// ErrStopped is WaitHeld's error when its stop channel was closed.
var ErrStopped = errors.New("breaker: wait stopped")

func (b *Breaker) wait(ctx context.Context, stop <-chan struct{}, held bool) (probe Probe, err error) {
	if b == nil {
		return 0, nil
	}
	for {
		b.lock()
		changed := b.changed
		ok, probe, wait := b.allowLocked(held)
		b.unlock()
		if ok {
			return probe, nil
		}
		t := time.NewTimer(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			err = ctx.Err()
		case <-stop:
			err = ErrStopped
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		if err != nil {
			return 0, err
		}
	}
}

// Pause returns how long until the open breaker lets its next probe
// through; 0 when it is not open.
func (b *Breaker) Pause() time.Duration {
	if b == nil {
		return 0
	}
	b.lock()
	defer b.unlock()
	if b.state != Open {
		return 0
	}
	return b.openUntil.Sub(b.now())
}

// Abort gives back a probe that did not run (a receive that brought
// nothing, a message released unstarted), or whose outcome the runtime no
// longer waits for (a handler still running when the Lambda invocation
// gave up on it). A stale probe (see Probe) gives back nothing: the turn
// is another probe's now. Abort(0) does nothing.
func (b *Breaker) Abort(probe Probe) {
	if b == nil || probe == 0 {
		return
	}
	b.lock()
	if probe == b.probe {
		b.probe = 0
		b.signalLocked()
	}
	b.unlock()
}

// Record reports the outcome of a message that ran; probe is the probe it
// ran as, 0 for none. Only a dependency failure that is not partial
// (sqsworker.PartlyUnavailable) counts as a failure; a postponement
// (sqsworker.RetryAfter with a nil error: the handler put the job off, so
// that it says nothing of the dependency) counts as nothing, and a probe
// postponed gives its turn to the next message; every other outcome, a
// partial failure included, counts as a success. (The executor does not
// record a handler cut short by its context with an error that does not
// count: it aborts its probe, so that the outcome counts as nothing.)
//
// Only the current probe's outcome settles the half-open state. A stale
// probe's (see Probe) counts as an ordinary message's: it ran against the
// dependency as they do, and its outcome says as much about it as theirs,
// so it is neither dropped nor given more weight. While the breaker is not
// closed an ordinary outcome changes nothing (only probes decide), so the
// stale one neither frees the newer probe's turn nor closes or opens the
// breaker; once closed, it counts toward the failures in a row, or resets
// them, as any other would.
func (b *Breaker) Record(err error, probe Probe) {
	if b == nil {
		return
	}
	dep := b.counts(err)
	if probe == 0 && !dep && b.clean.Load() {
		return // closed with no failure counted: nothing to reset
	}
	postponed := !dep && sqsworker.IsPostponed(err)
	if postponed && probe == 0 {
		return
	}
	b.lock()
	defer b.unlock()
	if probe != b.probe {
		probe = 0 // stale, or none: an ordinary outcome
	}
	switch {
	case probe != 0:
		b.probe = 0
		b.signalLocked()
		if postponed || b.state != HalfOpen {
			return
		}
		if dep {
			b.openLocked(min(2*b.interval, b.cfg.MaxProbeInterval), err)
			return
		}
		if b.successes++; b.successes >= b.cfg.CloseAfter {
			b.failures = 0
			b.setLocked(Closed, nil)
		}
	case postponed: // a stale probe's: nothing, as any other's
	case b.state != Closed:
		// Messages that were running when the breaker opened: only
		// probes decide now.
	case dep:
		if b.failures++; b.failures >= b.cfg.Threshold {
			b.openLocked(b.cfg.ProbeInterval, err)
		}
	default:
		b.failures = 0
	}
}

// openLocked opens the breaker for interval, jittered by ±20%.
func (b *Breaker) openLocked(interval time.Duration, cause error) {
	b.opens.Add(1)
	b.interval, b.successes, b.failures = interval, 0, 0
	b.openUntil = b.now().Add(interval*8/10 + rand.N(interval*4/10+1))
	b.setLocked(Open, cause)
}

func (b *Breaker) signalLocked() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// ErrOpen is the cause of a message postponed because the breaker is open.
var ErrOpen = errors.New("circuit breaker open: a dependency is unavailable")

package keybreaker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/stopby"
	"github.com/sqsworker/sqsworker/keybreaker"
)

// A job the handler behind the middleware postpones (RetryAfter with a nil
// error: an idempotency duplicate waiting for another worker's claim, a job
// a second keybreaker holds back) did not reach the key's endpoint: its
// outcome says nothing of the key. A probe postponed so neither closes the
// key nor keeps its turn: the next job of the key probes at once. Before,
// the postponement counted as a success: the probe closed the key unrun,
// and every job of the key then ran against the endpoint still down.
func TestPostponedProbeDoesNotCloseTheKey(t *testing.T) {
	b, _, h, mw := probeDue(t, keybreaker.Config{MaxOpenFor: time.Hour})
	ctx := context.Background()

	h.errs["a"] = []error{sqsworker.RetryAfter(5*time.Second, nil)}
	skipped(t, mw.HandleMessage(ctx, job("a"))) // the probe, postponed behind the middleware
	if s := b.Stats(); s.Open != 1 {
		t.Fatalf("stats %+v: a postponed probe closed the key", s)
	}
	h.fail("a", 1) // the endpoint is still down
	calls := h.calls["a"]
	if err := mw.HandleMessage(ctx, job("a")); !errors.Is(err, errDown) {
		t.Fatalf("next job: %v, want it run as the probe (the postponed one gave its turn back) and the endpoint's failure", err)
	}
	if h.calls["a"] != calls+1 {
		t.Fatalf("next job: %d calls, want one", h.calls["a"]-calls)
	}
	if d := skipped(t, mw.HandleMessage(ctx, job("a"))); d < 2*time.Minute {
		t.Errorf("delay %v: the probe's failure should have reopened the key for twice as long", d)
	}
	if s := b.Stats(); s.Open != 1 || s.Opens != 2 || s.Probes != 2 {
		t.Errorf("stats %+v, want the key open, 2 opens, 2 probes", s)
	}
}

// A postponement between failures of a key does not break their run:
// before, it counted as a success and the key forgot its failures.
func TestPostponementDoesNotBreakARunOfFailures(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 3})
	h := newHandler()
	mw := b.Middleware(h)
	ctx := context.Background()
	h.errs["a"] = []error{errDown, sqsworker.RetryAfter(time.Second, nil), errDown, errDown}
	for range 4 {
		_ = mw.HandleMessage(ctx, job("a"))
	}
	calls := h.calls["a"]
	skipped(t, mw.HandleMessage(ctx, job("a")))
	if h.calls["a"] != calls {
		t.Errorf("the handler ran for a key with 3 failures in a row")
	}
	if s := b.Stats(); s.Open != 1 || s.Opens != 1 {
		t.Errorf("stats %+v, want the key open", s)
	}
}

// A probe whose handler panics gives its turn back at once, as any failed
// job's outcome is counted, and the panic reaches the runtime as a
// *sqsworker.PanicError. Before, the panic went past the middleware: the
// probe's turn stayed taken for ProbeTimeout, every job of the key
// postponed meanwhile.
func TestPanickingProbeGivesItsTurnBack(t *testing.T) {
	_, _, h, mw := probeDue(t, keybreaker.Config{ProbeTimeout: 5 * time.Minute})
	ctx := context.Background()

	h.during = func(string) { h.during = nil; panic("a bug in this job") }
	var err error
	func() {
		defer func() {
			if v := recover(); v != nil {
				err = errors.New("the panic went past the middleware")
			}
		}()
		err = mw.HandleMessage(ctx, job("a"))
	}()
	var p *sqsworker.PanicError
	if !errors.As(err, &p) {
		t.Errorf("probe: %v, want a *sqsworker.PanicError", err)
	}
	calls := h.calls["a"]
	if err := mw.HandleMessage(ctx, job("a")); err != nil {
		t.Fatalf("next job: %v, want it run (the endpoint answers) and the key closed", err)
	}
	if h.calls["a"] != calls+1 {
		t.Errorf("next job: %d calls, want one", h.calls["a"]-calls)
	}
}

// An open key stays open however many other keys fail once: when MaxKeys
// is reached, a key that merely has failures is forgotten before an open
// one. Before, the key updated longest ago went, open or not: a stream of
// endpoints failing now and then (a large webhook fleet) pushed an open
// key out within MaxKeys such failures, and the endpoint down was called
// again, Failures times, at each eviction.
func TestOpenKeyOutlastsKeysFailingOnce(t *testing.T) {
	b, c := newBreaker(t, keybreaker.Config{Failures: 2, MaxKeys: 10})
	h := newHandler()
	mw := b.Middleware(h)
	ctx := context.Background()
	h.fail("down", 2)
	for range 2 {
		_ = mw.HandleMessage(ctx, job("down"))
	}
	for i := range 1000 {
		key := fmt.Sprint("flaky-", i)
		h.fail(key, 1)
		_ = mw.HandleMessage(ctx, job(key))
	}
	calls := h.calls["down"]
	skipped(t, mw.HandleMessage(ctx, job("down")))
	if h.calls["down"] != calls {
		t.Errorf("the open key's job ran: the key was forgotten")
	}
	if s := b.Stats(); s.Tracked > 10 || s.Open != 1 {
		t.Errorf("stats %+v, want at most 10 keys tracked, the open one among them", s)
	}
	// Once its probe succeeds, the key is forgotten, open or failing.
	c.add(time.Hour)
	if err := mw.HandleMessage(ctx, job("down")); err != nil {
		t.Fatalf("probe: %v, want success", err)
	}
	if s := b.Stats(); s.Open != 0 || s.Tracked > 9 {
		t.Errorf("stats %+v after the probe's success, want no key open and the key forgotten", s)
	}
}

// A job cut short by its context (the runtime stopping, the lease lost, the
// invocation ending) with an error the key does not count did not show the
// endpoint healthy: it counts as nothing, as a postponement does. Before,
// it counted as a success: the key forgot its run of failures.
func TestCutJobDoesNotBreakARunOfFailures(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 3})
	h := newHandler()
	mw := b.Middleware(h)
	ctx := context.Background()
	cut, cancel := context.WithCancel(ctx)
	cancel()
	h.errs["a"] = []error{errDown, context.Canceled, errDown, errDown}
	for i := range 4 {
		c := ctx
		if i == 1 {
			c = cut
		}
		_ = mw.HandleMessage(c, job("a"))
	}
	calls := h.calls["a"]
	skipped(t, mw.HandleMessage(ctx, job("a")))
	if h.calls["a"] != calls {
		t.Errorf("the handler ran for a key with 3 failures in a row and a job cut between them")
	}
	if s := b.Stats(); s.Open != 1 || s.Opens != 1 {
		t.Errorf("stats %+v, want the key open", s)
	}
}

// A probe cut short by its context neither closes the key nor keeps its
// turn: the next job of the key probes. Before, it closed the key, and every
// job of the key then ran against the endpoint still down. A job that
// succeeds although its context ended did reach the endpoint: it counts.
func TestCutProbeDoesNotCloseTheKey(t *testing.T) {
	b, _, h, mw := probeDue(t, keybreaker.Config{MaxOpenFor: time.Hour})
	cut, cancel := context.WithCancel(context.Background())
	cancel()
	h.errs["a"] = []error{context.Canceled}
	if err := mw.HandleMessage(cut, job("a")); !errors.Is(err, context.Canceled) {
		t.Fatalf("probe: %v, want the handler's context.Canceled", err)
	}
	if s := b.Stats(); s.Open != 1 {
		t.Fatalf("stats %+v: a probe cut short closed the key", s)
	}
	calls := h.calls["a"]
	if err := mw.HandleMessage(cut, job("a")); err != nil { // the next probes at once, and succeeds
		t.Fatalf("next job: %v, want it run as the probe and its success", err)
	}
	if h.calls["a"] != calls+1 {
		t.Fatalf("next job: %d calls, want one", h.calls["a"]-calls)
	}
	if s := b.Stats(); s.Open != 0 || s.Probes != 2 {
		t.Errorf("stats %+v, want the key closed by the second probe's success", s)
	}
}

// A job whose context reached its deadline (the worker's HandlerTimeout)
// with an error the key does not count ran out of time, as a job waiting
// on an endpoint that takes requests and never answers does: it counts as
// a failure of its key, and opens it. Its attempt is spared only once
// another job of the key (by job key) timed out in the same run of
// failures: alone, it may be the job's own (a payload too large to handle
// in time), and such a job must still reach the dead-letter queue. A
// context cancelled (the lease lost), one ended because the runtime stops
// (the Lambda invocation's deadline), and a timeout the handler marked
// Permanent count as nothing of the kind. Before, every timeout counted as
// nothing: the key never opened, and each of its jobs spent its attempts
// until it was dead-lettered.
func TestTimeoutsOpenTheKey(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 3})
	h := newHandler()
	mw := b.Middleware(h)
	timedOut, cancel := context.WithTimeout(context.Background(), -1)
	defer cancel()
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	stopping, cancel3 := context.WithDeadlineCause(context.Background(), time.Now().Add(-1), stopby.Cause("the invocation ends"))
	defer cancel3()
	timeout := fmt.Errorf("POST: %w", context.DeadlineExceeded)

	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"cancelled", cancelled, context.Canceled},
		{"runtime stopping", stopping, timeout},
		{"permanent", timedOut, sqsworker.Permanent(timeout)},
		{"postponed", timedOut, sqsworker.RetryAfter(time.Second, nil)},
	} {
		h.errs["a"] = []error{c.err}
		if err := mw.HandleMessage(c.ctx, jobOf("a", "job-1")); sqsworker.IsUnavailable(err) {
			t.Errorf("%s: %v, want it as the handler returned it", c.name, err)
		}
		if s := b.Stats(); s.Tracked != 0 {
			t.Errorf("%s: stats %+v, want it counted as no failure", c.name, s)
		}
	}

	h.errs["a"] = []error{timeout, timeout, timeout}
	for i := range 2 { // the same job twice: alone
		if err := mw.HandleMessage(timedOut, jobOf("a", "job-1")); sqsworker.IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("timeout %d of one job: %v, want the handler's error, an attempt of the job's", i+1, err)
		}
	}
	if s := b.Stats(); s.Tracked != 1 || s.Open != 0 {
		t.Errorf("stats %+v, want the timeouts counted", s)
	}
	if err := mw.HandleMessage(timedOut, jobOf("a", "job-2")); !sqsworker.IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("another job's timeout: %v, want it marked PartlyUnavailable", err)
	}
	if s := b.Stats(); s.Open != 1 || s.Opens != 1 {
		t.Errorf("stats %+v, want the key open", s)
	}
	calls := h.calls["a"]
	skipped(t, mw.HandleMessage(context.Background(), jobOf("a", "job-3")))
	if h.calls["a"] != calls {
		t.Errorf("the handler ran for an open key")
	}
}

// A job that times out on its own, again and again, opens its key (its
// failures are in a row), but is never taken for its endpoint's victim:
// its probes' timeouts spend its attempts too, so that it reaches the
// dead-letter queue. A success of another job closes the key. Before (a
// timeout spared once the key was open), such a job was spared from the
// timeout that opened its key on, and never dead-lettered.
func TestSlowJobAloneSpendsItsAttempts(t *testing.T) {
	b, c := newBreaker(t, keybreaker.Config{Failures: 2, OpenFor: time.Minute})
	h := newHandler()
	mw := b.Middleware(h)
	timedOut, cancel := context.WithTimeout(context.Background(), -1)
	defer cancel()
	timeout := fmt.Errorf("POST: %w", context.DeadlineExceeded)
	h.errs["a"] = []error{timeout, timeout, timeout}
	for i := range 3 {
		if i == 2 {
			c.add(2 * time.Minute) // its probe
		}
		if err := mw.HandleMessage(timedOut, jobOf("a", "slow")); sqsworker.IsUnavailable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("timeout %d: %v, want the handler's error, an attempt of the job's", i+1, err)
		}
	}
	if s := b.Stats(); s.Open != 1 || s.Probes != 1 {
		t.Errorf("stats %+v, want the key open after its probe", s)
	}
	c.add(5 * time.Minute)
	if err := mw.HandleMessage(context.Background(), jobOf("a", "healthy")); err != nil {
		t.Errorf("probe by another job: %v", err)
	}
	if s := b.Stats(); s.Tracked != 0 {
		t.Errorf("stats %+v, want the key closed", s)
	}
}

// jobOf is a job of breaker key key (its ID) and of job key jk.
func jobOf(key, jk string) *sqsworker.Message {
	m := job(key)
	m.MessageAttributes = map[string]sqsworker.MessageAttribute{"idempotency-key": {DataType: "String", StringValue: jk}}
	return m
}

package breaker

import (
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

// staleConfig closes the breaker after one successful probe.
var staleConfig = sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: 10 * time.Second, MaxProbeInterval: 30 * time.Second, CloseAfter: 1}

// twoProbesOut opens b, lets a probe through and, that probe out for
// MaxProbeInterval, a second one: the first is stale.
func twoProbesOut(t *testing.T, b *Breaker, c *clock) (stale, current Probe) {
	t.Helper()
	b.Record(down, 0)
	c.add(13 * time.Second) // half-open
	ok, stale, _ := b.Allow()
	if !ok || stale == 0 {
		t.Fatal("no probe after the interval")
	}
	c.add(30 * time.Second)
	ok, current, _ = b.Allow()
	if !ok || current == 0 || current == stale {
		t.Fatalf("ok %v, probe %d after %d out for MaxProbeInterval: want another probe", ok, current, stale)
	}
	return stale, current
}

// The late success of a probe given up on (out for MaxProbeInterval) does
// not close the breaker while the newer probe is out; the newer probe's
// failure opens it. Before, the stale success closed it, and the newer
// probe's failure then counted for nothing.
func TestStaleProbeSuccessDoesNotClose(t *testing.T) {
	b, c, _ := newTest(staleConfig)
	stale, current := twoProbesOut(t, b, c)
	b.Record(nil, stale)
	if s := b.State(); s != HalfOpen {
		t.Fatalf("state %s after the stale probe's late success, want half-open", s)
	}
	if ok, _, _ := b.Allow(); ok {
		t.Fatal("a message went while the newer probe was out")
	}
	b.Record(down, current)
	if s := b.State(); s != Open {
		t.Fatalf("state %s after the newer probe's failure, want open", s)
	}
}

// Nor does it free the newer probe's turn: with CloseAfter 2 the stale
// success closed nothing before either, but it let a third probe go.
func TestStaleProbeOutcomeKeepsNewerTurn(t *testing.T) {
	cfg := staleConfig
	cfg.CloseAfter = 2
	b, c, _ := newTest(cfg)
	stale, current := twoProbesOut(t, b, c)
	b.Record(nil, stale)
	if ok, _, _ := b.Allow(); ok {
		t.Fatal("a third probe went while the newer one was out")
	}
	b.Record(nil, current)
	if ok, probe, _ := b.Allow(); !ok || probe == 0 {
		t.Fatal("no probe once the newer one came back")
	}
	if s := b.State(); s != HalfOpen {
		t.Fatalf("state %s after one counted success of 2, want half-open: the stale one counted", s)
	}
}

// The late failure of a stale probe does not open the breaker again: the
// newer probe decides, and its success closes it.
func TestStaleProbeFailureDoesNotOpen(t *testing.T) {
	b, c, _ := newTest(staleConfig)
	stale, current := twoProbesOut(t, b, c)
	b.Record(down, stale)
	if s := b.State(); s != HalfOpen {
		t.Fatalf("state %s after the stale probe's late failure, want half-open", s)
	}
	b.Record(nil, current)
	if s := b.State(); s != Closed {
		t.Fatalf("state %s after the newer probe's success, want closed", s)
	}
}

// A stale probe given back late (a receive that took longer than
// MaxProbeInterval, an invocation that gave up on its handler after
// another probe went) does not free the newer probe's turn.
func TestStaleAbortKeepsNewerTurn(t *testing.T) {
	b, c, _ := newTest(staleConfig)
	stale, current := twoProbesOut(t, b, c)
	b.Abort(stale)
	b.Abort(0) // no probe: nothing to give back
	if ok, _, _ := b.Allow(); ok {
		t.Fatal("a third probe went while the newer one was out")
	}
	b.Abort(current)
	if ok, probe, _ := b.Allow(); !ok || probe == 0 {
		t.Fatal("the newer probe, given back, freed no turn")
	}
}

// Once the breaker is closed, a stale probe's outcome counts as any
// message's: its failure toward the failures in a row.
func TestStaleProbeOutcomeCountsOnceClosed(t *testing.T) {
	cfg := staleConfig
	cfg.Threshold = 2
	b, c, _ := newTest(cfg)
	b.Record(down, 0) // 1 of 2
	stale, current := twoProbesOut(t, b, c)
	b.Record(nil, current)
	if s := b.State(); s != Closed {
		t.Fatalf("state %s after the newer probe's success, want closed", s)
	}
	b.Record(down, stale)
	if s := b.State(); s != Closed {
		t.Fatalf("state %s after one failure of 2, want closed", s)
	}
	b.Record(down, 0)
	if s := b.State(); s != Open {
		t.Fatalf("state %s after 2 failures in a row, the stale probe's the first: want open", s)
	}
}

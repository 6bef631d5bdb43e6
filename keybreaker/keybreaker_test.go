package keybreaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/keybreaker"
)

var errDown = sqsworker.PartlyUnavailable(errors.New("POST: 503"))

// clock is a fake clock the tests move by hand.
type clock struct{ t time.Time }

func (c *clock) now() time.Time         { return c.t }
func (c *clock) add(d time.Duration)    { c.t = c.t.Add(d) }
func newClock() *clock                  { return &clock{t: time.Unix(1_800_000_000, 0)} }
func quiet() *slog.Logger               { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
func job(key string) *sqsworker.Message { return &sqsworker.Message{ID: key, Body: key} }

// newBreaker keys jobs by their ID, on a fake clock.
func newBreaker(t *testing.T, cfg keybreaker.Config) (*keybreaker.Breaker, *clock) {
	t.Helper()
	cfg.Key = func(m *sqsworker.Message) string { return m.ID }
	cfg.Logger = quiet()
	b, err := keybreaker.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	b.SetClock(c.now)
	return b, c
}

// handler returns the errors queued for each key in turn (nil once they are
// used up), and counts its calls per key.
type handler struct {
	errs  map[string][]error
	calls map[string]int
	// during, when set, runs inside the handler's call.
	during func(key string)
}

func (h *handler) HandleMessage(_ context.Context, m *sqsworker.Message) error {
	h.calls[m.ID]++
	if h.during != nil {
		h.during(m.ID)
	}
	if errs := h.errs[m.ID]; len(errs) > 0 {
		h.errs[m.ID] = errs[1:]
		return errs[0]
	}
	return nil
}

func newHandler() *handler { return &handler{errs: map[string][]error{}, calls: map[string]int{}} }

func (h *handler) fail(key string, n int) {
	for range n {
		h.errs[key] = append(h.errs[key], errDown)
	}
}

// probeDue returns a breaker with Failures 1 and OpenFor 1m (the rest of
// cfg as given), its clock, a handler and the middleware around it, with key
// "a" opened by one failure and OpenFor passed: the next job of "a" probes.
func probeDue(t *testing.T, cfg keybreaker.Config) (*keybreaker.Breaker, *clock, *handler, sqsworker.Handler) {
	t.Helper()
	cfg.Failures, cfg.OpenFor = 1, time.Minute
	b, c := newBreaker(t, cfg)
	h := newHandler()
	mw := b.Middleware(h)
	h.fail("a", 1)
	_ = mw.HandleMessage(context.Background(), job("a"))
	c.add(time.Minute)
	return b, c, h, mw
}

// skipped asserts that err postpones the job, and returns its delay.
func skipped(t *testing.T, err error) time.Duration {
	t.Helper()
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Err != nil {
		t.Fatalf("error %v: want a postponement, RetryAfter with a nil error", err)
	}
	return ra.Delay
}

func TestOpensAfterFailuresInARow(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 3, OpenFor: time.Minute})
	h := newHandler()
	mw := b.Middleware(h)
	ctx := context.Background()

	// Two failures and a success: the count starts again.
	h.fail("a", 2)
	for range 3 {
		_ = mw.HandleMessage(ctx, job("a"))
	}
	if s := b.Stats(); s.Opens != 0 || s.Tracked != 0 {
		t.Fatalf("after a success: %+v, want nothing open or tracked", s)
	}
	h.fail("a", 3)
	for range 3 {
		if err := mw.HandleMessage(ctx, job("a")); !errors.Is(err, errDown) {
			t.Fatalf("err %v, want the handler's", err)
		}
	}
	calls := h.calls["a"]
	d := skipped(t, mw.HandleMessage(ctx, job("a")))
	if d < time.Minute || d > time.Minute+6*time.Second+time.Second {
		t.Errorf("delay %v, want OpenFor up to a tenth more", d)
	}
	if h.calls["a"] != calls {
		t.Errorf("the handler ran for an open key")
	}
	// Another key is not affected.
	if err := mw.HandleMessage(ctx, job("b")); err != nil {
		t.Errorf("key b: %v", err)
	}
	if s := b.Stats(); s.Opens != 1 || s.Open != 1 || s.Skipped != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestProbeClosesOrReopensForLonger(t *testing.T) {
	b, c := newBreaker(t, keybreaker.Config{Failures: 1, OpenFor: time.Minute, MaxOpenFor: 3 * time.Minute})
	h := newHandler()
	mw := b.Middleware(h)
	ctx := context.Background()
	h.fail("a", 4)
	_ = mw.HandleMessage(ctx, job("a")) // opens for 1m

	var behind error
	h.during = func(string) { behind = mw.HandleMessage(ctx, job("a")) }
	interval := time.Minute
	for i, next := range []time.Duration{2 * time.Minute, 3 * time.Minute, 3 * time.Minute} {
		c.add(interval - time.Second)
		skipped(t, mw.HandleMessage(ctx, job("a"))) // not yet
		c.add(time.Second)
		calls := h.calls["a"]
		if err := mw.HandleMessage(ctx, job("a")); !errors.Is(err, errDown) {
			t.Fatalf("probe %d: %v, want the handler's failure", i, err)
		}
		if h.calls["a"] != calls+1 {
			t.Fatalf("probe %d: %d calls, want one (the job behind it skipped)", i, h.calls["a"]-calls)
		}
		skipped(t, behind)
		if d := skipped(t, mw.HandleMessage(ctx, job("a"))); d < next || d > next+next/10+time.Second {
			t.Errorf("after probe %d failed: delay %v, want %v up to a tenth more", i, d, next)
		}
		interval = next
	}
	h.during = nil
	c.add(3 * time.Minute)
	if err := mw.HandleMessage(ctx, job("a")); err != nil {
		t.Fatalf("probe: %v, want success", err)
	}
	if err := mw.HandleMessage(ctx, job("a")); err != nil {
		t.Fatalf("after the probe's success: %v", err)
	}
	if s := b.Stats(); s.Tracked != 0 || s.Opens != 4 || s.Probes != 4 {
		t.Errorf("stats %+v, want the key forgotten, 4 opens, 4 probes", s)
	}
}

// A probe out longer than ProbeTimeout (an endpoint that takes requests and
// never answers) counts as failed: the key stays open twice as long (2m)
// before the next job probes. Its late outcome does not decide the key, the
// new probe's does. The next job probed at once before, and with it one
// more job was held by the endpoint every ProbeTimeout.
func TestLateProbeOutcomeIgnored(t *testing.T) {
	b, c, h, mw := probeDue(t, keybreaker.Config{ProbeTimeout: 2 * time.Minute})
	ctx := context.Background()

	var late, second error
	h.fail("a", 0)
	h.during = func(string) {
		h.during = nil
		skipped(t, mw.HandleMessage(ctx, job("a"))) // behind the probe
		c.add(2 * time.Minute)                      // the probe hangs
		if d := skipped(t, mw.HandleMessage(ctx, job("a"))); d < 2*time.Minute {
			t.Errorf("delay %v after the probe timed out, want the key open for 2m more", d)
		}
		c.add(2 * time.Minute)
		h.fail("a", 1)                           // the endpoint is still down
		second = mw.HandleMessage(ctx, job("a")) // the next job probes
	}
	late = mw.HandleMessage(ctx, job("a")) // returns success after all
	if late != nil || !errors.Is(second, errDown) {
		t.Fatalf("late probe %v, second probe %v", late, second)
	}
	if d := skipped(t, mw.HandleMessage(ctx, job("a"))); d < 4*time.Minute {
		t.Errorf("delay %v: the second probe's failure should have reopened the key for 4m", d)
	}
	if s := b.Stats(); s.Open != 1 || s.Probes != 2 {
		t.Errorf("stats %+v, want the key open after 2 probes", s)
	}
}

// A job let through before its key opened does not close it by succeeding
// late; only the probe does.
func TestJobFromBeforeTheOpenIgnored(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 2})
	h := newHandler()
	mw := b.Middleware(h)
	ctx := context.Background()
	h.fail("a", 1)
	_ = mw.HandleMessage(ctx, job("a"))
	h.during = func(string) {
		h.during = nil
		h.fail("a", 1)
		_ = mw.HandleMessage(ctx, job("a")) // the second failure opens it
	}
	if err := mw.HandleMessage(ctx, job("a")); err != nil { // the slow one succeeds
		t.Fatal(err)
	}
	skipped(t, mw.HandleMessage(ctx, job("a")))
}

func TestOnlyCountedFailuresCount(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 2})
	mw := b.Middleware(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "bad payload":
			return sqsworker.Permanent(errors.New("400 Bad Request"))
		case "plain":
			return errors.New("a bug")
		}
		return nil
	}))
	for _, body := range []string{"bad payload", "plain", "bad payload", "plain"} {
		m := job("a")
		m.Body = body
		if err := mw.HandleMessage(context.Background(), m); sqsworker.IsPostponed(err) {
			t.Fatalf("%s: key opened", body)
		}
	}
	if s := b.Stats(); s.Tracked != 0 {
		t.Errorf("stats %+v: failures counted that IsFailure does not", s)
	}
}

func TestEmptyKeyUntracked(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 1})
	h := newHandler()
	h.fail("", 5)
	mw := b.Middleware(h)
	for range 5 {
		if err := mw.HandleMessage(context.Background(), job("")); !errors.Is(err, errDown) {
			t.Fatalf("err %v, want the handler's", err)
		}
	}
	if h.calls[""] != 5 {
		t.Errorf("%d calls, want 5", h.calls[""])
	}
}

// Memory stays bounded however many keys fail.
func TestMaxKeysBoundsTheTrackedKeys(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 3, MaxKeys: 100})
	mw := b.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return errDown }))
	for i := range 20_000 {
		for range 3 {
			_ = mw.HandleMessage(context.Background(), job(fmt.Sprint("endpoint-", i)))
		}
	}
	if s := b.Stats(); s.Tracked > 100 {
		t.Errorf("%d keys tracked, want at most MaxKeys 100", s.Tracked)
	}
	// The 100 keys failed most recently are still tracked and open.
	if s := b.Stats(); s.Open != 100 {
		t.Errorf("stats %+v, want the last 100 keys open", s)
	}
}

func TestConfigErrorsNameTheField(t *testing.T) {
	key := func(*sqsworker.Message) string { return "" }
	for _, tc := range []struct {
		cfg  keybreaker.Config
		want string
	}{
		{keybreaker.Config{}, "Config.Key is nil"},
		{keybreaker.Config{Key: key, Failures: -1}, "Config.Failures is negative"},
		{keybreaker.Config{Key: key, OpenFor: -time.Second}, "Config.OpenFor is negative"},
		{keybreaker.Config{Key: key, OpenFor: 2 * time.Hour, MaxOpenFor: time.Hour}, "Config.OpenFor 2h0m0s is over Config.MaxOpenFor"},
		{keybreaker.Config{Key: key, MaxOpenFor: 400 * 24 * time.Hour}, "over sqsworker.MaxDelay"},
		{keybreaker.Config{Key: key, MaxKeys: -5}, "Config.MaxKeys is negative"},
	} {
		_, err := keybreaker.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// An OpenFor above the default MaxOpenFor raises it.
	if _, err := keybreaker.New(keybreaker.Config{Key: key, OpenFor: 2 * time.Hour}); err != nil {
		t.Errorf("OpenFor 2h alone: %v", err)
	}
}

// Keys up to 1 MiB (taken from a body, say) are kept as their hashes: the
// memory MaxKeys bounds does not grow with them, and distinct keys stay
// distinct.
func TestLongKeysKeptAsHashes(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 1, MaxKeys: 50})
	mw := b.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return errDown }))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 50 {
		_ = mw.HandleMessage(context.Background(), job(strings.Repeat("k", 1<<20-3)+fmt.Sprintf("%03d", i)))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 1<<20 {
		t.Errorf("50 keys of 1 MiB held %d bytes", grew)
	}
	if s := b.Stats(); s.Open != 50 {
		t.Errorf("stats %+v, want 50 distinct keys open", s)
	}
}

// blockingLog is a slog.Handler whose Handle waits until release is
// closed, after closing entered on its first record.
type blockingLog struct {
	entered, release chan struct{}
	once             sync.Once
}

func (l *blockingLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *blockingLog) Handle(context.Context, slog.Record) error {
	l.once.Do(func() { close(l.entered) })
	<-l.release
	return nil
}
func (l *blockingLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *blockingLog) WithGroup(string) slog.Handler      { return l }

// A log handler that blocks while the breaker logs a key opening holds
// back no job of another key. Before, the breaker logged under its lock:
// every job waited for the log.
func TestSlowLogHoldsBackNoOtherKey(t *testing.T) {
	log := &blockingLog{entered: make(chan struct{}), release: make(chan struct{})}
	b, err := keybreaker.New(keybreaker.Config{Failures: 1, Logger: slog.New(log),
		Key: func(m *sqsworker.Message) string { return m.ID }})
	if err != nil {
		t.Fatal(err)
	}
	mw := b.Middleware(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.ID == "a" {
			return errDown
		}
		return nil
	}))
	opened := make(chan error, 1)
	go func() { opened <- mw.HandleMessage(context.Background(), job("a")) }()
	<-log.entered // "a" opens, and its log line waits
	other := make(chan error, 1)
	go func() { other <- mw.HandleMessage(context.Background(), job("b")) }()
	select {
	case err := <-other:
		if err != nil {
			t.Errorf("job of another key: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("a job of another key waited 30s for the log of a key opening")
		defer func() { <-other }() // once the log is released
	}
	close(log.release)
	if err := <-opened; !errors.Is(err, errDown) {
		t.Errorf("the failing job: %v", err)
	}
}

// A stream of keys failing once, then succeeding, does not push the open
// keys out, as MaxKeys says: each new key's failure is counted as one key
// more until it succeeds. Before, each one-off failure forgot an open key,
// whose jobs then ran on against a dependency still down.
func TestOneOffFailuresKeepTheOpenKeys(t *testing.T) {
	b, _ := newBreaker(t, keybreaker.Config{Failures: 2, MaxKeys: 3})
	down := map[string]bool{}
	mw := b.Middleware(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if down[m.ID] {
			return errDown
		}
		return nil
	}))
	for i := range 3 {
		k := fmt.Sprint("down-", i)
		down[k] = true
		for range 2 {
			_ = mw.HandleMessage(context.Background(), job(k))
		}
	}
	if s := b.Stats(); s.Open != 3 {
		t.Fatalf("stats %+v, want 3 keys open", s)
	}
	for i := range 50 {
		k := fmt.Sprint("flaky-", i)
		down[k] = true
		_ = mw.HandleMessage(context.Background(), job(k))
		down[k] = false
		_ = mw.HandleMessage(context.Background(), job(k))
	}
	if s := b.Stats(); s.Open != 3 || s.Tracked > 3 {
		t.Errorf("stats %+v, want the 3 open keys kept, and nothing else tracked", s)
	}
	// A new key that fails until it opens takes the place of the open key
	// updated longest ago.
	down["new"] = true
	for range 2 {
		_ = mw.HandleMessage(context.Background(), job("new"))
	}
	if s := b.Stats(); s.Open != 3 || s.Tracked != 3 {
		t.Errorf("stats %+v, want 3 open keys, and no more tracked", s)
	}
	// The new key is open: its next job waits for a probe, not run.
	if err := mw.HandleMessage(context.Background(), job("new")); err == nil || errors.Is(err, errDown) {
		t.Errorf("the new key's next job: %v, want it held back by its open breaker", err)
	}
}

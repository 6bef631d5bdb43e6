package keybreaker

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/stopby"
)

// Config configures a [Breaker]. Only Key is required.
type Config struct {
	// Key returns the key a message's job depends on: the webhook
	// endpoint's URL or host, the tenant whose API it calls. A message
	// whose key is empty is handled untracked; a key over 256 bytes is
	// tracked (and logged) as its SHA-256. Required.
	Key func(*sqsworker.Message) string
	// Failures is how many failures in a row open a key's breaker.
	// Default 10.
	Failures int
	// OpenFor is how long a key's breaker stays open the first time, before
	// one job of the key is let through as its probe. Each probe that fails
	// doubles it, up to MaxOpenFor. Default 1 minute.
	OpenFor time.Duration
	// MaxOpenFor caps OpenFor's doubling. Default 1 hour; at most
	// sqsworker.MaxDelay.
	MaxOpenFor time.Duration
	// ProbeTimeout is how long a probe may be out before it counts as
	// failed (an endpoint that never answers, a handler that ignores its
	// context may never return): the key stays open twice as long, up to
	// MaxOpenFor, and then another job of the key probes; the late
	// probe's outcome is ignored.
	// Default 5 minutes.
	ProbeTimeout time.Duration
	// IsFailure reports whether a handler's error counts against its key
	// (as a timeout does too: see [Breaker.Middleware]).
	// Default: [sqsworker.IsUnavailable], so that a handler says "this
	// endpoint is down" with [sqsworker.PartlyUnavailable] (which also keeps
	// the runtime's own circuit breaker, which pauses every job, closed) and
	// a job's own fault, such as a payload the endpoint refuses, does not
	// count. A failure it counts that is not marked Unavailable (nor
	// Permanent) is returned by the middleware marked PartlyUnavailable:
	// the key's endpoint failed, not the job, whose attempts it must not
	// spend.
	IsFailure func(error) bool
	// MaxKeys bounds the keys tracked at once: those with failures, open or
	// probing (a key that succeeds is forgotten). When it is reached, the
	// key with failures but not open updated longest ago is forgotten; when
	// every other key tracked is open, a new key's failures are counted as
	// one key more, and only once it opens is the open key updated longest
	// ago forgotten: a stream of keys failing now and then does not push
	// the open keys out. Default 10,000.
	MaxKeys int
	// Logger receives a line when a key's breaker opens, and when it
	// closes again. Default slog.Default().
	Logger *slog.Logger
}

// Defaults of [Config].
const (
	DefaultFailures     = 10
	DefaultOpenFor      = time.Minute
	DefaultMaxOpenFor   = time.Hour
	DefaultProbeTimeout = 5 * time.Minute
	DefaultMaxKeys      = 10_000
)

// Stats counts a [Breaker]'s work since New.
type Stats struct {
	// Tracked is the number of keys tracked now (with failures, open or
	// probing); Open of them are open or probing.
	Tracked, Open int
	// Opens counts the times a key's breaker opened (a failed probe
	// reopening it included).
	Opens int64
	// Skipped counts the jobs postponed unrun because their key was open.
	Skipped int64
	// Probes counts the jobs let through as a key's probe.
	Probes int64
}

// maxKeyLen is the longest key kept as it is; a longer one (a key taken
// from a body of up to 1 MiB, say) is kept as its SHA-256, so that MaxKeys
// bounds the memory too.
const maxKeyLen = 256

// Breaker is a circuit breaker per key. Use it as handler middleware
// ([Breaker.Middleware]). It is safe for concurrent use.
type Breaker struct {
	cfg Config
	now func() time.Time

	mu   sync.Mutex
	keys map[string]*list.Element // of *entry, in failing or open
	// failing holds the keys with failures that are not open, open the
	// open ones, each least recently updated at the back. Past MaxKeys a
	// failing key is forgotten first: an open one holds a verdict its
	// endpoint took Failures calls to reach, a failing one little.
	failing, open list.List
	stats         Stats
	gen           uint64 // probe tokens
	seed          maphash.Seed
}

type entry struct {
	key      string
	failures int // in a row
	open     bool
	interval time.Duration // the current open interval
	probeAt  time.Time     // open: when a probe may go
	probe    uint64        // the probe out (its token), 0 when none
	probeEnd time.Time     // when the probe out gives its turn back
	// slow is the hash of the first job that timed out in this run of
	// failures (0: none); sharedSlow is set once another job did too.
	slow       uint64
	sharedSlow bool
}

// New returns a Breaker, or an error naming the Config field at fault.
func New(cfg Config) (*Breaker, error) {
	if cfg.Key == nil {
		return nil, errors.New("keybreaker: Config.Key is nil: set it to a function that returns the key a job depends on, such as its webhook endpoint's host")
	}
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"Failures", cfg.Failures < 0},
		{"OpenFor", cfg.OpenFor < 0},
		{"MaxOpenFor", cfg.MaxOpenFor < 0},
		{"ProbeTimeout", cfg.ProbeTimeout < 0},
		{"MaxKeys", cfg.MaxKeys < 0},
	} {
		if f.bad {
			return nil, fmt.Errorf("keybreaker: Config.%s is negative: leave it 0 for its default", f.name)
		}
	}
	if cfg.Failures == 0 {
		cfg.Failures = DefaultFailures
	}
	if cfg.OpenFor == 0 {
		cfg.OpenFor = DefaultOpenFor
	}
	if cfg.MaxOpenFor == 0 {
		cfg.MaxOpenFor = max(DefaultMaxOpenFor, cfg.OpenFor)
	}
	if cfg.MaxOpenFor > sqsworker.MaxDelay {
		return nil, fmt.Errorf("keybreaker: Config.MaxOpenFor %v is over sqsworker.MaxDelay (%v), the longest a job can wait", cfg.MaxOpenFor, sqsworker.MaxDelay)
	}
	if cfg.OpenFor > cfg.MaxOpenFor {
		return nil, fmt.Errorf("keybreaker: Config.OpenFor %v is over Config.MaxOpenFor %v: raise MaxOpenFor or lower OpenFor", cfg.OpenFor, cfg.MaxOpenFor)
	}
	if cfg.ProbeTimeout == 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.IsFailure == nil {
		cfg.IsFailure = sqsworker.IsUnavailable
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Breaker{cfg: cfg, now: time.Now, keys: make(map[string]*list.Element), seed: maphash.MakeSeed()}, nil
}

// Stats returns the breaker's counts.
func (b *Breaker) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Tracked, s.Open = len(b.keys), b.open.Len()
	return s
}

// Middleware runs next for the jobs whose key is not open. A job whose key
// is open is not run but postponed: the middleware returns
// [sqsworker.RetryAfter] with a nil error and a delay that brings it back
// about when its key's probe may go. The runtimes count it as postponed, not
// failed, log it at debug level only, never move it to the dead-letter queue
// for it, and their own circuit breaker counts it as nothing. Once a key's
// OpenFor has passed, the first of its jobs to come runs as the probe, while
// the others wait again; the probe's success closes the key, its failure
// opens it for twice as long (up to MaxOpenFor). A job that next postpones
// itself (RetryAfter with a nil error: an idempotency duplicate, say) did
// not reach the key's endpoint: it counts as nothing, and as the probe it
// lets the next job probe. A panic of the handler is recovered into a
// *sqsworker.PanicError, as the runtimes recover it, and counted as its
// error. A job that ran out of time (its context reached its deadline: the
// worker's HandlerTimeout, or its lease when the heartbeat is off) with an
// error IsFailure does not count, and not marked Permanent, counts as a
// failure of its key, as from an endpoint that takes requests and never
// answers. It spends the job's attempt unless another job of the key (by
// its job key, the same for every copy) timed out in the same run of
// failures: then it is the endpoint's, and is returned marked
// PartlyUnavailable. A job that times out alone may be too slow on its own
// (a payload too large to handle in time), and must still reach the
// dead-letter queue; a lone job of an endpoint that swallows requests
// cannot be told from it. The end of a Lambda invocation is not such a
// timeout: the runtime stops, and the job is released.
func (b *Breaker) Middleware(next sqsworker.Handler) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		key := b.cfg.Key(m)
		if key == "" {
			return next.HandleMessage(ctx, m)
		}
		if len(key) > maxKeyLen {
			sum := sha256.Sum256([]byte(key))
			key = "sha256:" + hex.EncodeToString(sum[:])
		}
		probe, err := b.admit(key)
		if err != nil {
			return err
		}
		// Recovered as the runtimes do, so that a panicking job is counted
		// like a failed one: a probe's turn is not held until ProbeTimeout.
		err = outcome.Call(ctx, next, m)
		if err == nil {
			b.record(key, probe, nil, false, 0, false)
			return nil
		}
		postponed := sqsworker.IsPostponed(err)
		counted := !postponed && b.cfg.IsFailure(err)
		// A timeout the handler marked Permanent, or a postponement made
		// past the deadline, is the handler's word: not a timeout.
		var slow uint64 // the job that timed out, hashed; 0 for none
		if !counted && !postponed && !isPermanent(err) && timedOut(ctx) {
			slow = b.jobHash(m)
		}
		cut := !counted && slow == 0 && outcome.Cut(ctx, err, b.cfg.IsFailure)
		shared := b.record(key, probe, err, counted, slow, cut)
		if (counted || shared) && !sqsworker.IsUnavailable(err) && !isPermanent(err) {
			// Counted against its key, the failure is the key's
			// endpoint's, not the job's: the runtime must not spend the
			// job's attempts on it, and dead-letter a healthy job while the
			// endpoint is down. Partly: the runtime's own breaker, which
			// would pause every key's jobs, is left alone. A timeout is
			// the endpoint's only once another job of the key timed out
			// in the same run of failures: alone, it may be the job's own
			// (a payload too large to handle in time), and such a job must
			// still reach the dead-letter queue.
			err = sqsworker.PartlyUnavailable(err)
		}
		return err
	})
}

// jobHash returns a hash of m's job key (the same for every copy of the
// job), never 0.
func (b *Breaker) jobHash(m *sqsworker.Message) uint64 {
	return maphash.String(b.seed, jobkey.Of(m)) | 1
}

// timedOut reports whether the handler's context ended at its deadline (the
// worker's HandlerTimeout, or its lease when the heartbeat is off) rather
// than because the runtime stops (the Lambda invocation's deadline, a
// shutdown) or the lease was lost: the handler ran out of time, as one
// waiting on an endpoint that takes requests and never answers does.
func timedOut(ctx context.Context) bool {
	return errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(context.Cause(ctx), stopby.ErrStopping)
}

// probeFailed keeps e's open key open for twice its interval, up to
// MaxOpenFor, from now: its probe failed, or was out past ProbeTimeout.
func (b *Breaker) probeFailed(e *entry, now time.Time) {
	e.interval = min(2*e.interval, b.cfg.MaxOpenFor)
	e.probe, e.probeAt = 0, now.Add(e.interval)
}

// isPermanent reports whether err is marked [sqsworker.Permanent].
func isPermanent(err error) bool {
	var p *sqsworker.PermanentError
	return errors.As(err, &p)
}

// admit lets a job of key run, as the key's probe (its token) when the key
// is open and its probe may go, or returns the error that postpones it.
func (b *Breaker) admit(key string) (probe uint64, err error) {
	b.mu.Lock()
	probe, note, err := b.admitLocked(key)
	b.mu.Unlock()
	if note != nil {
		note() // logged unlocked: a slow log handler holds back no other job
	}
	return probe, err
}

// admitLocked is admit under b.mu; note, if not nil, logs what changed.
func (b *Breaker) admitLocked(key string) (probe uint64, note func(), err error) {
	el, ok := b.keys[key]
	if !ok {
		return 0, nil, nil
	}
	e := el.Value.(*entry)
	if !e.open {
		return 0, nil, nil
	}
	now := b.now()
	wait := e.probeAt.Sub(now)
	if e.probe != 0 {
		if now.Before(e.probeEnd) {
			wait = e.interval // behind the probe: its outcome decides
		} else {
			// Out too long: the endpoint takes requests and never
			// answers, or the probe's handler ignores its context. It
			// counts as a failed probe: the key stays open twice as long
			// (up to MaxOpenFor) before another job probes, rather than
			// one more job held by the endpoint every ProbeTimeout.
			b.probeFailed(e, now)
			wait = e.interval
			interval := e.interval
			note = func() {
				b.cfg.Logger.Warn("keybreaker: probe out too long; counted as failed, the key stays open", "key", key, "probe_timeout", b.cfg.ProbeTimeout, "open_for", interval)
			}
		}
	}
	if e.probe == 0 && !now.Before(e.probeAt) {
		b.gen++
		e.probe, e.probeEnd = b.gen, now.Add(b.cfg.ProbeTimeout)
		b.stats.Probes++
		b.open.MoveToFront(el)
		return e.probe, note, nil
	}
	b.stats.Skipped++
	// Up to a tenth of the interval later, so that a key's backlog does
	// not all come back at the instant its probe may go.
	return 0, note, sqsworker.RetryAfter(wait+rand.N(e.interval/10+1), nil)
}

// record counts the outcome of a job of key that ran, as its probe when
// probe is its token: err, and whether it is a failure of the key, counted
// by IsFailure or slow, the job's hash when it timed out. A postponement
// (sqsworker.RetryAfter with a nil error, from the handler behind the
// middleware: an idempotency duplicate waiting for another's claim, a job
// another breaker holds back) did not reach the key's endpoint, and a job
// cut short by its context (cut: the runtime stopping, the lease lost) did
// not show it healthy: both count as nothing, and such a probe gives its
// turn to the next job of its key. It reports, for a timeout, whether two
// jobs of the key or more timed out in the same run of failures.
func (b *Breaker) record(key string, probe uint64, err error, counted bool, slow uint64, cut bool) (shared bool) {
	postponed := cut || sqsworker.IsPostponed(err)
	failed := !postponed && err != nil && (counted || slow != 0)
	b.mu.Lock()
	note := b.recordLocked(key, probe, err, failed, postponed)
	if el, ok := b.keys[key]; ok && failed && slow != 0 {
		shared = el.Value.(*entry).timedOut(slow)
	}
	b.mu.Unlock()
	if note != nil {
		note() // logged unlocked: a slow log handler holds back no other job
	}
	return shared
}

// timedOut adds the job of hash slow to the jobs that timed out in e's
// run of failures, and reports whether two jobs or more did: from then on,
// the timeouts of the run are its endpoint's, the first job's included.
func (e *entry) timedOut(slow uint64) bool {
	switch {
	case e.slow == 0:
		e.slow = slow
	case e.slow != slow:
		e.sharedSlow = true
	}
	return e.sharedSlow
}

// recordLocked is record under b.mu; the func it returns, if not nil, logs
// what changed.
func (b *Breaker) recordLocked(key string, probe uint64, err error, failed, postponed bool) func() {
	el, ok := b.keys[key]
	var e *entry
	if ok {
		e = el.Value.(*entry)
	}
	if e != nil && e.open && (probe == 0 || probe != e.probe) {
		// A job let through before the key opened, or a probe given up
		// on: only the current probe's outcome decides an open key.
		return nil
	}
	if postponed {
		if e != nil && e.open {
			e.probe = 0 // the current probe's: the next job probes
		}
		return nil
	}
	if !failed {
		if e == nil {
			return nil
		}
		b.listOf(e).Remove(el)
		delete(b.keys, key)
		if !e.open {
			return nil
		}
		return func() { b.cfg.Logger.Info("keybreaker: probe succeeded; key closed", "key", key) }
	}
	if e == nil {
		if probe != 0 {
			return nil // the key was forgotten while its probe ran
		}
		e = &entry{key: key}
		el = b.failing.PushFront(e)
		b.keys[key] = el
		if len(b.keys) > b.cfg.MaxKeys {
			b.forgetOne(el, false)
		}
	} else {
		b.listOf(e).MoveToFront(el)
	}
	e.failures++
	now := b.now()
	switch {
	case e.open: // the probe failed
		b.probeFailed(e, now)
	case e.failures >= b.cfg.Failures:
		e.open, e.interval = true, b.cfg.OpenFor
		b.failing.Remove(el)
		el = b.open.PushFront(e)
		b.keys[key] = el
		if len(b.keys) > b.cfg.MaxKeys {
			b.forgetOne(el, true)
		}
	default:
		return nil
	}
	e.probe, e.probeAt = 0, now.Add(e.interval)
	b.stats.Opens++
	failures, interval := e.failures, e.interval
	return func() {
		b.cfg.Logger.Warn("keybreaker: key open; its jobs wait for a probe", "key", key, "failures", failures, "probe_in", interval, "error", err)
	}
}

// listOf returns the list that holds e.
func (b *Breaker) listOf(e *entry) *list.List {
	if e.open {
		return &b.open
	}
	return &b.failing
}

// forgetOne forgets, past MaxKeys, the failing key updated longest ago
// other than keep; or, when there is none and open is true (keep has just
// opened), the open key updated longest ago other than keep. A new key's
// first failures do not push an open key out: while it is the only failing
// key, one more key than MaxKeys is tracked, until it opens (and pushes
// out the oldest open key) or succeeds (and is forgotten). So a stream of
// keys failing now and then does not push the open keys out.
func (b *Breaker) forgetOne(keep *list.Element, open bool) {
	old := b.failing.Back()
	if old == keep || old == nil {
		if !open {
			return
		}
		if old = b.open.Back(); old == keep || old == nil {
			return
		}
		b.open.Remove(old)
	} else {
		b.failing.Remove(old)
	}
	delete(b.keys, old.Value.(*entry).key)
}

package visibility

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// API is the part of the SQS client an Extender calls. The calls of an
// *sqs.Client send each request's body from a copy of their own, so that a
// reply that comes back while the body is still being written does not make
// the SDK send an applied call again (see the worker package's
// documentation).
type API interface {
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// Causes of a cancelled lease context, matched with errors.Is.
var (
	// ErrLeaseLost: the message's visibility could not be extended; it
	// may be handled by another consumer.
	ErrLeaseLost = errors.New("visibility: lease lost")
	// ErrMaxLifetime: the message reached Config.MaxLifetime and is no
	// longer extended.
	ErrMaxLifetime = errors.New("visibility: maximum lifetime reached")
	// ErrReleased: Lease.Release was called, the lease holding until then.
	// A lease lost or expired before its release keeps that cause.
	ErrReleased = errors.New("visibility: lease released")
)

// maxBatch is the most entries SQS takes in one batch call.
const maxBatch = 10

// Config configures an Extender. The zero value of each field means its
// documented default; QueueURL and VisibilityTimeout are required (the worker
// runtime sets both).
type Config struct {
	// QueueURL is the queue whose messages are extended. Required.
	QueueURL string
	// VisibilityTimeout is the visibility timeout messages are received
	// with, from which the other defaults derive. Required, at least 1s.
	VisibilityTimeout time.Duration
	// Extension is the visibility timeout each extension sets, in whole
	// seconds, at most 12h. Default VisibilityTimeout.
	Extension time.Duration
	// Threshold: a message is extended when its visibility timeout ends
	// within Threshold. It must be below Extension and VisibilityTimeout.
	// Default half of VisibilityTimeout.
	Threshold time.Duration
	// Interval is the time between rounds. It must be below Threshold, so
	// that a failed extension is tried again before the lease ends.
	// Default a third of Threshold, at most 10s.
	Interval time.Duration
	// MaxLifetime is the longest a message is kept invisible, counted from
	// its receive. Default and at most 12h, SQS's own limit, which SQS
	// counts from its own receive, before the one the Extender is told:
	// extensions end 30 s short of 12h.
	MaxLifetime time.Duration
	// MaxInFlight bounds the batch calls of one round made at once. Raise
	// it with the messages received at once: a round must extend them
	// all within the time they have left (Threshold), each call taking as
	// long as SQS does to answer. Default 4 (the worker's: its Pollers, at
	// least 4).
	MaxInFlight int
	// OnExtend, if set, runs after every successful extension with the
	// message and the time it is now invisible until.
	OnExtend func(m *sqsworker.Message, until time.Time)
	// Logger receives lost leases and failed rounds. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.QueueURL == "" {
		bad("QueueURL is required")
	}
	if c.VisibilityTimeout < time.Second || c.VisibilityTimeout > sqsworker.MaxVisibilityTimeout {
		bad("VisibilityTimeout %s is outside 1s..12h", c.VisibilityTimeout)
	}
	if err := c.CheckFields(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	c = c.withDefaults()
	if c.Threshold >= c.VisibilityTimeout {
		bad("Threshold %s is not below VisibilityTimeout %s", c.Threshold, c.VisibilityTimeout)
	}
	if c.Threshold >= c.Extension {
		bad("Threshold %s is not below Extension %s", c.Threshold, c.Extension)
	}
	if c.Interval >= c.Threshold {
		bad("Interval %s is not below Threshold %s", c.Interval, c.Threshold)
	}
	return errors.Join(errs...)
}

// CheckFields reports what is wrong with the settings that hold whatever
// the queue: Extension, Threshold, Interval, MaxLifetime and MaxInFlight,
// each by itself. New checks the rest once the queue is known: QueueURL,
// VisibilityTimeout, and how the durations compare with it and with each
// other. A runtime that learns the queue's visibility timeout later checks
// these first, where a mistake can fail at once.
func (c Config) CheckFields() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Extension < 0 || c.Extension > sqsworker.MaxVisibilityTimeout || c.Extension%time.Second != 0 {
		bad("Extension %s is not a whole number of seconds in 1s..12h", c.Extension)
	}
	if c.Threshold < 0 {
		bad("Threshold %s is negative", c.Threshold)
	}
	if c.Interval < 0 {
		bad("Interval %s is negative", c.Interval)
	}
	if c.MaxLifetime < 0 || c.MaxLifetime > sqsworker.MaxVisibilityTimeout {
		bad("MaxLifetime %s is outside 0..12h", c.MaxLifetime)
	}
	if c.MaxInFlight < 0 {
		bad("MaxInFlight %d is negative", c.MaxInFlight)
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Extension == 0 {
		c.Extension = c.VisibilityTimeout.Truncate(time.Second)
	}
	if c.Threshold == 0 {
		c.Threshold = c.VisibilityTimeout / 2
	}
	if c.Interval == 0 {
		c.Interval = min(c.Threshold/3, 10*time.Second)
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = sqsworker.MaxVisibilityTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = 4
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Extender extends the visibility of the messages it tracks. Create one with
// New, run its rounds with Run, and Track each message when it is received.
// Its methods are safe for concurrent use.
type Extender struct {
	api  API
	opts []func(*sqs.Options) // given to every call of api: sdkhttp.SQSOptions
	cfg  Config
	log  *slog.Logger

	// rounding is held by the round under way: rounds do not overlap, so
	// that no lease is sent in two calls at once.
	rounding sync.Mutex

	mu sync.Mutex
	// leases lists the leases tracked, newest first, through Lease.prev
	// and Lease.next: adding and removing one takes no hashing nor
	// growth. tracked counts them.
	leases  *Lease
	tracked int
	// sent is signalled, with mu, when a batch call has returned and the
	// counts of calls of its leases (Lease.calls) went down: Release
	// waits on it.
	sent sync.Cond

	rounds, calls, extended, lost, expired atomic.Int64
}

// New validates cfg and returns an Extender.
func New(api API, cfg Config) (*Extender, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("visibility: invalid Config: %w", err)
	}
	if api == nil {
		return nil, errors.New("visibility: nil SQS client")
	}
	cfg = cfg.withDefaults()
	e := &Extender{api: api, opts: sdkhttp.SQSOptions(api), cfg: cfg, log: cfg.Logger.With("queue", cfg.QueueURL)}
	e.sent.L = &e.mu
	return e, nil
}

// Config returns the configuration in effect, defaults filled in.
func (e *Extender) Config() Config { return e.cfg }

// Lease is one tracked message.
type Lease struct {
	e          *Extender
	msg        *sqsworker.Message
	receivedAt time.Time
	ctx        leaseContext // what Track returns, allocated with the Lease
	cancel     context.CancelCauseFunc

	// left is the deadline, as time from receivedAt (which keeps the
	// monotonic clock reading), in nanoseconds: read without e.mu, written
	// with it held, so that the handler's checks of the lease take no lock.
	left   atomic.Int64
	acking atomic.Bool // see Acknowledging

	// guarded by e.mu; ended and calls stand next to acking, in the
	// padding before hooks, so that a Lease fits the 128-byte size class
	ended bool // released, lost or expired; whoever sets it cancels ctx
	// estimated: the deadline counts from an estimated receive, which may
	// be late; extended at the next round whatever its time left, until
	// an extension sets a deadline SQS confirmed.
	estimated bool
	// calls counts the batch calls under way that extend the lease: one
	// at most, unless rounds overlap (Round called while Run runs).
	calls      uint8
	hooks      []func(time.Time)
	prev, next *Lease // in e.leases while tracked
}

// addLocked starts tracking l. e.mu is held.
func (e *Extender) addLocked(l *Lease) {
	l.next = e.leases
	if e.leases != nil {
		e.leases.prev = l
	}
	e.leases = l
	e.tracked++
}

// removeLocked stops tracking l, which is tracked. e.mu is held.
func (e *Extender) removeLocked(l *Lease) {
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		e.leases = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	}
	l.prev, l.next = nil, nil
	e.tracked--
}

// deadline is when the message becomes visible again unless extended.
func (l *Lease) deadline() time.Time { return l.receivedAt.Add(time.Duration(l.left.Load())) }

type leaseKey struct{}

// leaseContext is a lease's context: the cancel context Track derives from
// its parent, which also answers FromContext, without a context.WithValue
// layer of its own. Value hands every other key, context.Cause's included,
// to the cancel context, so that contexts derived from a leaseContext are
// registered with that cancel context as with any other.
type leaseContext struct {
	context.Context
	l *Lease
}

// Value returns the lease for FromContext's key; other keys are looked up in
// the cancel context and its parents.
func (c *leaseContext) Value(key any) any {
	if _, ok := key.(leaseKey); ok {
		return c.l
	}
	return c.Context.Value(key)
}

// String names the context, as the standard library's contexts do.
func (c *leaseContext) String() string {
	id := ""
	if c.l.msg != nil {
		id = c.l.msg.ID
	}
	return fmt.Sprint(c.Context) + ".WithLease(" + id + ")"
}

// FromContext returns the lease of the message whose handler runs with ctx,
// or nil.
func FromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey{}).(*Lease)
	return l
}

// Track starts extending m, received at receivedAt with the configured
// visibility timeout. The returned context, derived from ctx and carrying the
// lease (see FromContext), is cancelled when the lease is lost or expires,
// with a cause matching ErrLeaseLost or ErrMaxLifetime, and at the latest by
// Lease.Release, with the cause ErrReleased. Call Lease.Release once the
// message has been handled: until then ctx keeps a reference to the lease's
// context.
func (e *Extender) Track(ctx context.Context, m *sqsworker.Message, receivedAt time.Time) (context.Context, *Lease) {
	return e.track(ctx, m, receivedAt, false)
}

// TrackEstimated is Track for a message whose receive time is an estimate
// that may be later than SQS's own (a Lambda record on its second receive
// or later, whose receive time SQS does not give): its deadline, counted
// from receivedAt, may be later than SQS's. The next round extends it
// whatever its time left, so that its deadline is then one SQS confirmed;
// until that extension its deadline is counted from receivedAt, as
// Track's is.
func (e *Extender) TrackEstimated(ctx context.Context, m *sqsworker.Message, receivedAt time.Time) (context.Context, *Lease) {
	return e.track(ctx, m, receivedAt, true)
}

func (e *Extender) track(ctx context.Context, m *sqsworker.Message, receivedAt time.Time, estimated bool) (context.Context, *Lease) {
	cctx, cancel := context.WithCancelCause(ctx)
	l := &Lease{e: e, msg: m, receivedAt: receivedAt, cancel: cancel, estimated: estimated}
	l.left.Store(int64(e.cfg.VisibilityTimeout))
	l.ctx = leaseContext{Context: cctx, l: l}
	e.mu.Lock()
	e.addLocked(l)
	e.mu.Unlock()
	return &l.ctx, l
}

// Message returns the leased message.
func (l *Lease) Message() *sqsworker.Message { return l.msg }

// Deadline returns when the message becomes visible again unless extended.
func (l *Lease) Deadline() time.Time { return l.deadline() }

// LossLag bounds how long after its Deadline a lease whose extensions fail
// is seen lost and its context cancelled, while the Extender runs: two of
// Config.Interval, the wait for a round, and the wait within it (a round
// looks at its leases every Interval while its calls are under way, and a
// call runs at most an Interval past the earliest deadline of its own
// leases). (A Config.OnExtend or Lease.OnExtend hook that
// blocks holds its round up, and the bound with it.) Another receive of the
// message may come from SQS at the Deadline already: the idempotency
// middleware keeps a claim from such a receive for this long more.
func (l *Lease) LossLag() time.Duration { return 2 * l.e.cfg.Interval }

// OnExtend registers f to run after every successful extension of this
// lease, with the time the message is now invisible until.
func (l *Lease) OnExtend(f func(until time.Time)) {
	l.e.mu.Lock()
	l.hooks = append(l.hooks, f)
	l.e.mu.Unlock()
}

// Release stops extending the message: its handler has finished. It cancels
// the lease's context with the cause ErrReleased, which detaches it from the
// context Track derived it from, unless the lease was lost or expired first:
// the context then keeps that cause, in place when Release returns, so that
// errors.Is(context.Cause(ctx), ErrLeaseLost) after Release tells a lost
// lease from a released one. Calling it more than once is harmless.
//
// No extension is sent for the message once Release is called, and one
// already sent is waited for (at most the longer of Config.Interval and
// 2 s, the longest an extension call may take): a visibility change sent after Release returns
// reaches SQS after every extension, which would otherwise undo it (a
// shorter visibility, or a longer one), and Deadline counts an extension
// that landed meanwhile. A lease being acknowledged (Acknowledging) is not
// waited for: its delete was sent, and an extension landing after it fails.
func (l *Lease) Release() { l.ReleaseBy(time.Time{}) }

// ReleaseBy is Release, waiting for an extension already sent no later than
// by (without limit if by is zero): a runtime that must be done by then (a
// Lambda invocation, stopped at its deadline) lets such an extension land
// after its own visibility change rather than miss its deadline.
func (l *Lease) ReleaseBy(by time.Time) {
	l.e.mu.Lock()
	first := !l.ended
	if first {
		l.ended = true
		l.e.removeLocked(l)
	}
	if !l.acking.Load() {
		if by.IsZero() {
			for l.calls > 0 {
				l.e.sent.Wait()
			}
		} else if l.calls > 0 {
			l.waitCallsLocked(by)
		}
	}
	l.e.mu.Unlock()
	if first {
		l.cancel(ErrReleased)
		return
	}
	// Ended by a round, which cancels the context right after; or released
	// before, and cancelled already.
	<-l.ctx.Done()
}

// waitCallsLocked waits until no extension call of l is under way, or
// until by (at once if by has passed). e.mu is held. It stands apart from
// ReleaseBy, which most leases leave without waiting, so that the timer
// and its closure do not weigh on that path.
func (l *Lease) waitCallsLocked(by time.Time) {
	wait := time.Until(by)
	if wait <= 0 {
		return
	}
	// Wakes the wait at by; holding mu, it cannot signal between a check
	// of the time and the Wait that follows.
	t := time.AfterFunc(wait, func() {
		l.e.mu.Lock()
		l.e.sent.Broadcast()
		l.e.mu.Unlock()
	})
	for l.calls > 0 && time.Now().Before(by) {
		l.e.sent.Wait()
	}
	t.Stop()
}

// Acknowledging marks the lease as being acknowledged: its delete has been
// sent, and the lease is still extended until Release, so that the message
// is not handed out again while the delete is retried through an outage. An
// extension rejected from then on is taken as the delete having landed,
// not as a lost lease: the lease ends quietly, with the cause ErrReleased.
func (l *Lease) Acknowledging() { l.acking.Store(true) }

func (l *Lease) acknowledging() bool { return l.acking.Load() }

// end stops tracking the lease and cancels its context with cause. It
// reports false when the lease had already ended or been released: a round
// that raced with the handler's end has nothing to report.
func (l *Lease) end(cause error) bool {
	l.e.mu.Lock()
	if l.ended {
		l.e.mu.Unlock()
		return false
	}
	l.ended = true
	l.e.removeLocked(l)
	l.e.mu.Unlock()
	l.cancel(cause)
	return true
}

func (l *Lease) released() bool {
	l.e.mu.Lock()
	defer l.e.mu.Unlock()
	return l.ended
}

// Stats counts an Extender's work.
type Stats struct {
	Rounds   int64 // rounds that extended at least one message
	Calls    int64 // ChangeMessageVisibilityBatch calls
	Extended int64 // successful extensions
	Lost     int64 // leases lost: rejected or run out
	Expired  int64 // leases that reached MaxLifetime
	Tracked  int   // messages tracked now
}

// Stats returns the Extender's counters.
func (e *Extender) Stats() Stats {
	e.mu.Lock()
	n := e.tracked
	e.mu.Unlock()
	return Stats{Rounds: e.rounds.Load(), Calls: e.calls.Load(), Extended: e.extended.Load(),
		Lost: e.lost.Load(), Expired: e.expired.Load(), Tracked: n}
}

// Run makes a round every Config.Interval until ctx is cancelled, then
// returns nil. The leases still tracked then are not cancelled.
func (e *Extender) Run(ctx context.Context) error {
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			e.Round(ctx)
		}
	}
}

// Round extends the messages that are due now. Run calls it every
// Config.Interval; tests may call it directly.
//
// Each call's visibility timeouts are computed when it is sent, not when the
// round starts: a call that waited behind Config.MaxInFlight others still
// extends by Config.Extension (within MaxLifetime), and a lease that ran out
// or reached MaxLifetime meanwhile ends instead of being sent a timeout that
// would make its message visible at once. Rounds do not overlap: a Round
// called while another runs waits for it.
func (e *Extender) Round(ctx context.Context) {
	e.rounding.Lock()
	defer e.rounding.Unlock()
	e.round(ctx)
}

// TryRound is Round, unless a round is under way, which does its work:
// it then returns false at once. A runtime calls it when leases may be due
// before the next of Run's rounds (a Lambda invocation's start).
func (e *Extender) TryRound(ctx context.Context) bool {
	if !e.rounding.TryLock() {
		return false
	}
	defer e.rounding.Unlock()
	e.round(ctx)
	return true
}

// round is Round, e.rounding held.
func (e *Extender) round(ctx context.Context) {
	now := time.Now()
	var due, early, lost, expired []*Lease
	e.mu.Lock()
	for l := e.leases; l != nil; l = l.next {
		until, deadline := e.extensionEnd(l, now), l.deadline()
		switch left := deadline.Sub(now); {
		case left <= 0:
			lost = append(lost, l)
		case l.estimated && until.After(deadline):
			due = append(due, l) // for a deadline SQS confirms
		case left > e.cfg.Threshold:
			// Worth extending early only if it gains a round or more.
			if until.Sub(deadline) >= e.cfg.Interval {
				early = append(early, l)
			}
		case !until.After(deadline):
			expired = append(expired, l)
		default:
			due = append(due, l)
		}
	}
	e.mu.Unlock()
	for _, l := range lost {
		e.ranOut(l)
	}
	for _, l := range expired {
		e.expire(l)
	}
	if len(due) == 0 {
		return
	}
	e.rounds.Add(1)
	// The leases that run out first are sent first: when more are due
	// than MaxInFlight calls carry at once (a backlog, SQS slow to
	// answer), those with time left wait, not those about to run out.
	slices.SortFunc(due, func(a, b *Lease) int { return a.deadline().Compare(b.deadline()) })
	// Fill the last call's free entries with the messages due soonest.
	if free := (maxBatch - len(due)%maxBatch) % maxBatch; free > 0 && len(early) > 0 {
		slices.SortFunc(early, func(a, b *Lease) int { return a.deadline().Compare(b.deadline()) })
		due = append(due, early[:min(free, len(early))]...)
	}
	sem := make(chan struct{}, e.cfg.MaxInFlight)
	var wg sync.WaitGroup
	// While calls are under way, the leases whose deadline passes (those
	// whose extension failed, those still waiting for their call) are
	// seen lost every Interval, not when a slow call of the round ends
	// (see LossLag).
	tick := time.NewTicker(e.cfg.Interval)
	defer tick.Stop()
	for batch := range slices.Chunk(due, maxBatch) {
		if !e.turn(ctx, sem, tick.C, due) {
			break // Run is stopping: no more calls
		}
		e.ranOutIn(due)
		wg.Go(func() {
			defer func() { <-sem }()
			e.extend(ctx, batch)
			e.ranOutIn(batch)
		})
	}
	calls := make(chan struct{})
	go func() { wg.Wait(); close(calls) }() // ends with the round's calls
	for waiting := true; waiting; {
		select {
		case <-calls:
			waiting = false
		case <-tick.C:
			e.ranOutIn(due)
		}
	}
	e.ranOutIn(due)
}

// turn waits for a free call of the round (sem), seeing the leases of due
// that ran out at every tick meanwhile. It reports false when ctx ends
// first.
func (e *Extender) turn(ctx context.Context, sem chan struct{}, tick <-chan time.Time, due []*Lease) bool {
	for {
		select {
		case sem <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		case <-tick:
			e.ranOutIn(due)
		}
	}
}

// ranOutIn ends the leases of ls whose deadline has passed, but for those
// whose extension call is under way: SQS may have applied it, its answer
// not yet read. Such a lease is seen when its call returns (extend's
// caller calls ranOutIn again), within the call's timeout.
func (e *Extender) ranOutIn(ls []*Lease) {
	now := time.Now()
	var out []*Lease
	e.mu.Lock()
	for _, l := range ls {
		if !l.ended && l.calls == 0 && !now.Before(l.deadline()) {
			out = append(out, l)
		}
	}
	e.mu.Unlock()
	for _, l := range out {
		e.ranOut(l)
	}
}

// twelveHourMargin is kept from SQS's 12 hours, which it counts from its
// own receive, earlier than a lease's receivedAt by the time its answer
// took: an extension planned to end at 12 hours from receivedAt is refused.
const twelveHourMargin = 30 * time.Second

// extensionEnd is when an extension of l sent at t would end: Extension
// after t, or earlier at l's MaxLifetime (12 hours less twelveHourMargin at
// most), in whole seconds from t.
func (e *Extender) extensionEnd(l *Lease, t time.Time) time.Time {
	d := e.cfg.Extension
	life := min(e.cfg.MaxLifetime, sqsworker.MaxVisibilityTimeout-twelveHourMargin)
	if capAt := l.receivedAt.Add(life); capAt.Before(t.Add(d)) {
		d = capAt.Sub(t).Truncate(time.Second)
	}
	return t.Add(d)
}

// ranOut ends a lease whose visibility timeout ended before it was extended.
func (e *Extender) ranOut(l *Lease) {
	if l.end(fmt.Errorf("%w: message %s: visibility timeout ran out", ErrLeaseLost, l.msg.ID)) {
		e.lost.Add(1)
		e.log.Warn("visibility lease ran out before it could be extended", "message_id", l.msg.ID)
	}
}

// expire ends a lease that cannot be extended past its current deadline
// without going past MaxLifetime.
func (e *Extender) expire(l *Lease) {
	if l.end(fmt.Errorf("%w: message %s: %s since its receive", ErrMaxLifetime, l.msg.ID, e.cfg.MaxLifetime)) {
		e.expired.Add(1)
		e.log.Warn("message reached its maximum lifetime; no longer extended", "message_id", l.msg.ID, "max_lifetime", e.cfg.MaxLifetime)
	}
}

// minCallTimeout is the least time an extension call is given while none
// of its leases runs out sooner: enough for an SDK retry or a new
// connection, which a short Interval (a third of half a 2 s visibility
// timeout) is not.
const minCallTimeout = 2 * time.Second

// callTimeout bounds the extension call of sends, made at start: Interval,
// or longer, up to minCallTimeout, while the earliest deadline of its
// leases is further. A call never outlives that deadline by more than
// Interval, so that LossLag holds.
func (e *Extender) callTimeout(sends []pending, start time.Time) time.Duration {
	earliest := sends[0].l.deadline()
	for _, p := range sends[1:] {
		if d := p.l.deadline(); d.Before(earliest) {
			earliest = d
		}
	}
	return max(e.cfg.Interval, min(minCallTimeout, earliest.Sub(start)))
}

// pending is one extension of a call: the lease and when its message will be
// visible again, counted from the call's start.
type pending struct {
	l     *Lease
	until time.Time
	// capped: shorter than Config.Extension, cut at the lease's
	// MaxLifetime.
	capped bool
	// counted: the call no longer counts in l.calls (see extend).
	counted bool
}

// extend makes one batch call for the leases of batch still tracked. The
// visibility timeouts are computed now, after any wait for a free call.
func (e *Extender) extend(ctx context.Context, batch []*Lease) {
	// SQS counts a timeout from its receipt of the call: no earlier than
	// start, so until is a lower bound of the message's new deadline.
	start := time.Now()
	var lost, expired []*Lease
	sends := make([]pending, 0, len(batch))
	e.mu.Lock()
	for _, l := range batch {
		until := e.extensionEnd(l, start)
		switch {
		case l.ended: // released (or ended) while the call waited
		case !start.Before(l.deadline()):
			lost = append(lost, l)
		case !until.After(l.deadline()):
			expired = append(expired, l)
		default:
			sends = append(sends, pending{l: l, until: until, capped: until.Sub(start) < e.cfg.Extension})
			l.calls++
		}
	}
	e.mu.Unlock()
	for _, l := range lost {
		e.ranOut(l)
	}
	for _, l := range expired {
		e.expire(l)
	}
	if len(sends) == 0 {
		return
	}
	// Once the call and its results are done, Release may return: a change
	// sent after it lands after this call's. Every lease of the call stops
	// counting it before any hook runs, so that a hook may release any
	// lease.
	settled := false
	settle := func() {
		settled = true
		e.mu.Lock()
		for i := range sends {
			if !sends[i].counted {
				sends[i].l.calls--
			}
		}
		e.mu.Unlock()
		e.sent.Broadcast()
	}
	defer func() {
		if !settled {
			settle()
		}
	}()
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &e.cfg.QueueURL, Entries: make([]types.ChangeMessageVisibilityBatchRequestEntry, len(sends))}
	for i, p := range sends {
		// until is after the deadline, itself after start, and whole
		// seconds from start: at least 1s.
		in.Entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(p.l.msg.ReceiptHandle),
			VisibilityTimeout: int32(p.until.Sub(start) / time.Second),
		}
	}
	e.calls.Add(1)
	cctx, cancel := context.WithTimeout(ctx, e.callTimeout(sends, start))
	defer cancel()
	out, err := e.api.ChangeMessageVisibilityBatch(cctx, in, e.opts...)
	if err != nil {
		if ctx.Err() == nil {
			e.log.Warn("extending visibility failed; retrying next round", "messages", len(sends), "error", err)
		}
		return
	}
	failed := make(map[string]types.BatchResultErrorEntry, len(out.Failed))
	for _, f := range out.Failed {
		failed[aws.ToString(f.Id)] = f
	}
	var ok [maxBatch]bool // the entries the answer lists as successful, by ID
	for _, r := range out.Successful {
		if n, err := strconv.Atoi(aws.ToString(r.Id)); err == nil && n >= 0 && n < maxBatch {
			ok[n] = true
		}
	}
	var hooks []func()
	for i, p := range sends {
		id := strconv.Itoa(i)
		f, bad := failed[id]
		switch {
		case !bad && !ok[i]:
			// In neither list of the answer: not known to be extended.
			// Tried again next round, as a failed call's leases are.
			if !p.l.released() {
				e.log.Warn("extending visibility: the answer does not name the message; retrying next round", "message_id", p.l.msg.ID)
			}
		case !bad:
			e.extended.Add(1)
			if run := e.extendedTo(&sends[i]); run != nil {
				hooks = append(hooks, run)
			}
		case f.SenderFault && p.l.acknowledging():
			// Deleted while this call was under way.
			p.l.end(ErrReleased)
		case f.SenderFault && pastTwelveHours(f):
			// SQS counts its 12 hours from its own receive, before the
			// lease's receivedAt (a reply takes time; the Lambda adapter's
			// is an estimate): an extension up to a MaxLifetime of 12
			// hours, cut there or not (the receive may be earlier by more
			// than an Extension), can go past them, and SQS refuses it. The lease has
			// reached its lifetime; the message stays invisible until its
			// deadline, as it does when it expires.
			e.expire(p.l)
		case f.SenderFault:
			// A message deleted while this call was under way fails here
			// too; its lease was released, and end says so.
			reason := entryError(f)
			if p.l.end(fmt.Errorf("%w: message %s: %w", ErrLeaseLost, p.l.msg.ID, reason)) {
				e.lost.Add(1)
				e.log.Warn("visibility lease lost", "message_id", p.l.msg.ID, "error", reason)
			}
		default:
			if !p.l.released() {
				e.log.Warn("extending visibility failed; retrying next round", "message_id", p.l.msg.ID, "error", entryError(f))
			}
		}
	}
	settle()
	for _, run := range hooks {
		run()
	}
}

// extendedTo records the successful extension p, and lets a Release that
// waits for it return. It returns the function that runs the hooks of the
// extension, nil if none: the call runs them once all its leases have
// stopped counting it. A lease released while its extension was under way
// records it too (a change sent after Release depends on the deadline), but
// runs no hook.
func (e *Extender) extendedTo(p *pending) func() {
	l, until := p.l, p.until
	e.mu.Lock()
	p.counted = true
	l.calls--
	l.estimated = false
	later := until.After(l.deadline())
	if later {
		l.left.Store(int64(until.Sub(l.receivedAt)))
	}
	ended := l.ended
	var hooks []func(time.Time)
	if later && !ended {
		hooks = slices.Clone(l.hooks)
	}
	e.mu.Unlock()
	e.sent.Broadcast()
	if !later || ended {
		return nil
	}
	return func() {
		if e.cfg.OnExtend != nil {
			e.cfg.OnExtend(l.msg, until)
		}
		for _, h := range hooks {
			h(until)
		}
	}
}

// pastTwelveHours reports whether a batch entry failed for its visibility
// timeout, an invalid parameter: what SQS answers a visibility timeout that
// goes past the 12 hours it keeps a message invisible from its receive. A
// receipt handle of a deleted message is an invalid parameter too, but its
// message names the ReceiptHandle parameter.
func pastTwelveHours(f types.BatchResultErrorEntry) bool {
	code := aws.ToString(f.Code)
	return (code == "InvalidParameterValue" || strings.HasSuffix(code, ".InvalidParameterValue")) &&
		strings.Contains(aws.ToString(f.Message), "VisibilityTimeout")
}

// entryError turns a failed batch entry into the SDK's modeled error for its
// code, so that callers classify it with errors.As.
func entryError(f types.BatchResultErrorEntry) error {
	code, msg := aws.ToString(f.Code), aws.ToString(f.Message)
	switch code {
	case "ReceiptHandleIsInvalid":
		return &types.ReceiptHandleIsInvalid{Message: &msg}
	case "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight":
		return &types.MessageNotInflight{Message: &msg}
	}
	return &batchEntryError{code: code, msg: msg}
}

type batchEntryError struct{ code, msg string }

func (e *batchEntryError) Error() string     { return e.code + ": " + e.msg }
func (e *batchEntryError) ErrorCode() string { return e.code }

package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// MultiConfig configures a MultiWorker: several queues, one per priority
// level, consumed from one pool of handler slots. The zero value of each
// field means its documented default; only Queues is required.
type MultiConfig struct {
	// Queues are the queues to consume, at least one, each listed once.
	Queues []QueueConfig

	// Concurrency is the size of the shared pool: the most handlers
	// running at once over all the queues, and so the most messages the
	// worker holds. Default DefaultConcurrency per queue.
	Concurrency int

	// RateLimit caps the messages the whole worker receives per second,
	// over all the queues, with a token bucket of RateBurst; each queue
	// may have a limit of its own too (Config.RateLimit). A queue without
	// tokens does not receive. Default 0: no limit.
	RateLimit float64

	// RateBurst is the size of RateLimit's bucket. Default
	// min(MaxMessagesPerReceive, ceil(RateLimit)), at least 1.
	RateBurst int

	// Logger is the default of the queues' Config.Logger. Default
	// slog.Default().
	Logger *slog.Logger
}

// QueueConfig is one queue of a MultiWorker. Its Config configures the
// queue's consumer as for a Worker (its dead-letter queue, heartbeat,
// circuit breaker, rate limit, metrics and so on), with these differences:
// Config.Concurrency is the most slots of the shared pool this queue may
// hold (default: the whole pool); Config.Pollers defaults to 1, as the
// pool, not the number of receive loops, decides how many messages are
// received at once (a loop asks for up to 10 messages per receive: raise
// Pollers for a queue that needs more than one receive in flight); and
// Config.Logger defaults to MultiConfig.Logger.
type QueueConfig struct {
	Config

	// Priority orders the queues: a slot that frees goes to the
	// highest-priority queue that has messages, and while a queue has
	// messages (or may have: from Run's start until its first receive)
	// the queues below it receive only with their reserved slots. 0 (the
	// default) is the lowest; queues may share a priority.
	Priority int

	// Reserved is how many slots of the pool only this queue may use: they
	// stay free for it, however busy the other queues are. Default 0.
	Reserved int

	// MaxAge is the queue's latency budget, for the starvation guard: when
	// the queue is starved, because a message it receives was sent longer
	// than MaxAge ago (its SentTimestamp; on its first receive, not one of
	// the runtime's waiting copies) or because it waited for slots
	// for MaxAge/2, it runs with StarvationShare slots reserved
	// until what it receives is within half of MaxAge again (or it
	// receives nothing). Default 0: no guard, strict priority.
	MaxAge time.Duration

	// StarvationShare is how many slots a starved queue gets, as far as
	// the slots the other queues reserve allow. Default a quarter of the
	// pool, at least 1 and at most the queue's Concurrency. Only with
	// MaxAge.
	StarvationShare int

	// Handler runs the queue's messages. Default: the handler given to
	// MultiWorker.Run, which tells the queues apart by Message.QueueURL.
	Handler sqsworker.Handler
}

// MultiWorker consumes several SQS queues from one pool of handler slots,
// by priority, with reserved slots per queue, a starvation guard and rate
// limits. Each queue has its own receive loops, heartbeat, acknowledgement
// batches, dead-letter handling and circuit breaker, exactly as a Worker's
// (a Worker is the one-queue case of the same machinery). Create one with
// NewMulti, start it with Run and stop it with Shutdown or by cancelling
// Run's context.
type MultiWorker struct {
	workers []*Worker
	queues  []QueueConfig
	pool    *pool

	life    lifecycle
	stopped atomic.Bool

	mu sync.Mutex
	// failedFirst marks the queues whose first start failed while no
	// queue had started: once every queue is so, Run returns.
	failedFirst []bool
}

// NewMulti validates cfg and returns a MultiWorker. It makes no AWS call:
// the queues are read when Run starts.
func NewMulti(api API, cfg MultiConfig) (*MultiWorker, error) {
	err := cfg.validate()
	if api == nil {
		err = errors.Join(err, errors.New("worker: nil SQS client"))
	}
	if err != nil {
		return nil, err
	}
	size := cfg.Concurrency
	if size == 0 {
		size = DefaultConcurrency * len(cfg.Queues)
	}
	var shared limits
	if cfg.RateLimit > 0 {
		burst := cfg.RateBurst
		if burst == 0 {
			burst = defaultBurst(cfg.RateLimit, MaxMessagesPerReceive)
		}
		shared = limits{rate.NewLimiter(rate.Limit(cfg.RateLimit), burst)}
	}
	m := &MultiWorker{queues: cfg.Queues}
	m.life.init()
	pqs := make([]*poolQueue, len(cfg.Queues))
	cfgs := make([]Config, len(cfg.Queues))
	n := 0
	for i, q := range cfg.Queues {
		c := q.Config
		if c.Concurrency == 0 {
			c.Concurrency = size
		}
		if c.Pollers == 0 {
			c.Pollers = 1
		}
		if c.Logger == nil {
			c.Logger = cfg.Logger
		}
		cfgs[i] = c.withDefaults()
		n += conns(cfgs[i])
	}
	api = sdkhttp.ForSQS(api, n+size) // size: the handlers of every queue
	for i, q := range cfg.Queues {
		c := cfgs[i]
		w := newWorker(api, c)
		w.log = w.log.With("priority", q.Priority)
		w.qi = i
		w.limits = append(w.limits, shared...)
		m.workers = append(m.workers, w)
		pqs[i] = &poolQueue{priority: q.Priority, reserved: q.Reserved, max: c.Concurrency, maxAge: q.MaxAge}
		if q.MaxAge > 0 {
			pqs[i].share = q.StarvationShare
			if pqs[i].share == 0 {
				pqs[i].share = min(max(1, size/4), c.Concurrency)
			}
		}
	}
	m.pool = newPool(size, pqs)
	m.failedFirst = make([]bool, len(m.workers))
	for i, w := range m.workers {
		w.pool = m.pool
		w.park = func(err error, first bool) bool { return m.park(i, err, first) }
		w.parkMu = &m.mu
	}
	return m, nil
}

// validate returns one error naming every problem and its fix.
func (c *MultiConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Queues) == 0 {
		bad("Queues is empty: list at least one queue")
	}
	if c.Concurrency < 0 {
		bad("Concurrency %d is negative", c.Concurrency)
	}
	if c.RateLimit < 0 || math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
		bad("RateLimit %v is not a number of messages per second, 0 (no limit) or above", c.RateLimit)
	}
	if c.RateBurst < 0 {
		bad("RateBurst %d is negative", c.RateBurst)
	}
	size := c.Concurrency
	if size == 0 {
		size = DefaultConcurrency * len(c.Queues)
	}
	seen := map[string]int{}
	reserved := 0
	for i, q := range c.Queues {
		name := fmt.Sprintf("Queues[%d] (%s)", i, q.QueueURL)
		if err := q.Config.validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, errors.Unwrap(err)))
		}
		if j, ok := seen[q.QueueURL]; ok && q.QueueURL != "" {
			bad("%s: the queue is listed twice (also Queues[%d]): list each queue once", name, j)
		}
		seen[q.QueueURL] = i
		if q.Priority < 0 {
			bad("%s: Priority %d is negative: priorities run from 0 (the lowest, the default) up", name, q.Priority)
		}
		if q.Concurrency > size {
			bad("%s: Concurrency %d is above the pool's %d (MultiConfig.Concurrency): lower it or raise the pool", name, q.Concurrency, size)
		}
		conc := q.Concurrency
		if conc == 0 {
			conc = size
		}
		switch {
		case q.Reserved < 0:
			bad("%s: Reserved %d is negative", name, q.Reserved)
		case q.Reserved > conc:
			bad("%s: Reserved %d is above the queue's Concurrency %d: raise Concurrency or lower Reserved", name, q.Reserved, conc)
		}
		reserved += max(q.Reserved, 0)
		if q.MaxAge < 0 {
			bad("%s: MaxAge %s is negative", name, q.MaxAge)
		}
		switch {
		case q.StarvationShare < 0:
			bad("%s: StarvationShare %d is negative", name, q.StarvationShare)
		case q.StarvationShare > 0 && q.MaxAge == 0:
			bad("%s: StarvationShare %d does nothing without MaxAge: set MaxAge, the queue's latency budget", name, q.StarvationShare)
		case q.StarvationShare > conc:
			bad("%s: StarvationShare %d is above the queue's Concurrency %d: lower it", name, q.StarvationShare, conc)
		}
	}
	if reserved > size {
		bad("the queues reserve %d slots in all but the pool has %d (MultiConfig.Concurrency): raise Concurrency or lower the reservations", reserved, size)
	} else if reserved == size {
		for i, q := range c.Queues {
			if q.Reserved == 0 {
				bad("Queues[%d] (%s) reserves no slot and the others reserve the whole pool of %d, so it would never run: raise MultiConfig.Concurrency or lower the reservations", i, q.QueueURL, size)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("worker: invalid MultiConfig: %w", errors.Join(errs...))
}

// Run consumes every queue, handing each message to its queue's Handler,
// or to h for queues without one, until ctx is cancelled or Shutdown is
// called; then it shuts down gracefully (see Worker.Shutdown; each queue
// uses its own ShutdownTimeout when ctx is cancelled) and returns nil.
//
// A queue SQS refuses (it does not exist, access is denied, its key is
// disabled, its acknowledgements are refused), at start or later, does not
// stop the others: its receives stop, its running handlers finish as at a
// shutdown, and it is tried again after 10 s, doubling up to 5 minutes
// (from 10 s again once it was consumed for 5 minutes), until it can be
// used; a queue whose acknowledgements were refused receives again only
// once SQS takes them. Meanwhile the error is logged at each try,
// QueueStats.Unusable holds it, Ready is false, and the queue holds no
// slot of the pool and no lower queue back. Run returns an error when a
// queue's first start fails for a mistake of the configuration (it does
// not fit the queue, the queue's redrive policy is malformed), as a
// Worker's does (on a later try, once SQS takes the queue again, such a
// mistake waits as a refusal does: the others may have run for hours),
// and when no queue could start: every queue failed at its first start,
// before any was consumed (a wrong region or credentials).
func (m *MultiWorker) Run(ctx context.Context, h sqsworker.Handler) error {
	hs := make([]sqsworker.Handler, len(m.queues))
	for i, q := range m.queues {
		hs[i] = q.Handler
		if hs[i] == nil {
			hs[i] = h
		}
		if hs[i] == nil {
			return fmt.Errorf("worker: nil handler for queue %s: set its QueueConfig.Handler or pass one to Run", q.QueueURL)
		}
	}
	if err := m.life.begin(); err != nil {
		return err
	}
	defer m.life.end()

	// Every queue holds the lower ones back from the start, as one with
	// messages does, not only once its receive loop runs: reading a
	// queue's attributes may take longer than another's, and the lower
	// queues would fill the pool meanwhile. Each queue's Run ends the
	// count once its receive loops are counted.
	for i, w := range m.workers {
		w.starting = true
		m.pool.setActive(i, 1)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(m.workers))
	var wg sync.WaitGroup
	for i, w := range m.workers {
		wg.Go(func() {
			err := w.Run(rctx, hs[i])
			if errors.Is(err, ErrClosed) && m.stopped.Load() {
				err = nil // Shutdown came before this queue's Run
			}
			if err != nil {
				errs[i] = err
				cancel() // a mistake of the configuration, or no queue could start: stop the others
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for i, w := range m.workers {
			if u := w.unusable.Load(); errs[i] == nil && u != nil {
				errs[i] = *u // waiting to be tried again when the last queue failed
			}
		}
		return errors.Join(errs...)
	}
	return nil
}

// park reports whether queue i, which cannot be used for err, is to wait
// and be tried again (see Run): not when its first try (first) failed
// other than for SQS's refusal (the configuration does not fit the queue,
// its redrive policy is malformed: a mistake to mend, as for a Worker), nor
// once every queue failed at its first start and none has been consumed.
// A queue that fails so on a later try, once SQS took it again, waits: the
// others may have run for hours.
func (m *MultiWorker) park(i int, err error, first bool) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if first && !awserr.IsFatal(err) {
		return false
	}
	for _, w := range m.workers {
		if w.consumed.Load() {
			return true
		}
	}
	m.failedFirst[i] = true
	for _, f := range m.failedFirst {
		if !f {
			return true
		}
	}
	return false
}

// Shutdown stops every queue gracefully, within ctx's deadline, as
// Worker.Shutdown does: no new receive, the long polls under way end,
// received-but-unstarted messages of every queue are released at once,
// in-flight handlers finish or are cancelled at the deadline (and their
// messages released), pending acknowledgements are sent. It returns ctx's
// error when ctx ended first.
func (m *MultiWorker) Shutdown(ctx context.Context) error {
	m.stopped.Store(true)
	m.life.shutdown(nil)
	var wg sync.WaitGroup
	for _, w := range m.workers {
		wg.Go(func() { _ = w.Shutdown(ctx) })
	}
	wg.Wait()
	return m.life.wait(ctx)
}

// Ready reports whether every queue is being consumed (see Worker.Ready):
// it is false while a queue that cannot be used waits to be tried again.
func (m *MultiWorker) Ready() bool {
	for _, w := range m.workers {
		if !w.Ready() {
			return false
		}
	}
	return true
}

// QueueStats is a snapshot of one queue of a MultiWorker.
type QueueStats struct {
	// QueueURL and Priority are the queue's, from its QueueConfig.
	QueueURL string
	Priority int
	// Stats are its counters, as a Worker's.
	Stats
	// Slots is how many slots of the pool the queue holds now (its
	// running handlers, and its receives under way), and PeakSlots the
	// most it has held at once.
	Slots, PeakSlots int
	// Starved reports whether the starvation guard holds slots for it now.
	Starved bool
	// Unusable is the error for which the queue is not consumed now, while
	// it waits to be tried again (see MultiWorker.Run); nil otherwise.
	Unusable error
}

// Stats returns a snapshot of each queue, in the order of
// MultiConfig.Queues.
func (m *MultiWorker) Stats() []QueueStats {
	out := make([]QueueStats, len(m.workers))
	for i, w := range m.workers {
		st := m.pool.state(i)
		out[i] = QueueStats{QueueURL: w.cfg.QueueURL, Priority: m.queues[i].Priority, Stats: w.Stats(),
			Slots: st.used, PeakSlots: st.peak, Starved: st.starved}
		if u := w.unusable.Load(); u != nil {
			out[i].Unusable = *u
		}
	}
	return out
}

package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/time/rate"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/stopby"
	"github.com/sqsworker/sqsworker/visibility"
)

// API is the part of the SQS client a Worker calls. *sqs.Client implements
// it.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ackbatch.API
	queue.API
	queue.Sender
}

var _ API = (*sqs.Client)(nil)

// Errors a Worker returns or puts in handler contexts.
var (
	// ErrRunning is returned by Run when the worker is already running.
	ErrRunning = errors.New("worker: already running")
	// ErrClosed is returned by Run after the worker was shut down: a
	// Worker runs once.
	ErrClosed = errors.New("worker: closed")
	// ErrHandlerTimeout is the cause of a handler context cancelled by
	// Config.HandlerTimeout.
	ErrHandlerTimeout = errors.New("worker: handler timeout")
	// ErrShutdown is the cause of a handler context cancelled because the
	// shutdown deadline passed. Its message is released for another
	// consumer at once.
	ErrShutdown = stopby.Cause("worker: shutdown deadline passed")
)

// Worker consumes one SQS queue, running a handler for each message. Create
// one with New, start it with Run and stop it with Shutdown or by cancelling
// Run's context.
type Worker struct {
	api    API
	cfg    Config
	log    *slog.Logger
	counts executor.Counters

	ext   atomic.Pointer[visibility.Extender] // the running heartbeat, for HeartbeatStats
	ready atomic.Bool                         // see Ready
	life  lifecycle
	// stopping is cancelled by Shutdown; shutdownCtx holds the deadline
	// Shutdown was given.
	stopping    context.Context
	stop        context.CancelFunc
	shutdownCtx atomic.Pointer[context.Context]
	// forced is cancelled when a later Shutdown's context ends during the
	// stop: the handlers still running are cut short then, as at the
	// first Shutdown's deadline.
	forced context.Context
	force  context.CancelFunc

	// pool holds the handler slots: the Worker's own, or a MultiWorker's
	// shared by its queues, of which this is number qi.
	pool   *pool
	qi     int
	limits limits
	// own is the part of limits that is this queue's alone (its
	// Config.RateLimit); the rest, a MultiWorker's, its queues share.
	own limits
	// starting is set by a MultiWorker's Run, which counts the queue's
	// start-up as an active receive loop of the pool, before this Run
	// starts: until its receive loops run, the queue holds lower queues
	// back as a queue with messages does. Run ends that count (endStart)
	// once its loops are counted, or when it returns before.
	starting bool
	// park, set by a MultiWorker, decides whether Run waits and tries the
	// queue again when it cannot be used, rather than return the error
	// (see MultiWorker.Run); unusable holds that error meanwhile.
	park     func(err error, first bool) bool
	unusable atomic.Pointer[error]
	consumed atomic.Bool // the queue was read and its consumer started, at least once; set under parkMu when not nil
	parkMu   *sync.Mutex // the MultiWorker's, for park
	// parkBase and parkReset are set by tests only; 0: the constants
	// parkBase and parkCap.
	parkBase, parkReset time.Duration

	// breakerAsked, set only by tests before Run, runs in each receive
	// loop right after it asked the circuit breaker whether it may receive,
	// before it acts on the answer: where a breaker that opens meanwhile
	// races the loop.
	breakerAsked func()
}

// New validates cfg and returns a Worker. It makes no AWS call: the queue is
// read when Run starts.
func New(api API, cfg Config) (*Worker, error) {
	err := cfg.validate()
	if api == nil {
		err = errors.Join(err, errors.New("worker: nil SQS client"))
	}
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w := newWorker(sdkhttp.ForSQS(api, conns(cfg)+cfg.Concurrency), cfg)
	w.pool = newPool(cfg.Concurrency, []*poolQueue{{max: cfg.Concurrency}})
	return w, nil
}

// newWorker returns a Worker of cfg, with its defaults set, without its
// pool.
func newWorker(api API, cfg Config) *Worker {
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	w := &Worker{
		api: api,
		cfg: cfg,
		log: cfg.Logger.With("queue", cfg.QueueURL),
	}
	w.life.init()
	if cfg.RateLimit > 0 {
		w.limits = limits{rate.NewLimiter(rate.Limit(cfg.RateLimit), cfg.RateBurst)}
		w.own = w.limits
	}
	w.stopping, w.stop = context.WithCancel(context.Background())
	w.forced, w.force = context.WithCancel(context.Background())
	return w
}

// Run receives messages and hands each to h until ctx is cancelled or
// Shutdown is called, then shuts down gracefully (see Shutdown) and returns
// nil. It returns an error at once when the queue cannot be used: it does not
// exist, access is denied, its redrive policy is malformed, or the
// configuration does not fit it. Receive errors that may pass (network,
// throttling, an unreachable endpoint) are retried with capped backoff, for
// ever.
func (w *Worker) Run(ctx context.Context, h sqsworker.Handler) error {
	defer w.endStart()
	if h == nil {
		return errors.New("worker: nil handler")
	}
	if err := w.life.begin(); err != nil {
		return err
	}
	defer w.life.end()

	var err error
	tried := false // the queue was tried once, and waited
	for parks := 1; ; parks++ {
		// Acknowledgements refused are asked about before messages are
		// received again: each message received would run, fail to be
		// deleted and come back, one receive nearer the dead-letter queue.
		var refused *refusedAckError
		if errors.As(err, &refused) {
			err = w.probeAcks(ctx)
		}
		if err == nil || refused == nil {
			var consumed time.Duration
			consumed, err = w.runOnce(ctx, h)
			if consumed >= cmp.Or(w.parkReset, parkCap) {
				parks = 1 // a new outage: its first wait is parkBase's again
			}
		}
		if err == nil || w.park == nil {
			return err
		}
		if ctx.Err() != nil || w.stopping.Err() != nil {
			return nil // stopped during a probe: not a queue that cannot be used
		}
		if !w.park(err, !tried) {
			return err
		}
		tried = true
		// A MultiWorker's queue that cannot be used waits, and is tried
		// again, while the other queues go on: it holds no slot and no
		// lower queue back meanwhile.
		w.endStart()
		unusable := err // a copy: err changes with the next try, while Stats reads this
		w.unusable.Store(&unusable)
		d := parkDelay(w.parkBase, parks)
		w.log.Error("queue cannot be used; the other queues go on without it; trying it again", "error", err, "retry_in", d)
		if !w.sleepUnlessStopped(ctx, d) {
			return nil
		}
	}
}

// refusedAckError is the error of an acknowledgement SQS refused for the
// queue or the role (access denied, the queue deleted).
type refusedAckError struct{ err error }

func (e *refusedAckError) Error() string { return e.err.Error() }
func (e *refusedAckError) Unwrap() error { return e.err }

// probeReceipt is the receipt handle of the acknowledgements probeAcks
// sends: no message's.
const probeReceipt = "sqsworker-permission-probe"

// probeAcks asks SQS whether it still refuses the worker's
// acknowledgements, with a delete and a visibility change of a receipt
// handle that is no message's: SQS refuses the call for the role or the
// queue before it reads the handle, and otherwise fails the entry alone.
// It returns nil once SQS took both calls, and a *refusedAckError
// otherwise: while it refuses them, and while it does not answer (a
// throttled or unreachable SQS says nothing of the refusal, and receiving
// again would risk a receive for each message taken). Shutdown ends it.
func (w *Worker) probeAcks(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	defer context.AfterFunc(w.stopping, cancel)()
	url, id, handle := w.cfg.QueueURL, "probe", probeReceipt
	_, err := w.api.DeleteMessageBatch(pctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url,
		Entries: []types.DeleteMessageBatchRequestEntry{{Id: &id, ReceiptHandle: &handle}}})
	kind := ackbatch.Delete
	if err == nil {
		_, err = w.api.ChangeMessageVisibilityBatch(pctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: &id, ReceiptHandle: &handle}}})
		kind = ackbatch.ChangeVisibility
	}
	switch {
	case err == nil, awserr.IsInvalidParameter(err): // the made-up handle refused, not the call
		return nil
	case awserr.IsFatal(err):
		return refusedAck(kind, url, err)
	}
	return &refusedAckError{fmt.Errorf("worker: asking whether SQS takes the acknowledgements it refused on %s got no answer: %w", url, err)}
}

// refusedAck returns the error of an acknowledgement of kind SQS refused
// on the queue at url.
func refusedAck(kind ackbatch.Kind, url string, err error) error {
	return &refusedAckError{fmt.Errorf("worker: %s refused on %s (grant the role sqs:DeleteMessage and sqs:ChangeMessageVisibility on the queue): %w", kind, url, err)}
}

// runOnce reads the queue and consumes it, until ctx is cancelled,
// Shutdown is called (nil) or the queue cannot be used (the error). It
// returns how long it consumed the queue.
func (w *Worker) runOnce(ctx context.Context, h sqsworker.Handler) (time.Duration, error) {
	// Until the queue is read, Shutdown or ctx ends Run at once.
	lctx, cancel := context.WithCancel(ctx)
	unhook := context.AfterFunc(w.stopping, cancel)
	info, err := w.loadQueue(lctx)
	stopped := lctx.Err() != nil
	unhook()
	cancel()
	if err != nil {
		if stopped {
			return 0, nil
		}
		return 0, err
	}
	c, err := w.newConsumer(info, h)
	if err != nil {
		return 0, err
	}
	w.unusable.Store(nil)
	if w.parkMu != nil {
		w.parkMu.Lock() // see MultiWorker.park
	}
	w.consumed.Store(true)
	if w.parkMu != nil {
		w.parkMu.Unlock()
	}
	w.ready.Store(true)
	began := time.Now()
	err = c.consume(ctx)
	return time.Since(began), err
}

// parkBase and parkCap bound the wait before a MultiWorker's queue that
// could not be used is tried again: it doubles from parkBase with each
// try, up to parkCap.
const (
	parkBase = 10 * time.Second
	parkCap  = 5 * time.Minute
)

// parkDelay is the wait before the given try of a queue that could not be
// used, from base (0: parkBase), jittered by up to a fifth.
func parkDelay(base time.Duration, tries int) time.Duration {
	d := cmp.Or(base, parkBase)
	for i := 1; i < tries && d < parkCap; i++ {
		d *= 2
	}
	d = min(d, parkCap)
	return d - mrand.N(d/5+1)
}

// sleepUnlessStopped waits for d, and reports false instead when ctx ends
// or Shutdown is called first.
func (w *Worker) sleepUnlessStopped(ctx context.Context, d time.Duration) bool {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(w.stopping, cancel)()
	return sleep(sctx, d)
}

// Shutdown stops the worker gracefully: it starts no new receive and lets
// those under way end (within WaitTime; they are never cut short, even past
// ctx's deadline, as SQS would hide what it hands a cut receive for a whole
// visibility timeout), then releases received-but-unstarted messages
// (visibility 0); it waits for in-flight handlers until ctx ends, then
// cancels the handlers still running (their context's cause is ErrShutdown,
// and their messages are released once the receives under way have ended,
// so that none takes them again), sends the pending deletes and
// visibility changes, and returns. It returns ctx's error when ctx ended
// before all of that was done; Run itself returns only once every handler
// and receive has returned, so a handler that ignores its context holds Run
// up. Shutdown on a worker that is not running closes it. A later
// Shutdown whose ctx ends first (a second signal, say) cuts the handlers
// short then.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.life.shutdown(func() {
		w.shutdownCtx.CompareAndSwap(nil, &ctx)
		w.stop()
	})
	err := w.life.wait(ctx)
	if ctx.Err() != nil {
		w.force() // ctx ended first: the handlers still running are cut short
	}
	return err
}

// Ready reports whether the worker is consuming its queue: Run has read the
// queue's attributes and the shutdown has not started. It suits a readiness
// probe; it is false before Run, while Run waits for an unreachable queue,
// and from the start of the shutdown on.
func (w *Worker) Ready() bool { return w.ready.Load() }

// loadTimeout bounds each attempt to read the queue's attributes at start.
const loadTimeout = 20 * time.Second

// loadQueue reads the queue, retrying errors that may pass.
func (w *Worker) loadQueue(ctx context.Context) (queue.Info, error) {
	for attempt := 1; ; attempt++ {
		// Bounded: an SQS that takes the request and never answers
		// (a stalled endpoint) would hold the start for good, and, in a
		// MultiWorker, the lower queues counted as waiting for it.
		lctx, cancel := context.WithTimeout(ctx, loadTimeout)
		info, err := queue.Load(lctx, w.api, w.cfg.QueueURL)
		cancel()
		switch {
		case err == nil:
			return info, nil
		case ctx.Err() != nil:
			return info, ctx.Err()
		case awserr.IsFatal(err), errors.Is(err, queue.ErrInvalid):
			return info, fmt.Errorf("worker: %w", err)
		}
		d := jittered(attempt)
		w.log.Warn("queue unreachable, retrying", "error", err, "retry_in", d)
		// Waiting to retry, the start-up holds no lower queue back, as a
		// receive loop paused by a receive error does not.
		w.countStart(-1)
		ok := sleep(ctx, d)
		w.countStart(1)
		if !ok {
			return info, ctx.Err()
		}
	}
}

// countStart counts the start-up of a MultiWorker's queue out (-1) of its
// active receive loops, or back in (+1).
func (w *Worker) countStart(delta int) {
	if w.starting {
		w.pool.setActive(w.qi, delta)
	}
}

// endStart ends the count of the start-up (see starting). It writes
// starting only when set, so that a Worker's concurrent Runs, refused with
// ErrRunning, do not race.
func (w *Worker) endStart() {
	if w.starting {
		w.pool.setActive(w.qi, -1)
		w.starting = false
	}
}

// Stats is a snapshot of a Worker's counters.
type Stats struct {
	Received     int64 // messages received
	Succeeded    int64 // handlers that returned nil
	Failed       int64 // handlers that returned an error or panicked
	Panics       int64 // handlers that panicked (also counted in Failed)
	Retried      int64 // failed messages given a backoff or RetryAfter delay
	Postponed    int64 // messages put off by RetryAfter with a nil error (not failures)
	DeadLettered int64 // messages moved to the dead-letter queue
	Released     int64 // messages made visible at once, unprocessed (shutdown, FIFO), or on their last receive sent again as a fresh copy
	Deleted      int64 // deletes SQS confirmed
	AckFailures  int64 // deletes and visibility changes that failed for good
	MoveFailures int64 // dead-letter moves that failed
	InFlight     int64 // handlers running now
	Extensions   int64 // visibility extensions made by the heartbeat
	LeasesLost   int64 // messages whose lease was lost while their handler ran: left unacknowledged, or, handled, deleted once all the same
	// BreakerOpens counts the times the circuit breaker opened, and
	// BreakerProbes the messages it let through as probes.
	BreakerOpens, BreakerProbes int64
	// Held counts messages held back, without an attempt, until the time
	// in their sqsworker.AttrNotBefore (not failures); Requeued the
	// waiting copies sent (holds, backoffs above 12 hours, messages
	// released or postponed on their last receive);
	// RequeueFailures the copies that could not be sent.
	Held, Requeued, RequeueFailures int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	c := &w.counts
	return Stats{
		Received: c.Received.Load(), Succeeded: c.Succeeded.Load(), Failed: c.Failed.Load(),
		Panics: c.Panics.Load(), Retried: c.Retried.Load(), Postponed: c.Postponed.Load(), DeadLettered: c.DeadLettered.Load(),
		Released: c.Released.Load(), Deleted: c.Deleted.Load(), AckFailures: c.AckFailures.Load(),
		MoveFailures: c.MoveFailures.Load(), InFlight: c.InFlight.Load(),
		Extensions: c.Extensions.Load(), LeasesLost: c.LeasesLost.Load(),
		BreakerOpens: c.BreakerOpens.Load(), BreakerProbes: c.BreakerProbes.Load(),
		Held: c.Held.Load(), Requeued: c.Requeued.Load(), RequeueFailures: c.RequeueFailures.Load(),
	}
}

// HeartbeatStats returns the counters of the visibility heartbeat: rounds,
// batch calls, extensions, lost and expired leases. They are zero before Run
// starts and with Config.DisableHeartbeat.
func (w *Worker) HeartbeatStats() visibility.Stats {
	if e := w.ext.Load(); e != nil {
		return e.Stats()
	}
	return visibility.Stats{}
}

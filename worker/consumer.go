package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// ackFlushGrace is how long pending acknowledgements may still be sent after
// the shutdown deadline.
const ackFlushGrace = 5 * time.Second

// consumer is one Run of a Worker: its receive loops (receive.go), the
// dispatch of what they receive (dispatch.go), the depth reporter
// (depth.go), and the executor that settles each message through the ack
// batcher.
type consumer struct {
	w        *Worker
	cfg      Config
	info     queue.Info
	exec     *executor.Executor
	acks     *ackbatch.Batcher
	ext      *visibility.Extender // nil with heartbeats off
	recorder metrics.Recorder     // metrics.Nop when none is configured
	log      *slog.Logger
	vis      time.Duration // visibility timeout asked for on every receive; 0 if none
	margin   time.Duration // kept free at the end of a lease to send the ack

	tasks *runq // received messages for the handler goroutines (dispatch.go)

	pollCtx    context.Context // cancelled when receiving stops
	stopPoll   context.CancelFunc
	pollsDone  chan struct{}  // closed once no receive is under way after stopping
	stoppedAt  atomic.Int64   // when receiving stopped, in Unix nanoseconds
	releaseBy  atomic.Int64   // while stopping, the latest a lease's release waits (ReleaseBy), in Unix nanoseconds; 0 if none
	openUntil  atomic.Int64   // until when a failed receive may be open at SQS, in Unix nanoseconds (see mayBeOpen)
	reporter   sync.WaitGroup // the depth reporter
	stopReport context.CancelFunc
	handlerCtx context.Context // cancelled at the shutdown deadline
	receiveCtx context.Context // never cancelled: receives end within WaitTime
	hardStop   context.CancelCauseFunc
	pollers    sync.WaitGroup
	handlers   sync.WaitGroup
	beats      sync.WaitGroup // the heartbeat's rounds
	stopBeats  context.CancelFunc
	fatal      chan error
}

func (w *Worker) newConsumer(info queue.Info, h sqsworker.Handler) (*consumer, error) {
	cfg := w.cfg
	if cfg.DeadLetterQueueURL == "" {
		cfg.DeadLetterQueueURL = info.DeadLetterURL
	}
	switch {
	case cfg.MaxReceiveCount == 0:
		cfg.MaxReceiveCount = info.MaxReceiveCount
	case info.MaxReceiveCount > 0 && cfg.MaxReceiveCount > info.MaxReceiveCount:
		return nil, fmt.Errorf("worker: Config.MaxReceiveCount %d is above the redrive policy's maxReceiveCount %d of queue %s: SQS would dead-letter the message first",
			cfg.MaxReceiveCount, info.MaxReceiveCount, info.URL)
	}
	if cfg.MaxReceiveCount > 0 && cfg.DeadLetterQueueURL == "" {
		return nil, fmt.Errorf("worker: Config.MaxReceiveCount is %d but queue %s has no dead-letter queue: set Config.DeadLetterQueueURL or a redrive policy", cfg.MaxReceiveCount, info.URL)
	}
	if cfg.DeadLetterQueueURL == "" && cfg.Logger != nil {
		cfg.Logger.Warn("worker: the queue has no dead-letter queue: a job that keeps failing is retried until the queue's retention ends, and then expires unseen; give the queue a redrive policy (sqsworker queue create --dlq, or the infrastructure's JobQueue)",
			"queue", info.URL)
	}
	vis := cfg.VisibilityTimeout
	if vis == 0 {
		vis = info.VisibilityTimeout
	}
	if vis < time.Second {
		// Each long poll would take the message back at once, and run
		// it again beside itself until SQS dead-letters it.
		return nil, fmt.Errorf("worker: queue %s has a visibility timeout of %s: a received message is visible again at once, to be run again beside itself; set the queue's VisibilityTimeout (or Config.VisibilityTimeout) to at least 1s", info.URL, vis)
	}
	if margin := cfg.AckInterval + min(vis/10, time.Second); cfg.DisableHeartbeat && margin >= vis/2 {
		// Without the heartbeat a handler's deadline is the lease less
		// this margin: every handler would be cut short at its start, or
		// soon after, and every job dead-lettered.
		return nil, fmt.Errorf("worker: Config.AckInterval %s leaves handlers less than half the visibility timeout %s of queue %s without the heartbeat (the acknowledgement's margin is %s): lower AckInterval, raise the visibility timeout, or turn the heartbeat on", cfg.AckInterval, vis, info.URL, margin)
	}
	c := &consumer{
		w: w, cfg: cfg, info: info, log: w.log, vis: vis,
		margin:   cfg.AckInterval + min(vis/10, time.Second),
		fatal:    make(chan error, cfg.Pollers),
		recorder: cfg.Metrics,
	}
	if c.recorder == nil {
		c.recorder = metrics.Nop{}
	}
	c.exec = &executor.Executor{
		Handler: h,
		Policy: outcome.Policy{Backoff: cfg.Backoff, MaxReceiveCount: cfg.MaxReceiveCount,
			HasDLQ: cfg.DeadLetterQueueURL != "", RedriveMaxReceiveCount: info.MaxReceiveCount},
		Mover:          &queue.Mover{API: w.api, URL: cfg.DeadLetterQueueURL, FIFO: queue.IsFIFOURL(cfg.DeadLetterQueueURL), Host: cfg.Host},
		Counters:       &w.counts,
		Metrics:        c.recorder,
		Queue:          metrics.Dims{Queue: metrics.QueueName(info.URL)},
		HandlerName:    cfg.HandlerName,
		Log:            w.log,
		HandlerTimeout: cfg.HandlerTimeout,
		TimeoutCause:   ErrHandlerTimeout,
		StopCauses:     []error{ErrShutdown},
		Requeue:        executor.Requeue{API: w.api, URL: info.URL, FIFO: info.FIFO, Retention: info.Retention},
	}
	c.exec.Breaker = breaker.New(cfg.Breaker, c.exec.BreakerChanged)
	if !cfg.DisableHeartbeat {
		hb := cfg.Heartbeat
		if hb.Logger == nil {
			hb.Logger = cfg.Logger
		}
		hb.MaxInFlight = heartbeatCalls(cfg)
		ext, err := c.exec.Heartbeat(w.api, hb, info.URL, vis)
		if err != nil {
			return nil, fmt.Errorf("worker: Config.Heartbeat (set DisableHeartbeat to run without): %w", err)
		}
		c.ext = ext
		w.ext.Store(ext)
	}
	c.acks = ackbatch.New(w.api, ackbatch.Config{
		QueueURL:    info.URL,
		Interval:    cfg.AckInterval,
		MaxInFlight: max(4, cfg.Pollers),
		Result:      c.ackResult,
	})
	// Handler goroutines start as messages need them (see runq); every one
	// has returned once handlers.Wait does, after the run queue is closed.
	// Made last: its timer runs until consume's stop closes it, so no error
	// may be returned after it.
	c.tasks = newRunq(cfg.Concurrency, func() { c.handlers.Go(c.serve) })
	return c, nil
}

// consume runs until ctx is cancelled, Shutdown is called or receiving fails
// for good, then stops.
func (c *consumer) consume(ctx context.Context) error {
	c.pollCtx, c.stopPoll = context.WithCancel(context.WithoutCancel(ctx))
	c.pollsDone = make(chan struct{})
	c.handlerCtx, c.hardStop = context.WithCancelCause(context.WithoutCancel(ctx))
	c.receiveCtx = context.WithoutCancel(ctx)
	defer c.hardStop(nil)
	defer c.stopPoll()

	c.log.Info("worker started", "concurrency", c.cfg.Concurrency, "pollers", c.cfg.Pollers,
		"fifo", c.info.FIFO, "dead_letter_queue", c.cfg.DeadLetterQueueURL, "max_receive_count", c.cfg.MaxReceiveCount,
		"visibility_timeout", c.vis, "heartbeat", c.ext != nil)
	if c.ext != nil {
		var bctx context.Context
		bctx, c.stopBeats = context.WithCancel(context.WithoutCancel(ctx))
		c.beats.Go(func() { _ = c.ext.Run(bctx) })
	}
	if c.cfg.Metrics != nil {
		var rctx context.Context
		rctx, c.stopReport = context.WithCancel(context.WithoutCancel(ctx))
		c.reporter.Go(func() { c.report(rctx) })
	}
	for range c.cfg.Pollers {
		// Each receive loop's messages take their contexts from one of its
		// own, so that the handlers' contexts are not all registered with,
		// and removed from, one parent under one lock. It is cancelled with
		// handlerCtx, and let go once every handler is done (stop waits for
		// them before consume returns).
		hctx, cancel := context.WithCancel(c.handlerCtx)
		defer cancel()
		// Counted active here, not once its goroutine runs: the queue's
		// start-up stays counted until then (endStart), so that lower
		// queues are not let through in between.
		c.w.pool.setActive(c.w.qi, 1)
		c.pollers.Go(func() { c.poll(hctx) })
	}
	c.w.endStart()

	var fatal error
	var sctx context.Context
	select {
	case <-ctx.Done():
	case <-c.w.stopping.Done():
		sctx = *c.w.shutdownCtx.Load()
	case fatal = <-c.fatal:
	}
	if sctx == nil {
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ShutdownTimeout)
		defer cancel()
	}
	c.stop(sctx)
	if fatal != nil {
		c.log.Error("worker stopped", "error", fatal)
		return fatal
	}
	c.log.Info("worker stopped")
	return nil
}

// stop shuts the consumer down; see Worker.Shutdown. Receives under way are
// not cut short, not even at the deadline: SQS may already have handed them
// messages, which a cancelled request would leave invisible for a whole
// visibility timeout. They end within WaitTime, and what they bring is
// released at once.
func (c *consumer) stop(ctx context.Context) {
	c.w.ready.Store(false)
	if d, ok := ctx.Deadline(); ok {
		c.releaseBy.Store(d.Add(ackFlushGrace).UnixNano())
	}
	c.stoppedAt.Store(time.Now().UnixNano()) // before stopPoll: Retry reads it once pollCtx is done
	c.stopPoll()
	done := make(chan struct{})
	go func() {
		c.pollers.Wait()
		close(c.pollsDone)
		c.tasks.close() // nothing dispatches any more
		c.handlers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	case <-c.w.forced.Done():
	}
	select {
	case <-done:
	default:
		c.log.Warn("shutdown deadline passed, or a later Shutdown's; cancelling running handlers", "in_flight", c.w.counts.InFlight.Load())
		if by := time.Now().Add(ackFlushGrace).UnixNano(); c.releaseBy.Load() == 0 || c.releaseBy.Load() > by {
			c.releaseBy.Store(by) // ctx was cancelled before its deadline, or had none
		}
		c.hardStop(ErrShutdown)
		<-done
	}
	// The heartbeat holds the messages whose deletes are pending until
	// they land: it stops after them.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackFlushGrace)
	defer cancel()
	if ctx.Err() == nil {
		fctx = ctx
	}
	if err := c.acks.Close(fctx); err != nil {
		c.log.Error("pending acknowledgements not sent; their messages will come back after their visibility timeout", "error", err)
	}
	if c.ext != nil {
		c.stopBeats()
		c.beats.Wait()
	}
	if c.stopReport != nil {
		c.stopReport()
		c.reporter.Wait()
	}
}

// The worker's executor.Acker: acknowledgements go through the batcher.

// Delete deletes the message. The heartbeat holds it until the delete has
// landed, so that it is not handed out again meanwhile. The delete is sent
// once even when the worker takes the lease for ended, then retried while
// it holds (see deleting).
//
// The delete of a message whose copy was sent (a waiting copy, a move to the
// dead-letter queue: Job.Copied) goes at once, with the deletes pending,
// rather than wait up to AckInterval for its batch to fill: until it lands
// both are in the queues, and a copy sent late in the lease leaves its
// delete little time to land before the original comes back (on its last
// receive, to be moved to the dead-letter queue by SQS). So does the delete
// of a message whose handler succeeded once its lease looked lost
// (Job.PastLease): SQS may hold it only a little longer.
func (c *consumer) Delete(j *executor.Job) {
	j.Acknowledging()
	c.acks.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: j.Msg.ReceiptHandle, MessageID: j.Msg.ID, Owner: (*deleting)(j)})
	if j.DeleteAtOnce() {
		c.acks.Flush(ackbatch.Delete)
	}
}

// Retry makes the message visible again after vis, rounded up to whole
// seconds and kept within SQS's 12 hours from the receive.
func (c *consumer) Retry(j *executor.Job, vis time.Duration) {
	vis = executor.VisibilityOf(j, vis)
	// While stopping, a message made visible before this worker's last
	// receives have ended could be taken again by one of them (Shutdown
	// does not cut them short): a receive more, a step nearer the
	// dead-letter queue, for a message released at the shutdown deadline or
	// failed with a short backoff.
	end, ok := c.lastPollsEnd()
	if !ok || vis >= time.Until(end) {
		// Hidden until after the last receives anyway.
		c.change(j, vis)
		return
	}
	want := time.Now().Add(vis)
	var hide *hiding
	capped := false // the lease ends first, and SQS's 12 hours leave no longer hide
	if !j.Held(end) {
		// The lease may end first: a change sent after the receives would
		// find its receipt handle expired and be dropped, and the message,
		// visible at the end of its lease, would be taken by one of them.
		// It is hidden until they have surely ended, at once, and given
		// the visibility asked for once they have.
		//
		// A message received nearly 12 hours ago cannot be hidden that
		// long: SQS would refuse it, and VisibilityOf cuts the hide to what
		// the 12 hours leave (less a slack). Such a hide is sent only if it
		// ends after the lease: one ending first would show the message
		// early, to the receives under way.
		hv := executor.VisibilityOf(j, time.Until(end))
		if until := time.Now().Add(hv); hv > 0 && !j.Held(until) {
			hide = &hiding{job: j, until: until, landed: make(chan error, 1)}
			c.changeOwned(j, hv, hide)
		} else {
			capped = true
		}
	}
	// The change waits for the receives; the lease, or the hide, keeps the
	// message invisible meanwhile. Retry is called from handler goroutines,
	// which c.handlers counts, or from a receive loop releasing what it
	// received while stopping, before stop waits for c.handlers (it waits
	// for the loops first): stop waits for the change too.
	c.handlers.Go(func() {
		if hide != nil && <-hide.landed != nil {
			return // not hidden: the message comes back at the end of its lease
		}
		<-c.pollsDone
		if capped && !j.Held(time.Now().Add(c.margin)) {
			// The lease ends (or ended) before a change could land: the
			// message is visible at its end, as soon as SQS's 12 hours
			// allow. Nothing is lost; nothing to send.
			return
		}
		// A failed receive (see mayBeOpen) may still be open at SQS.
		until := want
		if open := time.Unix(0, c.openUntil.Load()); open.After(until) {
			until = open
		}
		vis := executor.VisibilityOf(j, time.Until(until))
		if hide == nil {
			c.change(j, vis)
		} else {
			c.changeOwned(j, vis, (*hidden)(hide))
		}
	})
}

// ReleaseBy implements executor.ReleaseLimiter: while the worker stops, the
// release of a message's lease waits for a heartbeat extension under way no
// later than ackFlushGrace past the shutdown deadline (the handlers cut
// short then wait that long at most), so that an extension SQS does not
// answer, which the heartbeat gives up only after its Interval (2 s at
// least, while the lease has that long), does not hold the stop up past
// the deadline. An extension SQS
// answers lands within the grace, before the message's visibility change,
// which it would otherwise undo. A release that started waiting before the
// stop keeps its wait.
func (c *consumer) ReleaseBy(*executor.Job) time.Time {
	if n := c.releaseBy.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// CopyLimits implements executor.CopyLimiter: while the worker stops, the
// waiting copy of a message released or postponed on its last receive (see
// executor.Executor.Release) is delayed until this worker's last receives
// have surely ended, as Retry hides a released message, so that none of
// them takes it; and its sends, tried again while they fail, end within
// ackFlushGrace of the first that asked, so that an SQS that does not
// answer cannot hold the stop up (the message is then released by its
// visibility, as Retry does). Once the last receives have ended, the
// sends are still bound: the heartbeat goes on extending the message's
// lease while the worker stops, and the retries would go on with it.
func (c *consumer) CopyLimits(*executor.Job) (time.Duration, time.Time) {
	if c.pollCtx.Err() == nil {
		return 0, time.Time{}
	}
	by := time.Now().Add(ackFlushGrace)
	end, ok := c.lastPollsEnd()
	if !ok {
		return 0, by
	}
	return time.Until(end), by
}

// The executor finds the stop's bounds on copies by a type assertion: one
// method short, the worker would silently go without them.
var _ executor.CopyLimiter = (*consumer)(nil)

// CopyStopping implements executor.CopyLimiter: a copy waiting to be sent
// again reads the bounds of CopyLimits as soon as receiving stops.
func (c *consumer) CopyStopping() <-chan struct{} { return c.pollCtx.Done() }

// lastPollsEnd reports whether the worker is stopping with receives still
// under way, and the latest they can end at SQS: a receive started before
// receiving stopped is given up WaitTime and receiveGrace after its start,
// its last attempt (the SDK retries) then still held up to WaitTime at SQS,
// and lastPollSlack for the way a request takes there. They end long
// before, as a rule, and pollsDone says when they have. Once it has, a
// failed receive may still be open at SQS until openUntil (mayBeOpen): until then
// the worker counts as stopping with it under way.
func (c *consumer) lastPollsEnd() (time.Time, bool) {
	if c.pollCtx.Err() == nil {
		return time.Time{}, false
	}
	select {
	case <-c.pollsDone:
		if open := time.Unix(0, c.openUntil.Load()); time.Now().Before(open) {
			return open, true
		}
		return time.Time{}, false
	default:
		return time.Unix(0, c.stoppedAt.Load()).Add(2*c.cfg.WaitTime + receiveGrace + lastPollSlack), true
	}
}

// lastPollSlack is how long a receive request is taken to need to reach
// SQS, and a receive given up on to be noticed there.
const lastPollSlack = 2 * time.Second

// hiding is a job whose message, released while the worker stops, is
// hidden until the last receives have surely ended (see Retry), as the
// ackbatch.Owner of that change: retried while its lease holds.
type hiding struct {
	job    *executor.Job
	until  time.Time  // the end of the hide, once it landed
	landed chan error // the hide's result
}

func (h *hiding) Valid(now time.Time) bool { return h.job.Held(now) }
func (h *hiding) Acked(err error)          { h.landed <- err }

// hidden is a hidden job as the owner of the change that then gives its
// message the visibility asked for: retried while the hide holds.
type hidden hiding

func (h *hidden) Valid(now time.Time) bool { return now.Before(h.until) }
func (h *hidden) Acked(error)              {}

// change queues the visibility change of a job's message, retried while
// its lease holds.
func (c *consumer) change(j *executor.Job, vis time.Duration) {
	c.changeOwned(j, vis, (*executor.LeaseOwner)(j))
}

// changeOwned queues the visibility change of a job's message with owner
// as its ackbatch.Owner.
func (c *consumer) changeOwned(j *executor.Job, vis time.Duration, owner ackbatch.Owner) {
	c.acks.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: j.Msg.ReceiptHandle, MessageID: j.Msg.ID, Visibility: vis,
		Owner: owner})
}

// deleting is a job as the ackbatch.Owner of its delete: sent once even when
// the worker takes the lease for ended (the batcher sends a delete's first
// call without asking Valid), then retried while the lease holds, which
// ends once the delete has landed or failed for good. The worker's view of
// the lease can be short of SQS's: an extension SQS applied but whose reply
// was lost or came after the call's timeout (a loaded SQS) leaves the
// message held at SQS while the heartbeat finds the lease run out. Dropped
// unsent, the delete of a job that was done (its handler succeeded, or its
// copy was sent) left the message to come back, on its last receive, and
// SQS moved it to the dead-letter queue. Sent, it lands while SQS still
// holds the message. Past that, a FIFO queue refuses the receipt handle,
// expired; a standard queue may still take it, even while another consumer
// holds the message again (an old receipt handle can delete a message
// there): the job, done already, is not affected either way.
type deleting executor.Job

func (d *deleting) Valid(now time.Time) bool { return (*executor.Job)(d).Held(now) }
func (d *deleting) Acked(error)              { (*executor.Job)(d).Done() }

// Abandon leaves the message alone.
func (c *consumer) Abandon(*executor.Job) {}

// ackResult counts and logs an acknowledgement's result. A failed delete of
// a message whose handler succeeded once its lease looked lost
// (Job.PastLease) is expected when SQS no longer held the message: it
// counts as failed, but is logged as a warning.
func (c *consumer) ackResult(kind ackbatch.Kind, e ackbatch.Entry, err error) {
	switch {
	case err != nil && pastLease(e):
		c.w.counts.AckFailures.Add(1)
		c.log.Warn("delete of a message whose lease looked lost when its handler succeeded failed (SQS no longer held it with this receipt handle, or did not answer while the lease held); it may be handled again",
			"message_id", e.MessageID, "error", err)
	case err != nil:
		c.w.counts.AckFailures.Add(1)
		c.log.Error("acknowledgement failed; the message will come back after its visibility timeout",
			"op", kind.String(), "message_id", e.MessageID, "error", err)
		if awserr.IsFatal(err) && !awserr.IsInvalidParameter(err) {
			// The call refused for the queue or the role (access
			// denied, the queue deleted): every job would run, fail to
			// be acknowledged, come back and be dead-lettered by SQS,
			// though healthy. Receiving stops, as for a receive refused
			// so: Run returns the error, or, in a MultiWorker, the queue
			// waits until SQS takes its acknowledgements again.
			select {
			case c.fatal <- refusedAck(kind, c.info.URL, err):
			default:
			}
		}
	case kind == ackbatch.Delete:
		c.w.counts.Deleted.Add(1)
	}
}

// pastLease reports whether e is the delete of a message whose handler
// succeeded once its lease looked lost.
func pastLease(e ackbatch.Entry) bool {
	d, ok := e.Owner.(*deleting)
	return ok && d.PastLease
}

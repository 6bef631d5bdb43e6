// Package executor runs a handler on a received message and carries out what
// its result means — delete, retry after a delay, release, move to the
// dead-letter queue — for both runtimes. A runtime owns how it receives and
// how it acknowledges (the worker with its ack batcher, the Lambda adapter
// with its batch response), through the small Acker interface; what a
// handler's result means lives here once, with the counters and metrics that
// follow from it.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// Acker acknowledges messages the way one runtime does.
type Acker interface {
	// Delete acknowledges a message that is done: handled, or copied to
	// the dead-letter queue or to wait (then j.Copied is set). The
	// message's lease is still held, so that
	// the heartbeat keeps it invisible until the delete lands: the acker
	// calls j.Done once it has, or has failed for good. A handler that
	// succeeded after the executor took the lease for lost is done too:
	// then j.PastLease is set, and the delete is sent once all the same,
	// retried only while the lease holds (see Executor.Run). When
	// j.DeleteAtOnce, the acker sends the delete at once, neither
	// batched nor deferred.
	Delete(j *Job)
	// Retry makes the message visible again after vis, in whole seconds
	// within SQS's limits; 0 releases it at once. The lease is done
	// already: the heartbeat no longer extends it.
	Retry(j *Job, vis time.Duration)
	// Abandon leaves the message to SQS: its lease was lost, so another
	// consumer may hold it, and acknowledging it with this receipt handle
	// could undo that consumer's work.
	Abandon(j *Job)
}

// ProbeSetter is an Acker whose other goroutines read Job.Probe while the
// handler runs (the Lambda adapter, which gives a hung probe's turn back
// at the invocation's deadline): Run sets the probe a message waiting in
// flight was given through it, under the acker's own lock.
type ProbeSetter interface {
	SetProbe(j *Job, p breaker.Probe)
}

// Job is one received message on its way through the executor.
type Job struct {
	Msg *sqsworker.Message
	// ReceivedAt is when the message was received: its lease counts from
	// then.
	ReceivedAt time.Time
	// Ctx is the parent of the handler's context: the runtime's handler
	// context, or with a heartbeat the lease's context, cancelled when the
	// lease is lost.
	Ctx context.Context
	// Lease is the message's visibility lease; nil without a heartbeat.
	Lease *visibility.Lease
	// Deadline, when set, ends the handler's context with the executor's
	// TimeoutCause (the lease less the time to acknowledge, without a
	// heartbeat). Config.HandlerTimeout takes precedence.
	Deadline time.Time
	// LeaseEnd, when set and without a Lease, is when SQS may hand the
	// message out again: a handler that returns later no longer holds it.
	LeaseEnd time.Time
	// MoveBy, when set, is the latest a dead-letter move may take (the
	// Lambda invocation's deadline).
	MoveBy time.Time
	// Log, when set, replaces the executor's Log for this message (the
	// Lambda adapter's carries the request ID).
	Log *slog.Logger
	// Probe is the circuit breaker's probe the message runs as, 0 when it
	// runs as none: a probe the breaker has since given up on no longer
	// settles it (see breaker.Probe).
	Probe breaker.Probe
	// Copied is set before Acker.Delete when a copy of the message was
	// sent (to the dead-letter queue, or a waiting copy): until the
	// original is deleted, both are in the queues, and a crash then
	// leaves both. An acker that defers its deletes (the Lambda adapter,
	// to the end of the invocation) deletes such a message at once.
	Copied bool
	// PastLease is set before Acker.Delete when the handler succeeded but
	// the executor took the message's lease for lost (see Executor.Run):
	// the delete goes once all the same, at once, and lands if SQS still
	// holds the message.
	PastLease bool

	// holdChecked is set by Executor.Hold: Run does not hold the message
	// a second time (nor try its fresh copy again).
	holdChecked bool
	// waitsInFlight counts the message's waits in flight (see
	// waitInFlight), up to 255: a byte beside the flags, so that a Job
	// keeps its size.
	waitsInFlight uint8
}

// DeleteAtOnce reports whether the message's delete is to be sent at once,
// rather than batched or deferred (to the end of a Lambda invocation): a
// copy of the message was sent (Copied), and until the original is deleted
// both are in the queues; or its lease looked lost when its handler
// succeeded (PastLease), and SQS may hold the message only a little longer.
func (j *Job) DeleteAtOnce() bool { return j.Copied || j.PastLease }

func (j *Job) log(e *Executor) *slog.Logger {
	if j.Log != nil {
		return j.Log
	}
	return e.Log
}

// Held reports whether the message's lease still holds, so that it may be
// acknowledged. A lease the heartbeat has not yet found lost, but whose
// deadline has passed, does not hold either.
func (j *Job) Held(now time.Time) bool {
	if j.Lease != nil {
		if errors.Is(context.Cause(j.Ctx), visibility.ErrLeaseLost) {
			return false
		}
		return now.Before(j.Lease.Deadline())
	}
	return j.LeaseEnd.IsZero() || now.Before(j.LeaseEnd)
}

// LeaseOwner is a Job as the ackbatch.Owner of its message's visibility
// change: sent, and retried, only while its lease holds. Once the lease is
// lost or run out another consumer may hold the message: the change would
// show it, or hide it, under that consumer.
type LeaseOwner Job

// Valid reports whether the job's lease holds at now.
func (o *LeaseOwner) Valid(now time.Time) bool { return (*Job)(o).Held(now) }

// Acked does nothing: the change's outcome needs no follow-up.
func (o *LeaseOwner) Acked(error) {}

// Acknowledging tells the heartbeat that the message's delete is on its
// way: the lease is still extended until Done, but a rejected extension
// then means the delete landed.
func (j *Job) Acknowledging() {
	if j.Lease != nil {
		j.Lease.Acknowledging()
	}
}

// Done stops extending the message's lease, waiting for an extension under
// way no later than MoveBy, if set (the Lambda invocation's deadline). It is
// safe to call more than once, from any goroutine.
func (j *Job) Done() {
	if j.Lease != nil {
		j.Lease.ReleaseBy(j.MoveBy)
	}
}

// ReleaseLimiter is implemented by an Acker whose runtime bounds how long
// ending a message's lease waits for a heartbeat extension of it under way
// (the worker, while it stops).
type ReleaseLimiter interface {
	// ReleaseBy returns the latest the end of j's lease may wait for an
	// extension under way (at once if it has passed; zero for no bound
	// beyond Job.MoveBy). Such an extension may then land after the
	// message's visibility change: the message comes back when the
	// extension ends rather than at once.
	ReleaseBy(j *Job) time.Time
}

// LeaseKeeper is implemented by an Acker whose runtime ends the leases of
// the messages it settled itself, later (the Lambda adapter: once its
// invocation's records are all settled, before it reports their visibility
// and Lambda deletes the others). Until then such a message is not SQS's
// again, however long the invocation runs on.
type LeaseKeeper interface {
	// KeepsLease reports whether the runtime ends j's lease itself.
	KeepsLease(j *Job) bool
}

// done is j.Done, bounded also by ack's ReleaseBy, if ack has one; unless
// ack keeps the lease (LeaseKeeper): it is then still extended until the
// runtime ends it (with Job.Done, which waits for an extension under way,
// so that the message's visibility change lands after it).
func done(j *Job, ack Acker) {
	if j.Lease == nil {
		return
	}
	if k, ok := ack.(LeaseKeeper); ok && k.KeepsLease(j) {
		return
	}
	by := j.MoveBy
	if l, ok := ack.(ReleaseLimiter); ok {
		if b := l.ReleaseBy(j); !b.IsZero() && (by.IsZero() || b.Before(by)) {
			by = b
		}
	}
	j.Lease.ReleaseBy(by)
}

// retry ends the lease, then asks ack to make the message visible after vis.
func retry(j *Job, ack Acker, vis time.Duration) {
	done(j, ack)
	ack.Retry(j, vis)
}

// abandon ends the lease and leaves the message to SQS.
func abandon(j *Job, ack Acker) {
	done(j, ack)
	ack.Abandon(j)
}

// Executor runs one queue's handler and settles its messages. Its fields are
// set once by a runtime; it is safe for concurrent use.
type Executor struct {
	Handler sqsworker.Handler
	Policy  outcome.Policy
	// Mover copies messages to the dead-letter queue; its URL is empty
	// when there is none.
	Mover *queue.Mover
	// Counters receives the executor's counts; the runtime may share it
	// with its own (received, acknowledged) and report it as its Stats.
	Counters *Counters
	// Metrics receives the same figures. metrics.Nop{} when none.
	Metrics metrics.Recorder
	// Queue and HandlerName are the metrics' dimensions.
	Queue       metrics.Dims
	HandlerName string
	// Log receives failures; it carries the queue.
	Log *slog.Logger
	// HandlerTimeout, when positive, bounds each handler call from its
	// start, with TimeoutCause.
	HandlerTimeout time.Duration
	// TimeoutCause is the cause of a handler context ended by
	// HandlerTimeout or Job.Deadline.
	TimeoutCause error
	// StopCauses are the causes of a handler context the runtime cut
	// short itself (shutdown, the invocation's deadline): such a message
	// is released at once, never counted as a failed attempt, never
	// dead-lettered.
	StopCauses []error
	// MoveTimeout bounds a dead-letter move. Default 30s.
	MoveTimeout time.Duration
	// Breaker receives every handler's outcome; nil when it is disabled.
	Breaker *breaker.Breaker
	// Requeue sends the waiting copies of messages held back for a delay
	// of any length (see delay.go); its zero value sends none.
	Requeue Requeue

	inFlightMu sync.Mutex
}

// DefaultMoveTimeout is the default Executor.MoveTimeout.
const DefaultMoveTimeout = 30 * time.Second

// Run runs the handler on j's message and settles it through ack. It reports
// whether the message is done (handled, or moved to the dead-letter queue),
// so that a FIFO group may go on with its next message.
//
// A handler that returns once the message's lease looks lost (the
// heartbeat found it lost or run out, or without a heartbeat the
// visibility timeout has passed) no longer surely holds the message: a
// failure is left to SQS (Acker.Abandon), as acknowledging it could undo
// the work of a consumer that holds it now. A success means the job is
// done, whatever becomes of the lease: its delete is sent once all the
// same (Job.PastLease), and retried only while the lease holds. The
// worker's view of a lease can be short of SQS's (an extension SQS applied
// but whose reply was lost or came late): the delete then lands, and the
// message is neither handled again nor, on the last receive its redrive
// policy allows, moved to the dead-letter queue by SQS. Past the lease, a
// FIFO queue refuses the receipt handle, expired, and the message, back,
// is handled again, its effect already applied; a standard queue may
// still take the delete (an old receipt handle can delete a message there),
// even while another consumer holds the message again: that consumer runs
// a job that is done already, and loses its lease. Such a message
// counts as succeeded and as a lease lost, and Run reports false: should
// the delete not land, the message comes back, before the rest of its
// FIFO group.
func (e *Executor) Run(j *Job, ack Acker) bool {
	m := j.Msg
	// Unless the runtime held it already, or found nothing to hold.
	if !j.holdChecked {
		if held, gone := e.hold(j, ack); held {
			// Not a probe after all: let the next message be one.
			e.Breaker.Abort(j.Probe)
			return gone
		}
	}
	if j.Lease != nil && errors.Is(context.Cause(j.Ctx), visibility.ErrLeaseLost) {
		// The heartbeat found the lease lost (SQS refused its extension)
		// while the message waited for its turn (behind its group, or for
		// a slot): SQS may have handed it to another consumer, which runs
		// the job. Run here too, by a handler that ignores its cancelled
		// context, it would run twice. It is left to SQS, unrun. (Not a
		// deadline merely past: the Lambda adapter's is an estimate until
		// the heartbeat's first extension, which may still land.)
		e.Breaker.Abort(j.Probe)
		e.Counters.LeasesLost.Add(1)
		e.Metrics.Add(metrics.LeasesLost, 1, e.Queue)
		j.log(e).Warn("lease lost before the handler started; the message is left to SQS, unrun",
			"message_id", m.ID, "attempt", m.ReceiveCount, "cause", context.Cause(j.Ctx))
		abandon(j, ack)
		return false
	}
	if prior := m.PriorAttempts(); prior > 0 {
		m.ReceiveCount = receives(m) + prior
	}
	for {
		end, took, err := e.call(j)
		if !j.Held(end) {
			return e.leaseLost(j, err, ack)
		}
		if err == nil {
			e.succeeded()
			ack.Delete(j)
			return true
		}
		again, probe := e.waitInFlight(j, ack, err)
		if again {
			if ps, ok := ack.(ProbeSetter); ok {
				ps.SetProbe(j, probe)
			} else {
				j.Probe = probe
			}
			continue
		}
		if !j.Held(time.Now()) { // lost while it waited in flight
			return e.leaseLost(j, err, ack)
		}
		return e.settleFailure(j, err, took, ack)
	}
}

// call runs the handler once on j's message, and returns when it returned,
// how long it took and its error.
func (e *Executor) call(j *Job) (end time.Time, took time.Duration, err error) {
	m, c := j.Msg, e.Counters
	ctx, cancel := j.Ctx, context.CancelFunc(nil)
	switch {
	case e.HandlerTimeout > 0:
		ctx, cancel = context.WithTimeoutCause(ctx, e.HandlerTimeout, e.TimeoutCause)
	case !j.Deadline.IsZero():
		ctx, cancel = context.WithDeadlineCause(ctx, j.Deadline, e.TimeoutCause)
	}
	e.inFlight(1)
	start := time.Now()
	if j.Probe != 0 {
		c.BreakerProbes.Add(1)
		e.Metrics.Add(metrics.BreakerProbes, 1, e.Queue)
	}
	err = outcome.Call(ctx, e.Handler, sqsmsg.Unpacked(m))
	end = time.Now()
	if outcome.Cut(ctx, err, e.Breaker.IsDependencyFailure) { // counts as nothing
		e.Breaker.Abort(j.Probe)
	} else {
		e.Breaker.Record(err, j.Probe)
	}
	if cancel != nil {
		cancel()
	}
	e.inFlight(-1)
	e.observe(j, start, end)
	return end, end.Sub(start), err
}

// observe records the handler's duration and the message's latencies. It
// and leaseLost stand apart from Run, whose frame they would otherwise
// enlarge: the handler's goroutine, fresh for each Lambda record, then
// needs a larger stack to acknowledge the message, and growing it costs
// more than the rest of the adapter.
func (e *Executor) observe(j *Job, start, end time.Time) {
	e.Metrics.Observe(metrics.HandlerDuration, end.Sub(start).Seconds(), metrics.Dims{Queue: e.Queue.Queue, Handler: e.HandlerName})
	e.Metrics.Observe(metrics.ReceiveToDoneLatency, end.Sub(j.ReceivedAt).Seconds(), e.Queue)
	if !j.Msg.SentAt.IsZero() {
		e.Metrics.Observe(metrics.EnqueueToDoneLatency, end.Sub(j.Msg.SentAt).Seconds(), e.Queue)
	}
}

// succeeded counts a message whose handler returned nil.
func (e *Executor) succeeded() {
	e.Counters.Succeeded.Add(1)
	e.Metrics.Add(metrics.MessagesSucceeded, 1, metrics.Dims{Queue: e.Queue.Queue, Handler: e.HandlerName})
}

// leaseLost settles a message whose lease was lost while its handler ran
// (or while a failure waited in flight), its handler having returned err:
// it leaves a failed one to SQS, and deletes a succeeded one all the same
// (see Run). It reports false: the message may come back.
func (e *Executor) leaseLost(j *Job, err error, ack Acker) bool {
	e.Counters.LeasesLost.Add(1)
	e.Metrics.Add(metrics.LeasesLost, 1, e.Queue)
	if err == nil {
		e.succeeded()
		j.log(e).Warn("lease looked lost when the handler succeeded; the job is done, so its delete is sent all the same: it lands if SQS still holds the message, else the message may be handled again",
			"message_id", j.Msg.ID, "attempt", j.Msg.ReceiveCount, "cause", context.Cause(j.Ctx))
		j.PastLease = true
		ack.Delete(j)
		return false
	}
	j.log(e).Warn("lease lost while the handler ran; the message is left to SQS and may be handled again",
		"message_id", j.Msg.ID, "attempt", j.Msg.ReceiveCount, "handler_error", err, "cause", context.Cause(j.Ctx))
	abandon(j, ack)
	return false
}

func (e *Executor) stopped(cause error) bool {
	for _, s := range e.StopCauses {
		if errors.Is(cause, s) {
			return true
		}
	}
	return false
}

// inFlight counts a handler starting (+1) or ending (-1) and sets the gauge,
// both under one lock, so that two handlers changing it at once cannot leave
// the gauge with a stale value.
func (e *Executor) inFlight(d int64) {
	if _, nop := e.Metrics.(metrics.Nop); nop {
		e.Counters.InFlight.Add(d)
		return
	}
	e.inFlightMu.Lock()
	e.Metrics.Set(metrics.InFlight, float64(e.Counters.InFlight.Add(d)), e.Queue)
	e.inFlightMu.Unlock()
}

// Release makes a message that was not handled visible again at once,
// without counting an attempt, unless its lease was lost. On the last
// receive its redrive policy allows, a fresh copy takes its place (see
// waitInCopy). A message whose time has not come (see Hold), unless the
// runtime checked already, is held back instead: released, it would be
// visible at once, or its copy would run now.
func (e *Executor) Release(j *Job, ack Acker) { e.releaseUnrun(j, ack, false) }

// ReleaseBehind is Release for a FIFO message behind one of its group that
// is not done (failed, or released itself): a message whose time has not
// come is held back only when the hold would send a copy (its receives
// running out, see fifoVisibilityRoom), not by visibility. Held back in
// flight, it would lock its group, and the message before it would wait
// until the later one's time; released, it is held when its turn comes.
func (e *Executor) ReleaseBehind(j *Job, ack Acker) { e.releaseUnrun(j, ack, true) }

func (e *Executor) releaseUnrun(j *Job, ack Acker, behind bool) {
	if !j.holdChecked && (!behind || !e.Requeue.FIFO || !e.fifoVisibilityRoom(j.Msg)) {
		if held, _ := e.Hold(j, ack); held {
			return
		}
	}
	if !j.Held(time.Now()) {
		abandon(j, ack)
		return
	}
	e.Counters.Released.Add(1)
	m := j.Msg
	e.release(j, ack, receives(m)-1+m.PriorAttempts())
}

// Postpone puts off a message that was not run, without counting an
// attempt: it comes back after delay, by its visibility, or in a fresh copy
// when it is on the last receive its redrive policy allows (see postpone).
// cause says why, for the log.
func (e *Executor) Postpone(j *Job, ack Acker, delay time.Duration, cause error) {
	if !j.Held(time.Now()) {
		abandon(j, ack)
		return
	}
	e.Counters.Postponed.Add(1)
	e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
	j.log(e).Debug("message postponed", "message_id", j.Msg.ID, "retry_in", delay, "cause", cause)
	m := j.Msg
	e.postpone(j, ack, delay, receives(m)-1+m.PriorAttempts())
}

// settleFailure carries out the decision for a failed handler. It reports
// whether the message was moved to the dead-letter queue.
func (e *Executor) settleFailure(j *Job, err error, took time.Duration, ack Acker) bool {
	m, c := j.Msg, e.Counters
	dec := e.Policy.DecideAttempt(err, m.ReceiveCount, receives(m))
	if dec.Action == outcome.Postpone {
		c.Postponed.Add(1)
		e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
		j.log(e).Debug("message postponed", "message_id", m.ID, "attempt", m.ReceiveCount, "retry_in", dec.Delay)
		e.postpone(j, ack, dec.Delay, m.ReceiveCount-1)
		return false
	}
	if cause := context.Cause(j.Ctx); cause != nil && e.stopped(cause) {
		j.log(e).Warn("handler cut short by the runtime; releasing the message", "message_id", m.ID,
			"attempt", m.ReceiveCount, "cause", cause, "error", err)
		c.Released.Add(1)
		e.release(j, ack, m.ReceiveCount-1)
		return false
	}
	c.Failed.Add(1)
	class := sqsworker.ErrorClass(err)
	e.Metrics.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: e.Queue.Queue, Handler: e.HandlerName, ErrorClass: class})
	log := j.log(e).With("message_id", m.ID, "attempt", m.ReceiveCount, "error_class", class, "duration", took)
	var p *sqsworker.PanicError
	if errors.As(err, &p) {
		c.Panics.Add(1)
		log.Error("handler panicked", "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
	switch {
	case e.Breaker.IsDependencyFailure(err):
		// A dependency is down, not the message: never dead-letter it,
		// and while the breaker is open keep it away until the next probe.
		// On the last receive its redrive policy allows, SQS would move
		// it on the next: it waits in a fresh copy instead, this attempt
		// not counted (see waitInCopy).
		delay := max(dec.Delay, e.Breaker.Pause())
		c.Retried.Add(1)
		e.Metrics.Add(metrics.MessagesRetried, 1, e.Queue)
		log.Warn("dependency unavailable; retrying", "error", err, "retry_in", delay)
		if !e.waitInCopy(j, ack, delay, m.ReceiveCount-1, "failed for a dependency down") {
			retry(j, ack, delay)
		}
		return false
	case dec.Action == outcome.DeadLetter:
		if e.deadLetter(j, err, class, log) {
			j.Copied = true
			ack.Delete(j)
			return true
		}
	case dec.Permanent:
		log.Error("permanent failure but the queue has no dead-letter queue; retrying with backoff", "error", err)
	}
	c.Retried.Add(1)
	e.Metrics.Add(metrics.MessagesRetried, 1, e.Queue)
	log.Warn("handler failed; retrying", "error", err, "retry_in", dec.Delay)
	e.later(j, ack, dec.Delay, m.ReceiveCount)
	return false
}

// deadLetter copies the message to the dead-letter queue; the caller deletes
// it when that worked.
func (e *Executor) deadLetter(j *Job, cause error, class string, log *slog.Logger) bool {
	timeout := e.MoveTimeout
	if timeout <= 0 {
		timeout = DefaultMoveTimeout
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.Ctx), timeout)
	defer cancel()
	if !j.MoveBy.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, j.MoveBy)
		defer cancelBy()
	}
	withMeta, err := e.Mover.Move(ctx, withoutDelayAttributes(j.Msg), cause)
	if err != nil {
		e.Counters.MoveFailures.Add(1)
		log.Error("moving message to dead-letter queue failed", "error", err)
		return false
	}
	if !withMeta {
		log.Warn("failure metadata did not fit the message's attributes or size; dead-lettered without it", "error", cause)
	}
	e.Counters.DeadLettered.Add(1)
	e.Metrics.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: e.Queue.Queue, ErrorClass: class})
	log.Error("message dead-lettered", "error", cause, "dead_letter_queue", e.Mover.URL)
	return true
}

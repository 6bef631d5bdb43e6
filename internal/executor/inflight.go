package executor

import (
	"context"
	"errors"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/metrics"
)

// A FIFO queue's message that waits without an attempt (its handler found a
// dependency down, or postponed it: RetryAfter with a nil error) on the
// last receive its redrive policy allows cannot wait in a fresh copy, as a
// standard queue's does (see waitInCopy): the copy would go behind the rest
// of its group. Made visible again, its next receive would be SQS's move to
// the dead-letter queue, though no attempt failed. So it waits in flight
// instead: the runtime keeps holding it (its group is locked meanwhile,
// as it would be by its visibility), for the delay, then until the circuit
// breaker lets it run, and runs its handler again, on this receive. The
// wait ends early, and the message is settled as before, when the runtime
// can no longer hold it that long: without a heartbeat, a delay past its
// visibility timeout; with one, its lease lost or at its MaxLifetime; the
// Lambda invocation's deadline; the worker's stop, after which it runs once
// more at once.

// inFlightReserve is kept back from the end of the message's lease for the
// visibility change that settles it should the wait end there.
const inFlightReserve = 2 * time.Second

// waitInFlight keeps j's message in flight after its handler returned err,
// when it is a FIFO queue's message on its last receive and err asks for a
// wait without an attempt (see above). It reports whether to run the
// handler again, and the circuit breaker's probe it runs as, if any.
func (e *Executor) waitInFlight(j *Job, ack Acker, err error) (again bool, probe breaker.Probe) {
	if !e.Requeue.FIFO || !e.OnLastReceive(j) {
		return false, 0
	}
	m := j.Msg
	var ra *sqsworker.RetryAfterError
	postponed := errors.As(err, &ra) && ra.Err == nil
	dependency := !postponed && e.Breaker.IsDependencyFailure(err)
	if !postponed && !dependency {
		return false, 0
	}
	var stopping <-chan struct{}
	if l, ok := ack.(CopyLimiter); ok {
		stopping = l.CopyStopping()
	}
	if closed(stopping) || j.Ctx.Err() != nil {
		return false, 0
	}
	// The delay the handler asked for, or its backoff, at least the
	// backoff of the waits in flight so far (copyBackoff), so that a
	// backoff of 0 does not run the handler again and again at once.
	if j.waitsInFlight < 255 {
		j.waitsInFlight++
	}
	remaining := copyBackoff(int(j.waitsInFlight))
	switch {
	case postponed:
		remaining = max(remaining, ra.Delay)
	case e.Policy.Backoff != nil:
		remaining = max(remaining, e.Policy.Backoff.Delay(m.ReceiveCount, err), e.Breaker.Pause())
	default:
		remaining = max(remaining, e.Breaker.Pause())
	}
	if j.Lease == nil && time.Until(j.heldUntil())-inFlightReserve < remaining {
		return false, 0 // its visibility timeout ends first
	}
	j.log(e).Warn("FIFO message on the last receive its redrive policy allows, waiting without an attempt: kept in flight and run again, "+
		"as a new receive would move it to the dead-letter queue", "message_id", m.ID, "retry_in", remaining, "error", err)
	if again, probe = e.holdInFlight(j, remaining, stopping); !again {
		return false, 0 // settled as before, counted there
	}
	c := e.Counters
	if postponed {
		c.Postponed.Add(1)
		e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
	} else {
		c.Failed.Add(1)
		c.Retried.Add(1)
		e.Metrics.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: e.Queue.Queue, Handler: e.HandlerName, ErrorClass: sqsworker.ErrorClass(err)})
		e.Metrics.Add(metrics.MessagesRetried, 1, e.Queue)
	}
	return true, probe
}

// holdInFlight waits remaining, then until the circuit breaker lets j's
// message run, while the runtime holds it (see waitInFlight), and reports
// whether to run it again, and the probe it runs as, if any.
func (e *Executor) holdInFlight(j *Job, remaining time.Duration, stopping <-chan struct{}) (again bool, probe breaker.Probe) {
	for {
		for remaining > 0 {
			left, ok := heldLeft(j, inFlightReserve, stopping)
			if !ok { // once more at the stop, else settled as before
				return closed(stopping) && j.Held(time.Now()), 0
			}
			step := min(remaining, left)
			start := time.Now()
			switch copyWait(step, j.Ctx.Done(), stopping) {
			case nil: // the step's time
			case stopping:
				return true, 0 // once more, at once: it is released after
			default:
				return false, 0 // the lease was lost, or the runtime's deadline
			}
			remaining -= time.Since(start)
		}
		if e.Breaker.State() == breaker.Closed {
			return true, 0
		}
		// Open: wait for a probe, taking it before the receives do,
		// within the lease as it stands (the heartbeat moves it on, and
		// heldLeft waits for that on the next round).
		left, ok := heldLeft(j, inFlightReserve, stopping)
		if !ok {
			return closed(stopping) && j.Held(time.Now()), 0
		}
		j.log(e).Debug("FIFO message waiting in flight for the circuit breaker's probe", "message_id", j.Msg.ID, "for_at_most", left)
		probe, err := e.waitProbe(j, time.Now().Add(left), stopping)
		switch {
		case err == nil:
			return true, probe
		case closed(stopping):
			return true, 0
		case j.Ctx.Err() != nil:
			return false, 0
		}
	}
}

// leaseStep is how often heldLeft looks whether the heartbeat moved a lease
// on.
const leaseStep = 50 * time.Millisecond

// heldLeft returns how much longer than reserve the runtime holds j's
// message now (heldUntil). When no more is left and a heartbeat holds the
// message, it waits for the heartbeat to move the lease on: the heartbeat
// extends a lease only when little of it is left (by default half of the
// visibility timeout, under the reserves of a wait in flight or a waiting
// copy's retries for a timeout of a few seconds), and the lease's context
// ends should it run out or reach its MaxLifetime. This is the one rule by
// which a runtime holds a message that waits without a handler running: a
// FIFO message waiting in flight (holdInFlight, with inFlightReserve), and
// the retried sends of a waiting copy (sendCopy). It reports false when the wait must end: the
// message no longer held, the lease not moved on before its end, j.Ctx
// ended (the lease lost, the runtime's deadline), the Lambda invocation's
// deadline before the lease's end, or stopping closed.
func heldLeft(j *Job, reserve time.Duration, stopping <-chan struct{}) (time.Duration, bool) {
	for {
		if !j.Held(time.Now()) || closed(stopping) {
			return 0, false
		}
		if left := time.Until(j.heldUntil()) - reserve; left > 0 {
			return left, true
		}
		// Only the lease's own end waits for its heartbeat, not an
		// invocation's deadline before it.
		if j.Lease == nil || (!j.MoveBy.IsZero() && !j.MoveBy.After(j.Lease.Deadline())) {
			return 0, false
		}
		if copyWait(leaseStep, j.Ctx.Done(), stopping) != nil {
			return 0, false // the lease was lost or ended, or the stop
		}
	}
}

// waitProbe waits, until end, for the circuit breaker to let j's message
// run (see breaker.Breaker.WaitHeld), or for j.Ctx to end, or stopping to
// be closed.
func (e *Executor) waitProbe(j *Job, end time.Time, stopping <-chan struct{}) (probe breaker.Probe, err error) {
	ctx, cancel := context.WithDeadline(j.Ctx, end)
	defer cancel()
	return e.Breaker.WaitHeld(ctx, stopping)
}

// heldUntil is the latest the runtime holds j's message: the end of its
// lease (moved on by the heartbeat, if any), and the Lambda invocation's
// deadline (MoveBy); zero when unknown.
func (j *Job) heldUntil() time.Time {
	end := j.LeaseEnd
	if j.Lease != nil {
		end = j.Lease.Deadline()
	}
	if !j.MoveBy.IsZero() && (end.IsZero() || j.MoveBy.Before(end)) {
		end = j.MoveBy
	}
	return end
}

// closed reports whether c is closed; nil is never closed.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

package executor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sqsworker/sqsworker/internal/awserr"
)

// The waiting copy of a message on the last receive its redrive policy
// allows (released or postponed without an attempt, or held back until its
// time) is what keeps the job out of the dead-letter queue: should its send
// fail, the message's next receive is SQS's move there, though no handler
// failed. Such a send is tried again, on the goroutine that settles the
// message (the worker's handler slot stays taken meanwhile), while the
// runtime still holds the message:
//
//   - its lease: until its visibility timeout ends, less copyAckReserve for
//     the original's delete, which both runtimes send at once, not batched
//     (Job.Copied); with the heartbeat on, as long as it moves the lease
//     on: the waits between sends are not cut at the lease as it stands,
//     and a send that it leaves no time for waits for the heartbeat's
//     next extension (see heldLeft), which comes only when little of the
//     lease is left, rather than give the message up before it (with a
//     visibility timeout of a few seconds, at once); the retries end once
//     the lease is lost or at its MaxLifetime (12 hours by default, the
//     handler slot taken all along; the failure is logged once, when the
//     retries begin);
//   - the runtime's stop bound (CopyLimiter, the worker while it stops),
//     taken when the runtime first gives one and kept;
//   - Job.MoveBy (the Lambda invocation's deadline less part of its safety
//     margin);
//   - without any of these, Executor.MoveTimeout from the first send.
//
// The retries wait copyBackoffFirst, doubling up to copyBackoffCap, of
// which up to half is left out at random, so that the copies of messages
// that failed together are not sent again together. Errors that no retry
// mends (access denied, a queue that does not exist, a copy over SQS's
// limits) end the retries at once.
//
// Every send of a copy carries the job's key (see requeueBy): a send that
// SQS carried out but whose reply was lost, then sent again, leaves two
// copies that the idempotency middleware runs once.
const (
	copyBackoffFirst = 200 * time.Millisecond
	copyBackoffCap   = 5 * time.Second
	copyAckReserve   = time.Second
	// copySendRoom is the least time before its bound for which a
	// failed send of a waiting copy is tried again.
	copySendRoom = 2 * copyBackoffFirst
)

// What ends the retries of a waiting copy's sends (see copyEnd).
const (
	boundLease = "the message's lease ends (its visibility timeout, not extended further), less the time to delete it"
)

// errCopyTooLarge marks a copy that SQS's limits cannot take: sending it
// again does not help.
var errCopyTooLarge = errors.New("the waiting copy is over SQS's limits")

// copyGivenUp is the error of a waiting copy whose sends were given up.
type copyGivenUp struct {
	err   error
	sends int
	took  time.Duration
	// bound says what ended the retries; empty when the error itself did.
	bound string
}

func (g *copyGivenUp) Error() string {
	if g.bound == "" {
		return fmt.Sprintf("%v (not sent again: no retry mends it)", g.err)
	}
	return fmt.Sprintf("%v (%d sends in %s, until %s)", g.err, g.sends, g.took.Round(time.Millisecond), g.bound)
}

func (g *copyGivenUp) Unwrap() error { return g.err }

// sendCopy sends a waiting copy of j's message with send, which is given
// the context of the send (see sendContext), the least delay the runtime's
// CopyLimits asks (0 without) and the latest its send may end (zero for no
// bound but the executor's own). The first send is bound by the runtime's
// stop bound alone, as every copy's; when
// persist is set (the message is on its last receive), a send that fails
// is tried again while the runtime holds the message (see above). It
// returns the last send's error, as a *copyGivenUp when persist is set.
func (e *Executor) sendCopy(j *Job, ack Acker, persist bool, send func(ctx context.Context, least time.Duration, by time.Time) error) error {
	start := time.Now()
	var stopBy time.Time // the runtime's stop bound, once it gave one
	stopSeen := false    // a wait was woken by the runtime's stop
	l, limited := ack.(CopyLimiter)
	for n := 1; ; n++ {
		var least time.Duration
		if limited {
			var by time.Time
			least, by = l.CopyLimits(j)
			if stopBy.IsZero() {
				stopBy = by
			}
		}
		by := stopBy
		if n > 1 {
			by, _ = e.copyEnd(j, stopBy, start)
		}
		ctx, done := sendContext(j, l)
		err := send(ctx, least, by)
		if b := done(); stopBy.IsZero() {
			stopBy = b
		}
		if err == nil {
			if n > 1 {
				j.log(e).Info("waiting copy sent after failed sends", "message_id", j.Msg.ID, "sends", n, "took", time.Since(start).Round(time.Millisecond))
			}
			return nil
		}
		if !persist {
			return err
		}
		if awserr.IsFatal(err) || errors.Is(err, errCopyTooLarge) {
			return &copyGivenUp{err: err, sends: n, took: time.Since(start)}
		}
		end, bound := e.copyEnd(j, stopBy, start)
		if n == 1 {
			e.copyRetrying(j, end, bound, err)
		}
		// A lease the heartbeat moves on does not bound the retries
		// (see above), unless the runtime's stop bound comes before
		// its end. One whose context ended (lost, at its MaxLifetime,
		// the runtime's deadline) is moved on no more.
		moves := bound == boundLease && j.Ctx.Err() == nil && (stopBy.IsZero() || stopBy.After(j.Lease.Deadline()))
		d := copyBackoff(n)
		if moves {
			if fixed := earliest(stopBy, j.MoveBy); !fixed.IsZero() {
				d = min(d, time.Until(fixed)/2)
			}
		} else {
			// A wait that would pass the bound is cut to half the
			// time left, for a last send in the other half.
			left := time.Until(end)
			if left < copySendRoom {
				return &copyGivenUp{err: err, sends: n, took: time.Since(start), bound: bound}
			}
			d = min(d, left/2)
		}
		// Woken early when the job's context ends (the runtime's
		// shutdown deadline, the invocation's deadline nears, the lease
		// is lost) or the runtime begins to stop, so that the bounds are
		// read again; each once, then by the backoff alone.
		var ended, stopping <-chan struct{}
		if j.Ctx.Err() == nil {
			ended = j.Ctx.Done()
		}
		if limited && stopBy.IsZero() && !stopSeen {
			stopping = l.CopyStopping()
		}
		if w := copyWait(d, ended, stopping); w != nil && w == stopping {
			stopSeen = true
			continue
		}
		if !moves {
			continue
		}
		// Room in the lease for a send and the original's delete,
		// waiting for the heartbeat's next extension if need be.
		if _, held := heldLeft(j, copyAckReserve+copySendRoom, stopping); !held {
			if closed(stopping) {
				stopSeen = true // once more, within the stop's bound
				continue
			}
			_, bound = e.copyEnd(j, stopBy, start)
			return &copyGivenUp{err: err, sends: n, took: time.Since(start), bound: bound}
		}
	}
}

// earliest returns the earlier of a and b that is set, zero if neither is.
func earliest(a, b time.Time) time.Time {
	if a.IsZero() || (!b.IsZero() && b.Before(a)) {
		return b
	}
	return a
}

// copyRetrying logs, once, that the sends of j's waiting copy are tried
// again after err, until end, set by bound (see copyEnd). A bound that is
// the lease held by the heartbeat moves on with it (see sendCopy): its end
// as it stands is not when the retries end.
func (e *Executor) copyRetrying(j *Job, end time.Time, bound string, err error) {
	var until any = end
	if bound == boundLease {
		until = "the heartbeat stops holding the message: its lease lost, or at the heartbeat's MaxLifetime"
	}
	j.log(e).Warn("sending the waiting copy of a message on its last receive failed; sending it again, with backoff, while the message is held "+
		"(its handler slot stays taken meanwhile): should SQS take no send by then, it moves the message to the dead-letter queue on its next receive",
		"message_id", j.Msg.ID, "until", until, "error", err)
}

// copyWait waits d, or until ended or stopping is closed, and returns the
// channel that ended the wait (nil for d).
func copyWait(d time.Duration, ended, stopping <-chan struct{}) <-chan struct{} {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ended:
		return ended
	case <-stopping:
		return stopping
	}
}

// sendContext returns the context of one send of j's copy, and the
// function that ends it once the send has returned. The send outlives
// j.Ctx; but should j.Ctx end while it is under way (the worker's shutdown
// deadline) and the runtime then give a stop bound (CopyLimits), the send
// is cut there, so that a send that hangs, started before the runtime
// began to stop, does not hold the stop up for the whole MoveTimeout.
// done returns that stop bound, if the runtime gave one. l is the
// runtime's CopyLimiter, nil without one.
func sendContext(j *Job, l CopyLimiter) (ctx context.Context, done func() (stopBy time.Time)) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(j.Ctx))
	if l == nil {
		return ctx, func() time.Time { cancel(); return time.Time{} }
	}
	var (
		watch sync.WaitGroup
		by    time.Time // set by the watch, read once it is over
	)
	watch.Add(1)
	unwatch := context.AfterFunc(j.Ctx, func() {
		defer watch.Done()
		if _, by = l.CopyLimits(j); by.IsZero() {
			return
		}
		t := time.NewTimer(time.Until(by))
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-ctx.Done():
		}
	})
	return ctx, func() time.Time {
		cancel()
		if unwatch() {
			watch.Done() // it never started
		}
		watch.Wait()
		return by
	}
}

// copyEnd returns the latest a retried send of j's copy may end, and what
// sets it (see sendCopy): the earliest of the end of its lease less the
// copyAckReserve, the runtime's stop bound stopBy, and j.MoveBy; without
// any, the executor's MoveTimeout from start. A lease lost ends it now.
func (e *Executor) copyEnd(j *Job, stopBy, start time.Time) (time.Time, string) {
	var end time.Time
	var bound string
	take := func(t time.Time, what string) { // t, when it comes first
		if !t.IsZero() && (end.IsZero() || t.Before(end)) {
			end, bound = t, what
		}
	}
	switch {
	case j.Lease != nil && !j.Held(time.Now()):
		take(time.Now(), "the message's lease was lost")
	case j.Lease != nil:
		take(j.Lease.Deadline().Add(-copyAckReserve), boundLease)
	case !j.LeaseEnd.IsZero():
		take(j.LeaseEnd.Add(-copyAckReserve), "the message's lease ends (its visibility timeout), less the time to delete it")
	}
	take(stopBy, "the runtime's stop bound")
	take(j.MoveBy, "the invocation's deadline")
	if end.IsZero() {
		timeout := e.MoveTimeout
		if timeout <= 0 {
			timeout = DefaultMoveTimeout
		}
		end, bound = start.Add(timeout), "the move timeout"
	}
	return end, bound
}

// copyBackoff is the wait after the nth failed send of a waiting copy:
// copyBackoffFirst doubling up to copyBackoffCap, less up to half of it.
func copyBackoff(n int) time.Duration {
	d := copyBackoffCap
	if n <= 5 { // 200ms << 5 is past the cap
		d = min(copyBackoffFirst<<(n-1), copyBackoffCap)
	}
	return d - rand.N(d/2+1)
}

// OnLastReceive reports whether j's message is on the last receive its
// redrive policy allows: its next receive is SQS's move to the dead-letter
// queue. When the queue's attributes could not be read
// (Policy.RedriveUnknown), any receive may be, and each is taken for the
// last.
func (e *Executor) OnLastReceive(j *Job) bool {
	if e.Policy.RedriveUnknown {
		return true
	}
	mrc := e.Policy.RedriveMaxReceiveCount
	return mrc > 0 && receives(j.Msg) >= mrc
}

// lastReceive names the receive OnLastReceive took for the last, for logs.
func (e *Executor) lastReceive() string {
	if e.Policy.RedriveUnknown {
		return "what may be its last receive (the queue's redrive policy could not be read)"
	}
	return "its last receive"
}

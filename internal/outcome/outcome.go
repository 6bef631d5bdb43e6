// Package outcome decides what a runtime does with a message after its
// handler returned, so that the worker and the Lambda adapter agree.
package outcome

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/sqsworker/sqsworker"
)

// Action is what happens to a message.
type Action int

// The actions.
const (
	// Delete: the handler succeeded.
	Delete Action = iota
	// Retry: a failure; make the message visible again after Delay.
	Retry
	// Postpone: not a failure (RetryAfter with a nil error); make the
	// message visible again after Delay.
	Postpone
	// DeadLetter: copy the message to the dead-letter queue, then delete
	// it. Should the copy fail, make it visible again after Delay.
	DeadLetter
)

// Policy holds what decisions depend on besides the error.
type Policy struct {
	Backoff sqsworker.Backoff
	// MaxReceiveCount is the attempt after whose failure a message goes
	// to the dead-letter queue; 0 for no limit.
	MaxReceiveCount int
	// HasDLQ is true when there is a dead-letter queue to move messages to.
	HasDLQ bool
	// RedriveMaxReceiveCount is the queue's redrive policy's
	// maxReceiveCount; 0 when the queue has no redrive policy. Only when a
	// failed attempt reaches it does SQS itself move the message on its
	// next receive.
	RedriveMaxReceiveCount int
	// RedriveUnknown is true when the queue's attributes could not be
	// read, so RedriveMaxReceiveCount is unknown rather than "none": a
	// message held back for later then waits in fresh copies, never in
	// visibility steps that spend receives a redrive policy may count (on
	// a FIFO queue, only in those a maxReceiveCount of 2 allows), and
	// every receive is taken for the last the policy allows (a message
	// postponed or released without an attempt waits in a fresh copy).
	RedriveUnknown bool
}

// Decision is what to do with one message.
type Decision struct {
	Action Action
	Delay  time.Duration
	// Permanent is true for a Permanent error; with no dead-letter queue
	// such a message is retried, and the runtime should say so loudly.
	Permanent bool
	// LastAttempt is true when the redrive policy allows no more attempts.
	LastAttempt bool
}

// Decide returns the decision for a handler's error on the given attempt,
// the message's receive count.
func (p Policy) Decide(err error, receiveCount int) Decision {
	return p.DecideAttempt(err, receiveCount, receiveCount)
}

// DecideAttempt returns the decision for a handler's error on the given
// attempt, counted across the copies of a job that waited for a long delay
// (earlier copies' attempts plus receiveCount), and receiveCount, the
// message's own receive count, which is what SQS's redrive policy counts.
func (p Policy) DecideAttempt(err error, attempt, receiveCount int) Decision {
	if err == nil {
		return Decision{Action: Delete}
	}
	var ra *sqsworker.RetryAfterError
	isRetryAfter := errors.As(err, &ra)
	if isRetryAfter && ra.Err == nil {
		return Decision{Action: Postpone, Delay: ra.Delay}
	}
	var perm *sqsworker.PermanentError
	d := Decision{
		Action:      Retry,
		Permanent:   errors.As(err, &perm),
		LastAttempt: p.MaxReceiveCount > 0 && attempt >= p.MaxReceiveCount,
	}
	switch {
	case isRetryAfter:
		d.Delay = ra.Delay
	default:
		d.Delay = p.Backoff.Delay(attempt, err)
	}
	if (d.Permanent || d.LastAttempt) && p.HasDLQ {
		d.Action = DeadLetter
		if p.RedriveMaxReceiveCount > 0 && receiveCount >= p.RedriveMaxReceiveCount {
			// Should the copy fail, the next receive exceeds the redrive
			// policy's maxReceiveCount and SQS moves the message itself.
			// With a lower MaxReceiveCount, or no redrive policy, the
			// next receive is again a last attempt: back off instead.
			d.Delay = 0
		}
	}
	return d
}

// Cut reports whether a handler's outcome says nothing of its dependency
// because its context cut it short (the runtime stopping, the lease lost,
// the handler timeout, the invocation's deadline): it returned an error,
// ctx had ended, and counts, the breaker's own test of a failure, does not
// count that error. The queue's breaker counts such an outcome as nothing,
// as it does a postponement, and a probe so cut gives its turn back;
// keybreaker does too, but for a handler timeout, which it counts against
// the job's key. A job that succeeds although its context ended still
// counts as a success: it did reach the dependency.
func Cut(ctx context.Context, err error, counts func(error) bool) bool {
	return err != nil && ctx.Err() != nil && !counts(err)
}

// Call runs the handler, recovering a panic into a *sqsworker.PanicError.
func Call(ctx context.Context, h sqsworker.Handler, m *sqsworker.Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &sqsworker.PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return h.HandleMessage(ctx, m)
}

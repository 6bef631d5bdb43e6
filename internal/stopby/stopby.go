// Package stopby carries, in a handler's context, the time by which the
// work done for a job after its handler returns must end because the
// process stops then: a Lambda invocation's handlers' deadline, shortly
// before Lambda stops the function. A worker's handler contexts carry none:
// their deadlines (Config.HandlerTimeout, or the lease less the
// acknowledgement's margin) bound the handler, not the process, which goes
// on.
//
// It also marks the causes with which a runtime cuts a handler short
// because it stops (Cause, ErrStopping): the runtime then releases the
// message rather than counting the handler's failure against it, and
// middleware that records a job's last failure (the batch package's) can
// tell.
package stopby

import (
	"context"
	"errors"
	"time"
)

// ErrStopping is matched, with errors.Is, by the causes made with Cause.
var ErrStopping = errors.New("stopby: the runtime is stopping")

// Cause returns an error whose text is msg and that matches ErrStopping: the
// cause of a handler context cancelled because its runtime stops.
func Cause(msg string) error { return &cause{msg: msg} }

type cause struct{ msg string }

func (c *cause) Error() string { return c.msg }

// Is reports whether target is ErrStopping.
func (c *cause) Is(target error) bool { return target == ErrStopping }

type key struct{}

// limits are the times a context carries: see With.
type limits struct{ soft, hard time.Time }

// With returns ctx carrying soft, the time by which the work after its
// handler should end, and hard, the latest it may end (the time the runtime
// stops waiting for the job's outcome), or zero for none.
func With(ctx context.Context, soft, hard time.Time) context.Context {
	return context.WithValue(ctx, key{}, limits{soft, hard})
}

// From returns the soft time ctx carries, if any.
func From(ctx context.Context) (time.Time, bool) {
	l, ok := ctx.Value(key{}).(limits)
	return l.soft, ok
}

// Late is the least time End gives the work after a handler that returned
// shortly before the soft time its context carries, or after it: an answer
// from a healthy dependency, and not much of what is left of a Lambda
// invocation after its handlers' deadline (half its safety margin, at
// least 100ms).
const Late = 250 * time.Millisecond

// End returns when the work after a handler that ran with ctx must end, as
// of now: the soft time ctx carries, or Late after now if that is later,
// but never past its hard time, after which the runtime no longer waits for
// the job's outcome (it would report a job whose work landed as not done).
// ok is false when ctx carries none: the process does not stop then.
func End(ctx context.Context, now time.Time) (end time.Time, ok bool) {
	l, ok := ctx.Value(key{}).(limits)
	if !ok {
		return time.Time{}, false
	}
	end = l.soft
	if late := now.Add(Late); late.After(end) {
		end = late
	}
	if !l.hard.IsZero() && end.After(l.hard) {
		end = l.hard
	}
	return end, true
}

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

// With returns ctx carrying t.
func With(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, key{}, t)
}

// From returns the time ctx carries, if any.
func From(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(key{}).(time.Time)
	return t, ok
}

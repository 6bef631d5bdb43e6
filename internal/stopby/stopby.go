// Package stopby carries, in a handler's context, the time by which the
// work done for a job after its handler returns must end because the
// process stops then: a Lambda invocation's handlers' deadline, shortly
// before Lambda stops the function. A worker's handler contexts carry none:
// their deadlines (Config.HandlerTimeout, or the lease less the
// acknowledgement's margin) bound the handler, not the process, which goes
// on.
package stopby

import (
	"context"
	"time"
)

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

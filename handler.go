package sqsworker

import "context"

// Handler processes one message. Its return value decides what happens to the
// message: see the package documentation.
//
// The context is cancelled when the runtime's handler timeout passes, when the
// runtime is forced to stop, or when the message's visibility lease is lost.
// Handlers must be safe for concurrent use.
type Handler interface {
	HandleMessage(ctx context.Context, m *Message) error
}

// HandlerFunc adapts an ordinary function to a [Handler].
type HandlerFunc func(ctx context.Context, m *Message) error

// HandleMessage calls f(ctx, m).
func (f HandlerFunc) HandleMessage(ctx context.Context, m *Message) error { return f(ctx, m) }

// Middleware wraps a Handler with behaviour of its own: logging, metrics,
// idempotency, tracing.
type Middleware func(Handler) Handler

// Chain wraps h in the given middlewares. The first middleware is the
// outermost: Chain(h, a, b) handles a message as a(b(h)).
func Chain(h Handler, mws ...Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

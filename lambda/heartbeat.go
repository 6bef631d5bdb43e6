package lambda

import (
	"context"
	"sync"

	"github.com/sqsworker/sqsworker/visibility"
)

// heartbeat runs the round loop of a queue's visibility extender while at
// least one invocation uses it: the first to join starts the loop, the last
// to leave stops it and waits for it to end. Concurrent invocations share
// the extender, so one loop extends all their records; a loop each would run
// overlapping rounds and extend the same record twice.
type heartbeat struct {
	mu    sync.Mutex
	users int
	stop  context.CancelFunc
	done  chan struct{} // closed when the loop has ended
}

// join adds an invocation, starting the loop of ext if none runs. The loop's
// context keeps the values of ctx, the first joiner's, not its cancellation.
func (h *heartbeat) join(ctx context.Context, ext *visibility.Extender) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.users++; h.users > 1 {
		return
	}
	if h.done != nil {
		<-h.done // a loop the last leaver stopped is still ending
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	h.stop, h.done = stop, done
	go func() {
		defer close(done)
		_ = ext.Run(lctx)
	}()
}

// leave removes an invocation; the last one stops the loop and waits for
// it to end.
func (h *heartbeat) leave() {
	h.mu.Lock()
	if h.users--; h.users > 0 {
		h.mu.Unlock()
		return
	}
	h.stop()
	done := h.done
	h.mu.Unlock()
	<-done
}

package idempotency

import (
	"context"
	"time"
)

// localWait bounds how long after a handler of the Guard started on a key
// the other messages of that key wait for it (Guard.localWait, set to this
// by New): long enough for a short job to finish, short enough that the
// duplicates of a long one (or of one that ignores its context and never
// returns) give their handler slots back, to be postponed by the claim.
const localWait = 5 * time.Second

// running is a message of a key a handler of the Guard is handling, since
// start; done is closed when it has finished, made by the first message of
// the same key to wait.
type running struct {
	start time.Time
	done  chan struct{}
}

// enter waits while a handler of g handles key (two copies in one batch,
// or a send retried after its reply was lost), until g.localWait after that
// handler started, and no more than half of what is left to ctx's deadline,
// then notes that this one handles key, until leave(key, r). It reports
// whether it waited for one to finish. r is nil, and nothing noted, when the
// wait ended first: the message goes on to its claim, as one whose key
// another process holds. A message whose context ends while it waits is not
// claimed: enter returns ctx's cause.
//
// Once its holder has finished, a duplicate finds the key completed or
// released: it is not postponed for the claim's lease, which would spend a
// receive and hold the job for the visibility timeout and ClaimGrace.
func (g *Guard) enter(ctx context.Context, key string) (r *running, waited bool, err error) {
	if k, ok := KeyFromContext(ctx); ok && k == key {
		// Nested in a middleware that holds the key itself: no wait
		// for oneself.
		return nil, false, nil
	}
	var timeout <-chan time.Time
	for {
		g.runningMu.Lock()
		cur := g.running[key]
		if cur == nil {
			if g.running == nil {
				g.running = make(map[string]*running)
			}
			r = &running{start: g.now()}
			g.running[key] = r
			g.runningMu.Unlock()
			return r, waited, nil
		}
		if timeout == nil {
			now := g.now()
			wait := cur.start.Add(g.localWait).Sub(now)
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, dl.Sub(now)/2)
			}
			if wait <= 0 {
				g.runningMu.Unlock()
				return nil, waited, nil
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		if cur.done == nil {
			cur.done = make(chan struct{})
		}
		done := cur.done
		g.runningMu.Unlock()
		select {
		case <-done:
			waited = true
		case <-timeout:
			return nil, waited, nil
		case <-ctx.Done():
			select {
			case <-timeout: // both: the wait ended first, or as soon
				return nil, waited, nil
			default:
			}
			return nil, waited, context.Cause(ctx)
		}
	}
}

// leave notes that the handler that entered key, with r, has finished, and
// wakes the messages waiting for it.
func (g *Guard) leave(key string, r *running) {
	if r == nil {
		return
	}
	g.runningMu.Lock()
	defer g.runningMu.Unlock()
	if g.running[key] == r {
		delete(g.running, key)
	}
	if r.done != nil {
		close(r.done)
	}
}

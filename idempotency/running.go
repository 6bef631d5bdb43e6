package idempotency

import (
	"context"
	"time"
)

// localWait bounds how long a message waits for a handler of the same Guard
// handling its key: long enough for a short job to finish, short enough
// that a long job's duplicate gives its handler slot back, to be postponed
// by the claim.
var localWait = 5 * time.Second

// running is a message of a key a handler of the Guard is handling: done is
// closed when it has finished, made by the first message of the same key to
// wait.
type running struct {
	done chan struct{}
}

// enter waits, for localWait at most, while a handler of g handles key (two
// copies in one batch, or a send retried after its reply was lost), then
// notes that this one does, until leave(key, r). It reports whether it
// waited for one. r is nil, and nothing noted, when the wait ended first
// (the holder outlasted it, or ctx ended): the message goes on to its
// claim, as one whose key another process holds.
//
// Once its holder has finished, a duplicate finds the key completed (from
// the cache, without a request) or released: it is not postponed for the
// claim's lease, which would spend a receive and hold the job for the
// visibility timeout and ClaimGrace.
func (g *Guard) enter(ctx context.Context, key string) (r *running, waited bool) {
	var timeout <-chan time.Time
	for {
		g.runningMu.Lock()
		cur := g.running[key]
		if cur == nil {
			if g.running == nil {
				g.running = make(map[string]*running)
			}
			r = &running{}
			g.running[key] = r
			g.runningMu.Unlock()
			return r, waited
		}
		if cur.done == nil {
			cur.done = make(chan struct{})
		}
		done := cur.done
		g.runningMu.Unlock()
		if timeout == nil {
			t := time.NewTimer(localWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-done:
			waited = true
		case <-timeout:
			return nil, waited
		case <-ctx.Done():
			return nil, waited
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

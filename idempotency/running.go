package idempotency

import (
	"context"
	"time"
)

// localWait bounds how long a duplicate waits for a holder of its key
// running in the same Guard before it is postponed: long enough for a
// short job to finish, short enough that a long one's duplicate gives its
// handler slot back.
var localWait = 5 * time.Second

// running is a claim a handler of the Guard is running: its token, and a
// channel closed when the handler has finished with it, made by the first
// duplicate to wait.
type running struct {
	token string
	done  chan struct{}
}

// hold notes that a handler of g holds key's claim by token, until unhold.
func (g *Guard) hold(key, token string) {
	g.runningMu.Lock()
	defer g.runningMu.Unlock()
	if g.running == nil {
		g.running = make(map[string]running)
	}
	if old, ok := g.running[key]; ok && old.done != nil {
		// A handler that went on after losing its claim to this one:
		// its waiters look again, and find this claim.
		close(old.done)
	}
	g.running[key] = running{token: token}
}

// unhold notes that the handler holding key's claim by token has finished
// with it (completed or released it), and wakes the duplicates waiting.
func (g *Guard) unhold(key, token string) {
	g.runningMu.Lock()
	defer g.runningMu.Unlock()
	if r, ok := g.running[key]; ok && r.token == token {
		if r.done != nil {
			close(r.done)
		}
		delete(g.running, key)
	}
}

// awaitHolder waits, for localWait and no longer than limit, until the
// handler of g holding key's claim by token has finished with it, and
// reports whether it did. It returns false at once when no handler of g
// holds that claim: its holder runs elsewhere.
func (g *Guard) awaitHolder(ctx context.Context, key, token string, limit time.Duration) bool {
	g.runningMu.Lock()
	r, ok := g.running[key]
	if !ok || r.token != token {
		g.runningMu.Unlock()
		return false
	}
	if r.done == nil {
		r.done = make(chan struct{})
		g.running[key] = r
	}
	g.runningMu.Unlock()
	t := time.NewTimer(min(localWait, max(limit, 0)))
	defer t.Stop()
	select {
	case <-r.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

package worker

import (
	"context"
	"sync"
)

// lifecycle is the run state a Worker and a MultiWorker share: idle until
// Run, running while it runs, and closed once it has returned or when
// Shutdown came first. Each runs once.
type lifecycle struct {
	mu    sync.Mutex
	state int           // idle, running, closed
	done  chan struct{} // closed on entering closed
}

const (
	idle = iota
	running
	closed
)

func (l *lifecycle) init() { l.done = make(chan struct{}) }

// begin starts Run: it moves an idle lifecycle to running, or returns
// ErrRunning or ErrClosed.
func (l *lifecycle) begin() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case running:
		return ErrRunning
	case closed:
		return ErrClosed
	}
	l.state = running
	return nil
}

// end closes it once Run has returned.
func (l *lifecycle) end() {
	l.mu.Lock()
	l.state = closed
	l.mu.Unlock()
	close(l.done)
}

// shutdown closes an idle lifecycle, so that a later Run returns ErrClosed;
// on a running one it calls stop, if not nil, under its lock, so that stop
// comes before Run can end.
func (l *lifecycle) shutdown(stop func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case idle:
		l.state = closed
		close(l.done)
	case running:
		if stop != nil {
			stop()
		}
	}
}

// wait waits until it is closed, or returns ctx's error when ctx ends
// first. A lifecycle closed already returns nil even when ctx has ended:
// a select on both would pick either at random.
func (l *lifecycle) wait(ctx context.Context) error {
	select {
	case <-l.done:
		return nil
	default:
	}
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

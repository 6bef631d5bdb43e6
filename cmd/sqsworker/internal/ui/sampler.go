package ui

import (
	"context"
	"sync"
	"time"
)

// QueueStats is the figures of one queue, as [Config.Stats] reads them.
type QueueStats struct {
	Queue    string `json:"queue"`
	URL      string `json:"url"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"inFlight"`
	Delayed  int    `json:"delayed"`
	FIFO     bool   `json:"fifo"`
	// DLQ is the dead-letter queue of the queue's redrive policy; nil
	// without one.
	DLQ *DLQStats `json:"dlq"`
}

// DLQStats is the dead-letter queue of a redrive policy and its depth.
type DLQStats struct {
	Queue           string `json:"queue"`
	URL             string `json:"url,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount"`
	// Missing is true when the policy names a queue that does not exist.
	Missing bool `json:"missing,omitempty"`
	// Depth is its visible, in-flight and delayed messages together.
	Depth int `json:"depth"`
}

// sample is one reading of a queue.
type sample struct {
	T        time.Time `json:"t"`
	Visible  int       `json:"visible"`
	InFlight int       `json:"inFlight"`
	Delayed  int       `json:"delayed"`
	DLQ      int       `json:"dlq"`
}

// sampler reads the queues' figures every interval while a client has
// polled within idle, and keeps the readings of the last window.
type sampler struct {
	read     func(context.Context) ([]QueueStats, error)
	interval time.Duration
	idle     time.Duration
	window   time.Duration
	now      func() time.Time

	wake chan struct{} // a poll after a pause

	mu       sync.Mutex
	lastPoll time.Time
	current  []QueueStats
	history  map[string][]sample // by queue URL
	lastErr  string
	readAt   time.Time
	reads    int           // readings made (tests)
	fresh    chan struct{} // closed at the next reading
}

func newSampler(read func(context.Context) ([]QueueStats, error), interval, idle, window time.Duration) *sampler {
	return &sampler{
		read: read, interval: interval, idle: idle, window: window, now: time.Now,
		wake: make(chan struct{}, 1), history: map[string][]sample{}, fresh: make(chan struct{}),
	}
}

// run samples while clients poll, until ctx ends.
func (s *sampler) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	<-t.C
	for {
		// Asleep until a client polls.
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		}
		for s.active() {
			s.sample(ctx)
			t.Reset(s.interval)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		// A wake left from a poll while active only makes the loop
		// check active() again.
	}
}

// active reports whether a client polled within idle.
func (s *sampler) active() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now().Sub(s.lastPoll) < s.idle
}

func (s *sampler) sample(ctx context.Context) {
	rctx, cancel := context.WithTimeout(ctx, max(s.interval, 20*time.Second))
	defer cancel()
	rows, err := s.read(rctx)
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	s.readAt = now
	if err != nil {
		s.lastErr = err.Error()
	} else {
		s.lastErr = ""
		s.current = rows
		seen := map[string]bool{}
		for _, r := range rows {
			seen[r.URL] = true
			smp := sample{T: now, Visible: r.Visible, InFlight: r.InFlight, Delayed: r.Delayed}
			if r.DLQ != nil {
				smp.DLQ = r.DLQ.Depth
			}
			h := append(s.history[r.URL], smp)
			for len(h) > 0 && now.Sub(h[0].T) > s.window {
				h = h[1:]
			}
			s.history[r.URL] = h
		}
		for u := range s.history {
			if !seen[u] {
				delete(s.history, u)
			}
		}
	}
	close(s.fresh)
	s.fresh = make(chan struct{})
}

// snapshot is what /api/queues returns.
type snapshot struct {
	Queues []queueView `json:"queues"`
	// ReadAt is when the figures were read; Error the last reading's
	// error, if it failed.
	ReadAt time.Time `json:"readAt,omitzero"`
	Error  string    `json:"error,omitempty"`
	// IntervalSeconds, IdleSeconds and WindowSeconds describe the
	// sampling.
	IntervalSeconds float64 `json:"intervalSeconds"`
	IdleSeconds     float64 `json:"idleSeconds"`
	WindowSeconds   float64 `json:"windowSeconds"`
}

type queueView struct {
	QueueStats
	History []sample `json:"history"`
	// OldestFailure is the failed-at time of the oldest message of its
	// dead-letter queue seen by the last listing in this server, if any.
	OldestFailure time.Time `json:"oldestFailure,omitzero"`
}

// poll records a client's poll, wakes the sampler, and returns the
// figures; before the first reading it waits for it (or ctx).
func (s *sampler) poll(ctx context.Context) snapshot {
	s.mu.Lock()
	s.lastPoll = s.now()
	first := s.readAt.IsZero()
	fresh := s.fresh
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	if first {
		select {
		case <-fresh:
		case <-ctx.Done():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := snapshot{
		ReadAt: s.readAt, Error: s.lastErr, Queues: []queueView{},
		IntervalSeconds: s.interval.Seconds(), IdleSeconds: s.idle.Seconds(), WindowSeconds: s.window.Seconds(),
	}
	for _, r := range s.current {
		snap.Queues = append(snap.Queues, queueView{QueueStats: r, History: append([]sample{}, s.history[r.URL]...)})
	}
	return snap
}

// readings returns the number of readings made.
func (s *sampler) readings() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

package worker

import (
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest"
)

// A starved queue whose Concurrency is below the default StarvationShare
// (a quarter of the pool) reserves no more slots than it may hold: the
// slots beyond its maximum stay usable by the other queues.
func TestPoolDefaultShareWithinQueueMax(t *testing.T) {
	f := sqstest.NewFake()
	high, low := f.CreateQueue("high", nil), f.CreateQueue("low", nil)
	m, err := NewMulti(f, MultiConfig{Concurrency: 40, Queues: []QueueConfig{
		{Config: Config{QueueURL: high}, Priority: 1},
		{Config: Config{QueueURL: low, Concurrency: 4}, MaxAge: time.Second},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := m.pool
	p.setActive(0, 1)
	p.setActive(1, 1)
	p.mu.Lock()
	p.queues[1].starved = true
	p.mu.Unlock()
	if n := tryAcquire(p, 0, 40); n != 36 {
		t.Errorf("high queue got %d slots beside a starved low queue of at most 4, want 36", n)
	}
}

// A starved queue whose receive loops are all paused (waiting for a rate
// limit's token, an open circuit breaker, or a retry after a receive
// error) reserves no slots meanwhile: a rate-limited backlog stays starved
// for ever, and its share would be kept from the other queues for ever.
func TestPoolPausedStarvedQueueReservesNothing(t *testing.T) {
	p := newPool(20, []*poolQueue{
		{priority: 1, max: 20},
		{max: 20, maxAge: time.Second, share: 5},
	})
	p.setActive(0, 1)
	p.mu.Lock()
	p.queues[1].starved = true // and no active loop: paused
	p.mu.Unlock()
	n := tryAcquire(p, 0, 20)
	if n != 20 {
		t.Errorf("high queue got %d slots beside a paused starved queue, want all 20", n)
	}
	p.release(0, n)
	p.setActive(1, 1) // the starved queue receives again: its share holds
	if n := tryAcquire(p, 0, 20); n != 15 {
		t.Errorf("high queue got %d slots beside an active starved queue with a share of 5, want 15", n)
	}
}

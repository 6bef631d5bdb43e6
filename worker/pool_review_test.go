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

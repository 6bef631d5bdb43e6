package worker

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"
)

// testPool is a pool of size with a critical queue (0, priority 3) and a
// low one (1, priority 0), each with one active receive loop.
func testPool(size int, critical, low poolQueue) *pool {
	critical.priority, low.priority = 3, 0
	if critical.max == 0 {
		critical.max = size
	}
	if low.max == 0 {
		low.max = size
	}
	p := newPool(size, []*poolQueue{&critical, &low})
	p.setActive(0, 1)
	p.setActive(1, 1)
	return p
}

// tryAcquire acquires with a short deadline, for slots that are free now.
func tryAcquire(p *pool, q, want int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	return p.acquire(ctx, q, want)
}

// checkReservations fails the test when the queues hold slots that another
// queue reserved: the slots held, plus the reserved ones not held, must fit
// the pool.
func checkReservations(t *testing.T, p *pool) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	sum := 0
	for _, q := range p.queues {
		sum += max(q.used, q.reserved)
		if q.used > q.max {
			t.Errorf("a queue holds %d slots, above its maximum %d", q.used, q.max)
		}
	}
	if sum > p.size {
		t.Errorf("held plus free reserved slots = %d, above the pool's %d: a reservation was taken", sum, p.size)
	}
}

// A low queue never takes the slots the critical queue reserved, even while
// the critical queue is idle; the critical queue gets them at once.
func TestPoolReservedSlotsStayFree(t *testing.T) {
	p := testPool(10, poolQueue{reserved: 3}, poolQueue{})
	p.received(0, 0, 1, 0) // the critical queue is idle
	if n := tryAcquire(p, 1, 10); n != 7 {
		t.Fatalf("low queue got %d slots, want 7 (10 less the 3 reserved)", n)
	}
	if n := tryAcquire(p, 1, 10); n != 0 {
		t.Fatalf("low queue got %d more slots, want 0", n)
	}
	checkReservations(t, p)
	p.received(0, 1, 1, 0)
	if n := tryAcquire(p, 0, 10); n != 3 {
		t.Fatalf("critical queue got %d slots, want its 3 reserved", n)
	}
	checkReservations(t, p)
}

// A slot that frees goes to the waiting queue of the highest priority, and
// while the critical queue has messages the low one waits.
func TestPoolFreedSlotGoesToHighestPriority(t *testing.T) {
	p := testPool(2, poolQueue{}, poolQueue{})
	p.received(0, 0, 1, 0) // critical idle: low may take the pool
	if n := tryAcquire(p, 1, 2); n != 2 {
		t.Fatalf("low queue got %d slots, want 2", n)
	}
	p.received(0, 1, 1, 0) // critical has messages now
	got := make(chan [2]int, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { got <- [2]int{1, p.acquire(ctx, 1, 1)} }()
	time.Sleep(20 * time.Millisecond) // the low queue waits first
	go func() { got <- [2]int{0, p.acquire(ctx, 0, 1)} }()
	time.Sleep(20 * time.Millisecond)
	p.release(1, 1)
	first := <-got
	if first != [2]int{0, 1} {
		t.Fatalf("the freed slot went to queue %d (got %d), want the critical queue 0", first[0], first[1])
	}
	p.release(1, 1)
	select {
	case r := <-got:
		t.Fatalf("the low queue got %d slots while the critical queue has messages and room", r[1])
	case <-time.After(50 * time.Millisecond):
	}
	p.received(0, 0, 1, 0) // the critical queue ran dry: the low one goes on
	if r := <-got; r != [2]int{1, 1} {
		t.Fatalf("low queue: %v, want one slot", r)
	}
}

// An idle queue's long poll holds one slot, not ten, when other queues
// share the pool; a lone queue takes all it asks for.
func TestPoolIdleQueueTakesOneSlot(t *testing.T) {
	p := testPool(20, poolQueue{}, poolQueue{})
	p.received(0, 0, 1, 0)
	if n := tryAcquire(p, 0, 10); n != 1 {
		t.Fatalf("idle critical queue got %d slots, want 1", n)
	}
	p.received(0, 3, 3, 0)
	if n := tryAcquire(p, 0, 10); n != 10 {
		t.Fatalf("critical queue with messages got %d slots, want 10", n)
	}
	lone := newPool(20, []*poolQueue{{max: 20}})
	lone.received(0, 0, 1, 0)
	if n := tryAcquire(lone, 0, 10); n != 10 {
		t.Fatalf("a lone idle queue got %d slots, want 10", n)
	}
}

// The starvation guard: a low queue that receives a message older than its
// budget runs with its share beside a busy critical queue, and stops when
// what it receives is within half of the budget.
func TestPoolStarvationShare(t *testing.T) {
	p := testPool(10, poolQueue{}, poolQueue{maxAge: time.Minute, share: 3})
	p.received(0, 5, 5, 0) // critical busy
	if n := tryAcquire(p, 1, 10); n != 0 {
		t.Fatalf("low queue got %d slots while the critical queue is busy", n)
	}
	p.received(1, 4, 4, 2*time.Minute) // over budget
	if n := tryAcquire(p, 1, 10); n != 3 {
		t.Fatalf("starved low queue got %d slots, want its share 3", n)
	}
	if n := tryAcquire(p, 0, 10); n != 7 {
		t.Fatalf("critical queue got %d slots beside the starved one, want 7", n)
	}
	p.release(1, 3)
	p.received(1, 4, 4, 20*time.Second) // within half the budget
	if st := p.state(1); st.starved {
		t.Fatal("low queue still starved after receiving within budget")
	}
	if n := tryAcquire(p, 1, 10); n != 0 {
		t.Fatalf("low queue got %d slots after the guard let go", n)
	}
}

// A queue that waits for slots for longer than its budget is starved, even
// before it receives anything.
func TestPoolStarvedByWaiting(t *testing.T) {
	p := testPool(4, poolQueue{}, poolQueue{maxAge: 100 * time.Millisecond, share: 2})
	p.received(0, 5, 5, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n := p.acquire(ctx, 1, 10); n < 1 || n > 2 {
		t.Fatalf("low queue got %d slots after waiting past its budget, want 1 or 2 (its share)", n)
	}
	if !p.state(1).starved {
		t.Fatal("low queue not starved")
	}
}

// Many receive loops of three queues take and give back slots at random;
// no queue ever holds another's reserved slots nor more than its maximum.
func TestPoolReservationsUnderChurn(t *testing.T) {
	qs := []*poolQueue{
		{priority: 3, reserved: 4, max: 8},
		{priority: 1, reserved: 2, max: 16, maxAge: 20 * time.Millisecond, share: 6},
		{priority: 0, max: 16},
	}
	p := newPool(16, qs)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for q := range qs {
		for range 3 {
			wg.Go(func() {
				p.setActive(q, 1)
				defer p.setActive(q, -1)
				for ctx.Err() == nil {
					n := p.acquire(ctx, q, 1+rand.IntN(10))
					checkReservations(t, p)
					got := rand.IntN(n + 1)
					p.received(q, got, n, time.Duration(rand.IntN(40))*time.Millisecond)
					p.release(q, n-got)
					time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
					p.release(q, got)
				}
			})
		}
	}
	wg.Wait()
	checkReservations(t, p)
	for i, q := range qs {
		if q.used != 0 {
			t.Errorf("queue %d holds %d slots after every loop gave its back", i, q.used)
		}
		if q.peak == 0 {
			t.Errorf("queue %d never got a slot", i)
		}
	}
}

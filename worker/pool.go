package worker

import (
	"context"
	"math"
	"sync"
	"time"
)

// pool is the handler slots of a Worker, or the shared slots of a
// MultiWorker's queues. A receive loop takes as many slots as it may fill
// before it receives, and each message holds one until it is settled.
//
// The rules, for the queues of one pool:
//
//   - A queue never takes a slot another queue reserved (Reserved), nor
//     more than its own maximum (its Concurrency).
//   - Waiting receive loops are served in priority order, then in order of
//     arrival: a slot that frees goes to the highest-priority queue that
//     wants it.
//   - While a queue is hungry (its last receive brought as many messages as
//     it asked for, so more may be waiting) and
//     active (one of its receive loops is receiving or waiting for slots,
//     not paused by the circuit breaker, a rate limit or a receive error;
//     or, in a MultiWorker, the queue is starting: from Run's start until
//     its receive loops run, except while it waits to retry reading an
//     unreachable queue),
//     lower-priority queues take only their reserved slots: they poll with
//     slots higher queues are not using. A receive still under way after
//     hungryGrace ends the hunger: SQS answers at once when messages wait,
//     so it is a long poll on an empty queue, which lower queues need not
//     wait out.
//   - An idle queue (its last receive brought nothing) takes at most one
//     slot beyond its free reserved ones, when other queues share the pool:
//     its long poll does not hold slots that a busy queue could fill.
//   - The starvation guard: a queue with an age budget (MaxAge) is starved
//     when a receive brings a message older than the budget (on its first
//     receive, not one of the runtime's waiting copies), or when a
//     receive loop of it has waited for slots for half the budget.
//     While starved and active, its reservation is raised to its
//     StarvationShare (within what the other queues do not reserve), so
//     that it runs beside higher queues; it is no longer starved once a
//     receive brings nothing or only messages within half of the budget.
//
// With one queue, none of the rules but the first matter: the pool is a
// counting semaphore of Concurrency slots.
type pool struct {
	mu      sync.Mutex
	size    int
	queues  []*poolQueue
	waiters []*waiter // in priority order, then order of arrival
	eff     []int     // effectiveLocked's result, reused under mu
}

// poolQueue is one queue's share of a pool.
type poolQueue struct {
	priority int
	reserved int
	max      int
	share    int           // reservation while starved; 0 for none
	maxAge   time.Duration // the age budget; 0 for none

	used    int    // slots held
	peak    int    // most slots held at once
	hungry  bool   // the last receive brought all it asked for: more may wait; true at the start
	gen     uint64 // receives recorded: a grace timer of an older receive does nothing
	idle    bool   // the last receive brought nothing
	active  int    // receive loops receiving or waiting for slots
	starved bool
}

// waiter is a receive loop waiting for slots.
type waiter struct {
	q     int
	want  int
	got   int
	ready chan struct{} // signalled when got leaves 0 and when it reaches want
}

func newPool(size int, queues []*poolQueue) *pool {
	for _, q := range queues {
		q.hungry = true
	}
	return &pool{size: size, queues: queues}
}

// acquire waits for one free slot for queue q, then takes up to want-1
// more, waiting at most fillWait for them: under load, a few milliseconds
// turn many small receives into few full ones. It returns 0 when ctx ends
// first. The caller gives every slot back with release.
func (p *pool) acquire(ctx context.Context, q, want int) int {
	w := &waiter{q: q, want: want, ready: make(chan struct{}, 1)}
	p.mu.Lock()
	i := len(p.waiters)
	for i > 0 && p.queues[p.waiters[i-1].q].priority < p.queues[q].priority {
		i--
	}
	p.waiters = append(p.waiters, nil)
	copy(p.waiters[i+1:], p.waiters[i:])
	p.waiters[i] = w
	p.grantLocked()
	p.mu.Unlock()

	var starve <-chan time.Time
	if d := p.queues[q].maxAge; d > 0 {
		// Half the budget: a message may have waited in the queue before
		// this wait began, and the receive and its slot's turn still take
		// time after it.
		t := time.NewTimer(d / 2)
		defer t.Stop()
		starve = t.C
	}
	for p.got(w) == 0 {
		select {
		case <-w.ready:
		case <-starve:
			// Waiting this long for a slot puts the queue's budget at
			// risk: whatever it holds has waited at least as long.
			starve = nil
			p.mu.Lock()
			p.queues[q].starved = true
			p.grantLocked()
			p.mu.Unlock()
		case <-ctx.Done():
			return p.take(w)
		}
	}
	t := time.NewTimer(fillWait)
	defer t.Stop()
	for p.got(w) < want {
		select {
		case <-w.ready:
		case <-t.C:
			return p.take(w)
		case <-ctx.Done():
			return p.take(w)
		}
	}
	return p.take(w)
}

func (p *pool) got(w *waiter) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return w.got
}

// take removes w from the waiters and returns the slots it was granted.
func (p *pool) take(w *waiter) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, o := range p.waiters {
		if o == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			break
		}
	}
	return w.got
}

// release gives n slots of queue q back.
func (p *pool) release(q, n int) {
	if n <= 0 {
		return
	}
	p.mu.Lock()
	p.queues[q].used -= n
	p.grantLocked()
	p.mu.Unlock()
}

// setActive counts a receive loop of q in (+1) or out (-1): one that is
// paused by the circuit breaker, a rate limit or a receive error does not
// hold lower queues back.
func (p *pool) setActive(q, delta int) {
	p.mu.Lock()
	p.queues[q].active += delta
	p.grantLocked()
	p.mu.Unlock()
}

// hungryGrace is how long a receive of a hungry queue may be under way
// before the queue is taken for empty (see pool).
const hungryGrace = 200 * time.Millisecond

// receiving notes that a receive of queue q starts, and returns the func
// that stops its grace timer once it ends: a receive under way after
// hungryGrace, with none recorded meanwhile, ends q's hunger.
func (p *pool) receiving(q int) (stop func() bool) {
	if len(p.queues) == 1 {
		return noGrace // hunger holds back lower queues only: a Worker has none
	}
	p.mu.Lock()
	gen := p.queues[q].gen
	p.mu.Unlock()
	t := time.AfterFunc(hungryGrace, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if pq := p.queues[q]; pq.gen == gen && pq.hungry {
			pq.hungry = false
			p.grantLocked()
		}
	})
	return t.Stop
}

// noGrace is receiving's stop when no grace timer runs.
func noGrace() bool { return false }

// watchesAge reports whether queue q has an age budget, for which
// received needs the age of a receive's oldest message.
func (p *pool) watchesAge(q int) bool { return p.queues[q].maxAge > 0 } // fixed before the pool is built

// received records what a receive of queue q brought: n messages of the
// asked for, the oldest of them oldest old (from its SentTimestamp).
func (p *pool) received(q, n, asked int, oldest time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pq := p.queues[q]
	pq.gen++
	pq.hungry = n > 0 && n >= asked
	pq.idle = n == 0
	if pq.maxAge > 0 {
		switch {
		case n == 0 || oldest <= pq.maxAge/2:
			pq.starved = false
		case oldest > pq.maxAge:
			pq.starved = true
		}
	}
	p.grantLocked()
}

// poolState is a snapshot of one queue's share of a pool.
type poolState struct {
	used, peak int
	starved    bool
}

func (p *pool) state(q int) poolState {
	p.mu.Lock()
	defer p.mu.Unlock()
	pq := p.queues[q]
	return poolState{used: pq.used, peak: pq.peak, starved: pq.starved}
}

// effectiveLocked returns each queue's reservation in effect: its own, or
// its StarvationShare while it is starved, as far as the slots no queue
// reserves allow, higher priorities first. The slice is the pool's own,
// valid until p.mu is released.
func (p *pool) effectiveLocked() []int {
	if len(p.eff) != len(p.queues) {
		p.eff = make([]int, len(p.queues))
	}
	eff := p.eff
	spare := p.size
	for i, q := range p.queues {
		eff[i] = q.reserved
		spare -= q.reserved
	}
	for range p.queues { // in priority order: the highest starved queue first
		best := -1
		for i, q := range p.queues {
			// A starved queue whose loops are all paused (a rate limit,
			// an open breaker, a receive error) cannot use its share:
			// a rate-limited backlog would keep it from the others for
			// ever.
			if q.starved && q.active > 0 && q.share > eff[i] && (best < 0 || q.priority > p.queues[best].priority) {
				best = i
			}
		}
		if best < 0 || spare <= 0 {
			break
		}
		extra := min(p.queues[best].share-eff[best], spare)
		eff[best] += extra
		spare -= extra
		if eff[best] < p.queues[best].share { // no room left for anyone
			break
		}
	}
	return eff
}

// grantLocked hands free slots to the waiters, in priority order.
func (p *pool) grantLocked() {
	if len(p.waiters) == 0 {
		return
	}
	// No waiter takes more than the slots no queue uses (availLocked's
	// hard): once they are granted, the rest of the waiters get none.
	free := p.size
	for _, q := range p.queues {
		free -= q.used
	}
	if free <= 0 {
		return
	}
	eff := p.effectiveLocked()
	// Queues below the priority of a hungry, active queue with room left
	// take only their reserved slots.
	block := math.MinInt
	for _, q := range p.queues {
		if q.hungry && q.active > 0 && q.used < q.max && q.priority > block {
			block = q.priority
		}
	}
	shared := len(p.queues) > 1
	for _, w := range p.waiters {
		if free <= 0 {
			break
		}
		q := p.queues[w.q]
		need := w.want - w.got
		if need <= 0 {
			continue
		}
		resFree := max(0, eff[w.q]-q.used)
		if shared && q.idle {
			need = min(need, max(resFree, 1-w.got))
		}
		n := min(need, p.availLocked(w.q, eff, resFree, q.priority < block))
		if n <= 0 {
			continue
		}
		q.used += n
		free -= n
		q.peak = max(q.peak, q.used)
		first := w.got == 0
		w.got += n
		// acquire waits for its first slot, then for all it wants (or
		// fillWait): only these two steps wake it, not every slot that
		// frees in between.
		if first || w.got >= w.want {
			select {
			case w.ready <- struct{}{}:
			default:
			}
		}
	}
}

// availLocked is how many slots queue i may take now.
func (p *pool) availLocked(i int, eff []int, resFree int, blocked bool) int {
	q := p.queues[i]
	// hard keeps every other queue's reserved slots for it.
	hard := p.size - q.used
	// soft also keeps the starvation shares in effect.
	soft := p.size
	for j, o := range p.queues {
		soft -= max(o.used, eff[j])
		if j != i {
			hard -= max(o.used, o.reserved)
		}
	}
	shared := max(0, soft)
	if blocked {
		shared = 0
	}
	return max(0, min(q.max-q.used, hard, resFree+shared))
}

package worker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/internal/executor"
)

// Handlers that block until every message of the receive has started: each
// task must get a goroutine of its own, however few wake-ups put makes.
func TestRunqEveryTaskGetsAGoroutine(t *testing.T) {
	const goroutines, n = 20, 10
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	var wg sync.WaitGroup
	q := servedRunq(goroutines, &wg, func(_ int, _ task) {
		started.Done()
		<-all
	})
	ts := make([]task, n)
	for i := range ts {
		ts[i] = task{job: &executor.Job{}}
	}
	q.put(ts...)
	ok := make(chan struct{})
	go func() { started.Wait(); close(ok) }()
	select {
	case <-ok:
	case <-time.After(30 * time.Second):
		t.Fatal("not every task started: a task waits behind a blocked one")
	}
	close(all)
	q.close()
	wg.Wait()
	if q.live != n {
		t.Errorf("%d goroutines started for %d blocked tasks", q.live, n)
	}
}

// Tasks put from several goroutines, in bursts, to goroutines that take
// them quickly or slowly: each is taken exactly once, none is left when
// close lets the goroutines return, and the queue's array stays bounded.
func TestRunqTakesEachOnce(t *testing.T) {
	const goroutines, putters, bursts = 16, 4, 2000
	var taken atomic.Int64
	var mu sync.Mutex
	seen := map[*executor.Job]int{}
	slots := make(chan struct{}, goroutines) // a task holds a slot, as in the worker
	var wg sync.WaitGroup
	q := servedRunq(goroutines, &wg, func(g int, tk task) {
		mu.Lock()
		seen[tk.job]++
		mu.Unlock()
		taken.Add(1)
		if g%4 == 0 {
			time.Sleep(time.Microsecond)
		}
		<-slots
	})
	var puts sync.WaitGroup
	for range putters {
		puts.Go(func() {
			for b := range bursts {
				k := 1 + b%3
				ts := make([]task, 0, k)
				for range k {
					slots <- struct{}{}
					ts = append(ts, task{job: &executor.Job{}})
				}
				q.put(ts...)
			}
		})
	}
	puts.Wait()
	q.close()
	wg.Wait()
	want := int64(0)
	for p := 0; p < putters; p++ {
		for b := range bursts {
			want += int64(1 + b%3)
		}
	}
	if taken.Load() != want {
		t.Fatalf("taken %d tasks, put %d", taken.Load(), want)
	}
	if len(seen) != int(want) {
		t.Fatalf("%d distinct tasks taken, put %d", len(seen), want)
	}
	if c := cap(q.tasks); c > 4*goroutines {
		t.Errorf("the queue's array grew to %d for at most %d tasks at once", c, goroutines)
	}
	if q.live > goroutines {
		t.Errorf("%d goroutines started for %d slots", q.live, goroutines)
	}
}

// Rounds of tasks put in receive-sized chunks by several putters, each
// task holding a slot, while the goroutines of the round before are still
// coming back at random moments (and take tasks a woken goroutine was
// signalled for): every task of a round blocks until all of them started,
// so each needs a goroutine of its own, and a wake-up lost on the way
// would leave a round waiting for ever. Each task is taken once.
func TestRunqStressEveryTaskStarts(t *testing.T) {
	const goroutines, rounds = 32, 2000
	slots := make(chan struct{}, goroutines)
	jobs := newStressJobs()
	var wg sync.WaitGroup
	q := servedRunq(goroutines, &wg, func(_ int, tk task) {
		r := jobs.take(tk)
		r.started.Done()
		<-r.all
		switch rand.N(4) { // come back at a random moment
		case 0:
		case 1:
			runtime.Gosched()
		default:
			time.Sleep(rand.N(50 * time.Microsecond))
		}
		<-slots
	})
	total := 0
	for i := range rounds {
		r := &stressRound{all: make(chan struct{})}
		k := 1 + rand.N(goroutines)
		total += k
		puts := jobs.put(q, slots, r, k)
		ok := make(chan struct{})
		go func() { r.started.Wait(); close(ok) }()
		select {
		case <-ok:
		case <-time.After(30 * time.Second):
			q.mu.Lock()
			t.Fatalf("round %d: not every one of its %d tasks started: waiting %d, parked %d, woken %d, started %d", i, k, len(q.tasks)-q.head, q.parked, q.woken, q.live)
		}
		puts.Wait()
		close(r.all) // the goroutines come back while the next round is put
	}
	q.close()
	wg.Wait()
	jobs.checkTakenOnce(t, total)
	if c := cap(q.tasks); c > 4*goroutines {
		t.Errorf("the queue's array grew to %d for at most %d tasks at once", c, goroutines)
	}
	if q.live > goroutines {
		t.Errorf("%d goroutines started for %d slots", q.live, goroutines)
	}
}

// Quick tasks put a receive at a time start no more goroutines than a
// receive holds, however many slots there are: the goroutines parked are
// woken before any is started.
func TestRunqQuickTasksStartFewGoroutines(t *testing.T) {
	const slots, rounds = 80, 500
	var wg sync.WaitGroup
	var done atomic.Int64
	q := servedRunq(slots, &wg, func(_ int, _ task) {
		done.Add(1)
	})
	for r := range rounds {
		ts := make([]task, MaxMessagesPerReceive)
		for i := range ts {
			ts[i] = task{job: &executor.Job{}}
		}
		q.put(ts...)
		want := int64((r + 1) * MaxMessagesPerReceive)
		deadline := time.Now().Add(30 * time.Second)
		for { // every task taken and every goroutine parked again
			q.mu.Lock()
			idle := q.parked == q.live && q.woken == 0
			q.mu.Unlock()
			if idle && done.Load() == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d of %d tasks taken", r, done.Load(), want)
			}
			runtime.Gosched()
		}
	}
	q.close()
	wg.Wait()
	if q.live > MaxMessagesPerReceive {
		t.Errorf("%d goroutines started for tasks %d at a time", q.live, MaxMessagesPerReceive)
	}
	t.Logf("%d goroutines started for %d slots", q.live, slots)
}

// A queue closed right after a put, before the parked goroutines that put
// woke, or the goroutine it started, have run (as at shutdown, when the
// last receive's messages come just before the receive loops stop): every
// task queued still gets a goroutine of its own, and the counters come
// back to zero. close must
// count the goroutine already signalled once only, and leave no goroutine
// counted parked: else no other goroutine is woken or started for the
// tasks left, which wait behind a running handler.
func TestRunqCloseRightAfterPut(t *testing.T) {
	const goroutines, n, iterations = 8, 5, 100
	for warm := 0; warm <= 3; warm++ { // goroutines started and parked before the put
		for i := range iterations {
			var warmed, started sync.WaitGroup
			warmGate, all := make(chan struct{}), make(chan struct{})
			var phase atomic.Int32
			var wg sync.WaitGroup
			q := servedRunq(goroutines, &wg, func(_ int, _ task) {
				if phase.Load() == 0 {
					warmed.Done()
					<-warmGate
					return
				}
				started.Done()
				<-all
			})
			warmed.Add(warm)
			for range warm {
				q.put(task{job: &executor.Job{}})
			}
			warmed.Wait()
			phase.Store(1)
			close(warmGate)
			for { // every goroutine parked again
				q.mu.Lock()
				idle := q.live == warm && q.parked == warm && q.woken == 0 && q.head == len(q.tasks)
				q.mu.Unlock()
				if idle {
					break
				}
				runtime.Gosched()
			}
			started.Add(n)
			ts := make([]task, n)
			for k := range ts {
				ts[k] = task{job: &executor.Job{}}
			}
			q.put(ts...)
			q.close()
			ok := make(chan struct{})
			go func() { started.Wait(); close(ok) }()
			select {
			case <-ok:
			case <-time.After(30 * time.Second):
				q.mu.Lock()
				msg := fmt.Sprintf("%d parked, iteration %d: not every one of %d tasks started after close: waiting %d, parked %d, woken %d, started %d",
					warm, i, n, len(q.tasks)-q.head, q.parked, q.woken, q.live)
				q.mu.Unlock()
				close(all)
				wg.Wait()
				t.Fatal(msg)
			}
			close(all)
			wg.Wait()
			if q.woken != 0 || q.parked != 0 || q.live != n {
				t.Fatalf("%d parked, iteration %d: woken %d, parked %d, started %d once every goroutine returned; want 0, 0, %d",
					warm, i, q.woken, q.parked, q.live, n)
			}
		}
	}
}

// With every goroutine started and running a task, a task put (into the
// slot one of them has just freed, on its way back) waits for that one:
// no goroutine is started beyond max.
func TestRunqStartsAtMostMax(t *testing.T) {
	const goroutines = 2
	var wg sync.WaitGroup
	running := make(chan struct{})
	back := make(chan struct{})
	q := servedRunq(goroutines, &wg, func(_ int, _ task) {
		running <- struct{}{}
		<-back
	})
	for range goroutines {
		q.put(task{job: &executor.Job{}})
		<-running
	}
	q.put(task{job: &executor.Job{}})
	q.mu.Lock()
	live, waiting := q.live, len(q.tasks)-q.head
	q.mu.Unlock()
	if live != goroutines || waiting != 1 {
		t.Errorf("%d goroutines started for %d slots, %d tasks waiting; want %d and 1", live, goroutines, waiting, goroutines)
	}
	back <- struct{}{} // one comes back and takes it
	<-running
	close(back)
	q.close()
	wg.Wait()
	if q.live != goroutines {
		t.Errorf("%d goroutines started for %d slots", q.live, goroutines)
	}
}

// stressRound is a round of tasks of the stress tests: started counts
// those that began; while all is not nil, they wait for it to close.
type stressRound struct {
	started sync.WaitGroup
	all     chan struct{}
}

// stressJobs knows the round of each task the stress tests put, and counts
// how often each was taken.
type stressJobs struct {
	mu    sync.Mutex
	of    map[*executor.Job]*stressRound
	taken map[*executor.Job]int
}

func newStressJobs() *stressJobs {
	return &stressJobs{of: map[*executor.Job]*stressRound{}, taken: map[*executor.Job]int{}}
}

// take counts tk taken and returns its round.
func (s *stressJobs) take(tk task) *stressRound {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken[tk.job]++
	return s.of[tk.job]
}

// put puts k tasks of r into q in receive-sized chunks from concurrent
// putters, each task taking a slot first, as a receive takes a handler
// slot per message. The WaitGroup is done once they are all put.
func (s *stressJobs) put(q *runq, slots chan struct{}, r *stressRound, k int) *sync.WaitGroup {
	r.started.Add(k)
	var puts sync.WaitGroup
	for left := k; left > 0; {
		n := min(left, 1+rand.N(MaxMessagesPerReceive))
		left -= n
		puts.Go(func() {
			ts := make([]task, 0, n)
			for range n {
				slots <- struct{}{}
				j := &executor.Job{}
				s.mu.Lock()
				s.of[j] = r
				s.mu.Unlock()
				ts = append(ts, task{job: j})
			}
			q.put(ts...)
		})
	}
	return &puts
}

// checkTakenOnce checks that total distinct tasks were taken, each once.
func (s *stressJobs) checkTakenOnce(t *testing.T, total int) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.taken) != total {
		t.Fatalf("%d distinct tasks taken, put %d", len(s.taken), total)
	}
	for _, n := range s.taken {
		if n != 1 {
			t.Fatalf("a task taken %d times", n)
		}
	}
}

// servedRunq is a run queue for size slots whose goroutines, started as
// tasks come and counted in wg, run each task they take with run(g, t), g
// numbering the goroutine from 1 in the order started.
func servedRunq(size int, wg *sync.WaitGroup, run func(g int, t task)) *runq {
	var q *runq
	started := 0 // spawn runs with q.mu held
	q = newRunq(size, func() {
		started++
		g := started
		wg.Go(func() { q.serve(func(t task) { run(g, t) }) })
	})
	return q
}

// After a burst that started every goroutine, those left parked for a whole
// idleTrim return; tasks that come later start goroutines again, and each
// runs once. Goroutines still needed stay.
func TestRunqIdleGoroutinesReturn(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		const size = 8
		var wg sync.WaitGroup
		var ran atomic.Int64
		release := make(chan struct{})
		q := servedRunq(size, &wg, func(_ int, tk task) {
			if tk.job.Probe != 0 { // the burst: hold every goroutine at once
				<-release
			}
			ran.Add(1)
		})
		live := func() int {
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.live
		}
		// A burst of blocked tasks needs a goroutine for each.
		burst := func(which string) {
			ts := make([]task, size)
			for i := range ts {
				ts[i] = task{job: &executor.Job{Probe: 1}}
			}
			q.put(ts...)
			synctest.Wait()
			if n := live(); n != size {
				t.Errorf("%d goroutines for the %s burst of %d blocked tasks", n, which, size)
			}
		}
		burst("first")
		close(release)
		synctest.Wait()

		// A trickle needs one goroutine at a time: the rest are not
		// needed for a whole idleTrim and return.
		for range 3 * idleTrim / time.Second {
			q.put(task{job: &executor.Job{}})
			time.Sleep(time.Second)
			synctest.Wait()
		}
		if n := live(); n < 1 || n > 2 {
			t.Errorf("%d goroutines live under a trickle after %s, want 1 or 2", n, 3*idleTrim)
		}
		time.Sleep(3 * idleTrim)
		synctest.Wait()
		if n := live(); n != 0 {
			t.Errorf("%d goroutines live after %s idle, want 0", n, 3*idleTrim)
		}

		// Another burst starts them again.
		release = make(chan struct{})
		burst("second")
		close(release)
		q.close()
		wg.Wait()
		if want := int64(2*size + 3*idleTrim/time.Second); ran.Load() != want {
			t.Errorf("%d tasks ran, want %d", ran.Load(), want)
		}
	})
}

// Rounds of tasks put in receive-sized chunks while trim runs over and
// over, as if idleTrim were a few microseconds: goroutines are told to
// return while puts race them, and a woken one that is to return must
// still take a task it finds. In half the rounds every task blocks until
// all of the round have started, so each needs a goroutine of its own: a
// goroutine returning in place of one a task waits for would leave the
// round waiting for ever. Each task is taken once; the counters stay
// consistent whenever the lock is free; goroutines idle through two trims
// all return, and tasks put afterwards start them again.
func TestRunqTrimRacingPuts(t *testing.T) {
	const goroutines, rounds = 16, 1500
	slots := make(chan struct{}, goroutines)
	jobs := newStressJobs()
	var wg sync.WaitGroup
	var q *runq
	spawned := 0 // under q.mu
	q = newRunq(goroutines, func() {
		spawned++
		wg.Go(func() {
			q.serve(func(tk task) {
				r := jobs.take(tk)
				r.started.Done()
				if r.all != nil {
					<-r.all
				}
				if rand.N(3) == 0 {
					runtime.Gosched()
				}
				<-slots
			})
		})
	})
	check := func() string {
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.parked < 0 || q.woken < 0 || q.retire < 0 || q.live < 0 || q.live > q.max ||
			q.retire+q.parked > q.live || (!q.closed && q.idleMin > q.parked) {
			return fmt.Sprintf("live %d (max %d), parked %d, woken %d, retire %d, idleMin %d",
				q.live, q.max, q.parked, q.woken, q.retire, q.idleMin)
		}
		return ""
	}
	stopTrims := make(chan struct{})
	var trims sync.WaitGroup
	var bad atomic.Pointer[string]
	trims.Go(func() {
		for {
			select {
			case <-stopTrims:
				return
			default:
			}
			q.trim()
			if s := check(); s != "" {
				bad.CompareAndSwap(nil, &s)
			}
			if rand.N(2) == 0 {
				runtime.Gosched()
			} else {
				time.Sleep(rand.N(20 * time.Microsecond))
			}
		}
	})
	stop := func() {
		close(stopTrims)
		trims.Wait()
		q.close()
		wg.Wait()
	}
	waitStarted := func(i, k int, r *stressRound) {
		ok := make(chan struct{})
		go func() { r.started.Wait(); close(ok) }()
		select {
		case <-ok:
		case <-time.After(30 * time.Second):
			q.mu.Lock()
			msg := fmt.Sprintf("round %d: not every one of its %d tasks started: waiting %d, parked %d, woken %d, retire %d, live %d",
				i, k, len(q.tasks)-q.head, q.parked, q.woken, q.retire, q.live)
			q.mu.Unlock()
			if r.all != nil {
				close(r.all)
			}
			t.Fatal(msg) // the goroutines are left: the run queue is stuck
		}
	}
	putRound := func(i int, blocking bool) int {
		r := &stressRound{}
		if blocking {
			r.all = make(chan struct{})
		}
		k := 1 + rand.N(goroutines)
		puts := jobs.put(q, slots, r, k)
		waitStarted(i, k, r)
		puts.Wait()
		if blocking {
			close(r.all) // the goroutines come back while the next round is put
		}
		if rand.N(4) == 0 { // an idle spell: goroutines park and are trimmed
			time.Sleep(rand.N(200 * time.Microsecond))
		}
		return k
	}
	total := 0
	for i := range rounds {
		total += putRound(i, i%2 == 0)
	}
	// Idle: every goroutine parks and is told to return.
	deadline := time.Now().Add(30 * time.Second)
	for {
		q.mu.Lock()
		live, retired := q.live, spawned-q.live
		q.mu.Unlock()
		if live == 0 {
			t.Logf("%d goroutines started for %d tasks, %d returned", spawned, total, retired)
			break
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("%d goroutines still live after 30s idle with trims", live)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 20 { // they start again
		total += putRound(rounds+i, true)
	}
	stop()
	if s := bad.Load(); s != nil {
		t.Errorf("inconsistent counters: %s", *s)
	}
	if s := check(); s != "" {
		t.Errorf("inconsistent counters after close: %s", s)
	}
	jobs.checkTakenOnce(t, total)
	if q.woken != 0 || q.parked != 0 {
		t.Errorf("woken %d, parked %d once every goroutine returned; want 0, 0", q.woken, q.parked)
	}
}

package worker

import (
	"sync"
	"time"
)

// runq hands received messages to the handler goroutines with as few
// wake-ups as keep every message from waiting behind another.
//
// A channel would wake one parked goroutine per message: ten per receive,
// each a trip through the scheduler and, with a core idle, through the
// kernel. Instead put wakes one goroutine, and a goroutine that takes a
// task wakes the next only while tasks are left and none is on its way
// already; a goroutine that finishes its task takes the next without
// parking. With quick handlers a few goroutines take a receive's ten
// messages in turn; with slow ones each message still gets its own
// goroutine, one wake-up after the other.
//
// Goroutines are started as tasks need them, up to max, one for each slot:
// quick handlers keep a few goroutines busy rather than many parked, which
// every garbage collection would scan. A goroutine once started stays while
// it is needed, so that a message costs no goroutine start nor stack
// growth; those that stayed parked for a whole idleTrim return, so that a
// burst to a large Concurrency does not keep its goroutines and their
// stacks for the rest of a long-lived process. There are never more tasks
// than goroutines to take them: each task holds a handler slot, and a task
// that finds no goroutine parked or on its way has one started, or, with
// max started, one that is running a task will take it next.
type runq struct {
	mu   sync.Mutex
	wake sync.Cond
	// tasks[head:] wait for a goroutine.
	tasks []task
	head  int
	// parked counts the goroutines waiting on wake and not signalled yet;
	// woken those signalled (or started) and not yet back; closed tells
	// them to return once tasks is empty. A goroutine signalled moves from
	// parked to woken at once, so that close, which wakes the parked ones,
	// does not count it a second time: woken would never drop to zero, and
	// no goroutine would be woken or started for the tasks left.
	parked int
	woken  int
	closed bool
	// spawn starts a goroutine that runs serve; live, at most max, are
	// started and not returned at trim's word.
	spawn     func()
	live, max int
	// idleMin is the fewest goroutines parked at once since the last
	// trim: that many were not needed over the whole interval. trim
	// wakes them to return; retire counts those still to return.
	idleMin int
	retire  int
	trimmer *time.Timer
}

// idleTrim is how long a goroutine stays parked before it returns.
const idleTrim = time.Minute

// newRunq returns a run queue for size slots, which starts up to size
// goroutines with spawn as tasks come.
func newRunq(size int, spawn func()) *runq {
	q := &runq{tasks: make([]task, 0, size), spawn: spawn, max: size}
	q.wake.L = &q.mu
	q.mu.Lock() // trim reads trimmer under the lock
	q.trimmer = time.AfterFunc(idleTrim, q.trim)
	q.mu.Unlock()
	return q
}

// trim wakes the goroutines that were not needed since the last trim to
// return, and runs again after idleTrim until close. The goroutines it
// wakes count as woken: one that finds a task on its way takes it, as any
// woken goroutine does.
func (q *runq) trim() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	if n := min(q.idleMin, q.parked); n > 0 {
		q.parked -= n
		q.woken += n
		q.retire += n
		for range n {
			q.wake.Signal()
		}
	}
	q.idleMin = q.parked
	q.trimmer.Reset(idleTrim)
}

// put queues tasks and wakes a goroutine for them unless one is on its way.
func (q *runq) put(ts ...task) {
	q.mu.Lock()
	if q.head > 0 && len(q.tasks)+len(ts) > cap(q.tasks) {
		// Move the waiting tasks to the front rather than grow the array:
		// a queue that never quite empties would otherwise grow for ever.
		n := copy(q.tasks, q.tasks[q.head:])
		clear(q.tasks[n:])
		q.tasks, q.head = q.tasks[:n], 0
	}
	q.tasks = append(q.tasks, ts...)
	q.wakeLocked()
	q.mu.Unlock()
}

// wakeLocked wakes a parked goroutine, or starts one when none is parked,
// when tasks wait and no goroutine is on its way to take them. q.mu is
// held.
func (q *runq) wakeLocked() {
	if q.head == len(q.tasks) || q.woken > 0 {
		return
	}
	switch {
	case q.parked > 0:
		q.parked--
		q.idleMin = min(q.idleMin, q.parked)
		q.woken++
		q.wake.Signal()
	case q.live < q.max:
		q.live++
		q.woken++ // on its way: its first take counts it back
		q.spawn()
	}
}

// serve is the body of every goroutine spawn starts: it runs each task it
// takes with run, and returns once close was called and no task is left,
// or when trim tells it to.
func (q *runq) serve(run func(task)) {
	for fresh := true; ; fresh = false {
		t, ok := q.take(fresh)
		if !ok {
			return
		}
		run(t)
	}
}

// take returns the next task, waiting for one; false once close was called
// and no task is left, or when the goroutine is to return (see trim): it
// looks for a task first, so that a goroutine trim woke takes a task it
// finds, as put counted on. fresh says that the goroutine has just been
// started by spawn, and so counts in woken.
func (q *runq) take(fresh bool) (task, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	signalled := fresh
	for {
		if signalled {
			q.woken--
			signalled = false
		}
		if q.head < len(q.tasks) {
			t := q.tasks[q.head]
			q.tasks[q.head] = task{}
			if q.head++; q.head == len(q.tasks) { // all taken: start the array over
				q.tasks, q.head = q.tasks[:0], 0
			}
			q.wakeLocked() // for the tasks left, if any
			return t, true
		}
		if q.closed {
			return task{}, false
		}
		if q.retire > 0 { // not needed for a whole idleTrim: return
			q.retire--
			q.live--
			return task{}, false
		}
		q.parked++
		q.wake.Wait() // signal or close counted it from parked to woken
		signalled = true
	}
}

// close lets the goroutines return once the tasks queued are taken.
func (q *runq) close() {
	q.mu.Lock()
	q.trimmer.Stop()
	q.closed = true
	q.woken += q.parked // every parked goroutine is woken, and counts itself back
	q.parked = 0
	q.wake.Broadcast()
	q.mu.Unlock()
}

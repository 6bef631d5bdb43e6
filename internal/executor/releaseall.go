package executor

import "sync"

// ReleaseSends bounds the messages ReleaseAll releases at once on a
// standard queue, and so the waiting copies it sends at once: the worker
// releases up to a receive's ten, the Lambda adapter up to an event's
// records (10,000 at most), so that an event's copies are sent together
// without a goroutine and a connection per record.
const ReleaseSends = 32

// ReleaseAll releases n messages that were not run (see Release): those a
// runtime received while it stops, or did not reach before its deadline.
// at(i) gives the ith message's job and the executor and acker that settle
// it (the worker's are one executor and one acker; each Lambda record has
// its own).
//
// On a standard queue (fifo false) the messages are released concurrently,
// up to ReleaseSends at a time, each on a goroutine of its own, which
// ReleaseAll waits for: those on the last receive their redrive policy
// allows wait in fresh copies, whose sends then go together rather than one
// after another. An SQS slow to answer, or not answering, then holds the
// release up by about one send's bound (the runtime's CopyLimits,
// Job.MoveBy) per ReleaseSends messages, not one per message, and takes
// every copy by that bound, rather than the first few in turn, the rest
// visible again and moved to the dead-letter queue by SQS on their next
// receive though no handler failed.
//
// On a FIFO queue (fifo true) they are released in order, on the caller's
// goroutine: FIFO queues send no such copies, and a group's messages must
// not overtake one another. A message behind another of its group among
// them (the same queue and message group), or every message when behind is
// set (they are behind one of their group that is not done), is released
// through ReleaseBehind. A message without a group (of a standard queue,
// among FIFO ones) is a group of its own. behind applies on a FIFO queue
// only.
func ReleaseAll(n int, fifo, behind bool, at func(i int) (*Executor, *Job, Acker)) {
	if fifo {
		releaseInOrder(n, behind, at)
		return
	}
	if n == 1 {
		e, j, ack := at(0)
		e.Release(j, ack)
		return
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, ReleaseSends)
	for i := range n {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			e, j, ack := at(i)
			e.Release(j, ack)
		})
	}
	wg.Wait()
}

// releaseInOrder is ReleaseAll on a FIFO queue.
func releaseInOrder(n int, behind bool, at func(i int) (*Executor, *Job, Acker)) {
	type group struct{ queue, id string }
	var ahead map[group]bool // groups with a message released before
	for i := range n {
		e, j, ack := at(i)
		g := group{queue: j.Msg.QueueURL, id: j.Msg.GroupID}
		if g.id != "" && (behind || ahead[g]) {
			e.ReleaseBehind(j, ack)
			continue
		}
		e.Release(j, ack)
		if g.id != "" {
			if ahead == nil {
				ahead = map[group]bool{}
			}
			ahead[g] = true
		}
	}
}

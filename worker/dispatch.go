package worker

import (
	"context"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// dispatch starts the handlers of a received batch. Each message holds one
// handler slot until it is settled. Their handlers' contexts derive from
// hctx, which is cancelled at the shutdown deadline. probe is the circuit
// breaker's probe, one message, if it is one (else 0).
func (c *consumer) dispatch(hctx context.Context, msgs []types.Message, probe breaker.Probe) {
	now := time.Now()
	c.exec.Received(len(msgs))
	// One array for the batch's jobs and messages rather than allocations
	// per message. A message a handler keeps after it returns (which
	// sqsworker.Message forbids) keeps the whole array alive, and with it
	// the other messages' bodies and attributes; while any of the batch's
	// jobs runs, the array keeps them all alive anyway.
	rs := make([]received, len(msgs))
	for i := range msgs {
		r := &rs[i]
		sqsmsg.Fill(&r.msg, c.info.URL, &msgs[i])
		j := &r.job
		j.Msg, j.ReceivedAt, j.Ctx, j.Probe = &r.msg, now, hctx, probe
		switch {
		case c.ext != nil:
			j.Ctx, j.Lease = c.ext.Track(hctx, j.Msg, now)
		case c.vis > 0: // the lease, less the time to send the ack
			j.LeaseEnd = now.Add(c.vis)
			j.Deadline = j.LeaseEnd.Add(-c.margin)
		}
	}
	if c.pollCtx.Err() != nil { // received while stopping
		c.exec.Breaker.Abort(probe)
		if !c.info.FIFO {
			c.release(jobsOf(rs), false) // not before the last long polls end: see Retry
			return
		}
		c.dispatchStopping(rs)
		return
	}
	var buf [MaxMessagesPerReceive]task
	ts := buf[:0]
	if !c.info.FIFO {
		for i := range rs {
			ts = append(ts, task{job: &rs[i].job})
		}
	} else { // FIFO: each message group in order, groups in parallel
		for _, group := range groupByID(jobsOf(rs)) {
			ts = append(ts, task{group: group})
		}
	}
	c.tasks.put(ts...)
}

// dispatchStopping settles the FIFO messages of a receive that ended while
// the worker stops. A group with a message on the last receive its redrive
// policy allows runs, in order, within the shutdown deadline (see
// runGroup): released, that message would be moved to the dead-letter
// queue by SQS on its next receive, though no handler saw it, and a copy
// cannot wait in its place without going behind the rest of its group.
// The other groups are released, as on a standard queue.
func (c *consumer) dispatchStopping(rs []received) {
	var ts []task
	var rest []*executor.Job
	for _, group := range groupByID(jobsOf(rs)) {
		if !c.lastReceiveIn(group) {
			rest = append(rest, group...)
			continue
		}
		for _, j := range group {
			j.Probe = 0 // the probe was given back above
		}
		ts = append(ts, task{group: group})
	}
	if len(rest) > 0 {
		c.release(rest, false) // in order, from here (FIFO)
	}
	c.tasks.put(ts...)
}

// lastReceiveIn reports whether one of jobs is on the last receive its
// redrive policy allows.
func (c *consumer) lastReceiveIn(jobs []*executor.Job) bool {
	return slices.ContainsFunc(jobs, c.exec.OnLastReceive)
}

// received is a received message and its job, allocated together.
type received struct {
	job executor.Job
	msg sqsworker.Message
}

// jobsOf returns the jobs of rs.
func jobsOf(rs []received) []*executor.Job {
	jobs := make([]*executor.Job, len(rs))
	for i := range rs {
		jobs[i] = &rs[i].job
	}
	return jobs
}

// task is one message, or one FIFO group's messages, for a handler
// goroutine.
type task struct {
	job   *executor.Job
	group []*executor.Job
}

// serve is one of the up to Concurrency handler goroutines, started by the
// run queue when a message needs one: long-lived, so that a message costs
// no goroutine start nor stack growth. Every task holds at least one
// handler slot, so a task waits only while no goroutine is parked or on its
// way to take it, and then only until one is started. It returns once
// tasks is closed and drained, or once it stayed parked for a whole
// idleTrim (see runq).
func (c *consumer) serve() {
	c.tasks.serve(func(t task) {
		if t.job != nil {
			c.run(t.job)
		} else {
			c.runGroup(t.group)
		}
	})
}

// run settles one job and frees its handler slot. It reports whether the
// message is done.
func (c *consumer) run(j *executor.Job) bool {
	defer c.releaseSlots(1)
	return c.exec.Run(j, c)
}

// runGroup runs one FIFO group's messages in order. Once one of them is not
// done (it failed, or its lease was lost), the rest are released, so that
// none overtakes it. Once the worker stops, the rest are released too,
// unless one of them is on the last receive its redrive policy allows: the
// group then goes on until the shutdown deadline (see dispatchStopping).
func (c *consumer) runGroup(group []*executor.Job) {
	for i, j := range group {
		// Messages waiting behind others hold a lease that runs from the
		// receive. Without heartbeats, release them when half of it is
		// gone; with heartbeats, when it was lost.
		late := c.ext == nil && i > 0 && c.vis > 0 && time.Since(j.ReceivedAt) > c.vis/2
		if c.pollCtx.Err() != nil && !c.lastReceiveIn(group[i:]) {
			c.release(group[i:], false)
			return
		}
		// Nor does a group go on while the circuit breaker is open,
		// unless a message of it is on its last receive: released, it
		// would be dead-lettered; run, it waits in flight if its
		// dependency is still down (see executor.Executor.Run).
		if late || j.Ctx.Err() != nil || (i > 0 && c.exec.Breaker.State() != breaker.Closed && !c.lastReceiveIn(group[i:])) {
			c.release(group[i:], false)
			return
		}
		if !c.run(j) {
			c.release(group[i+1:], true)
			return
		}
	}
}

// groupByID splits FIFO jobs by message group, keeping their order.
func groupByID(jobs []*executor.Job) [][]*executor.Job {
	var groups [][]*executor.Job
	index := make(map[string]int, len(jobs))
	for _, j := range jobs {
		g, ok := index[j.Msg.GroupID]
		if !ok {
			g = len(groups)
			index[j.Msg.GroupID] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], j)
	}
	return groups
}

// release makes unhandled messages visible again and frees their handler
// slots: at once, or, while the worker stops, not before its last long
// polls have ended (see Retry). Messages whose lease was lost are left
// alone. On a standard queue they are released concurrently, so that the
// sends of the fresh copies that those on the last receive their redrive
// policy allows wait in go together, and an SQS that does not answer holds
// the stop up by one send's bound (CopyLimits), not one per message; on a
// FIFO queue in order, a message behind another of its group in jobs, or
// behind one not done (behind), released even when its time has not come.
// See executor.ReleaseAll.
func (c *consumer) release(jobs []*executor.Job, behind bool) {
	executor.ReleaseAll(len(jobs), c.info.FIFO, behind, func(i int) (*executor.Executor, *executor.Job, executor.Acker) {
		return c.exec, jobs[i], c
	})
	c.releaseSlots(len(jobs))
}

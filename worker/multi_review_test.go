package worker_test

// Review tests of the shared slot pool under faults: every run ends with
// every slot free, whatever its messages and receives went through.

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A MultiWorker over a standard queue, a FIFO queue and a rate-limited,
// starvation-guarded low queue, with handlers that fail, panic, hang past
// the shutdown deadline, postpone, and open the breaker, and receives that
// fail, ends Run with no slot held by any queue.
func TestFakeMultiSlotsFreeAfterChurn(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	crit := f.CreateQueue("crit", nil)
	fifo := f.CreateQueue("mid.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	low := f.CreateQueue("low", nil)
	for i := range 300 {
		f.Send(crit, "c")
		f.Send(low, "l")
		f.Send(fifo, "f", func(in *sqs.SendMessageInput) {
			g := string(rune('a' + i%5))
			in.MessageGroupId = &g
			id := string(rune('A'+i%26)) + string(rune('A'+i/26))
			in.MessageDeduplicationId = &id
		})
	}
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch rand.IntN(10) {
		case 0:
			panic("boom")
		case 1:
			return sqsworker.Unavailable(errors.New("down"))
		case 2:
			return errors.New("failed")
		case 3:
			return sqsworker.RetryAfter(time.Second, nil)
		case 4:
			<-ctx.Done() // held until the shutdown deadline
			return ctx.Err()
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		return nil
	})
	qc := queue(crit, 2, 2)
	qc.Breaker = sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 50 * time.Millisecond}
	qc.Backoff = noDelay
	qf := queue(fifo, 1, 1)
	qf.Backoff = noDelay
	qf.Breaker = sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 50 * time.Millisecond}
	// One slot reserved: handlers that hang until the shutdown deadline
	// hold their slots for good, and one FIFO group's messages hold theirs
	// behind its hung message. Without a reservation, the higher queues
	// could fill the pool in the low queue's first milliseconds, before its
	// wait made it starved, and keep it (with the critical queue's
	// reserved slot the only one free): the low queue never ran in one
	// run of ten under -race.
	ql := queue(low, 0, 1)
	ql.Backoff = noDelay
	ql.RateLimit = 200
	ql.MaxAge = 20 * time.Millisecond
	ql.Pollers = 2
	for _, q := range []*worker.QueueConfig{&qc, &qf, &ql} {
		q.ShutdownTimeout = 200 * time.Millisecond
		q.WaitTime = time.Second
	}
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 8, Queues: []worker.QueueConfig{qc, qf, ql}}, h)
	for range 10 {
		time.Sleep(50 * time.Millisecond)
		f.FailNext("ReceiveMessage", errors.New("connection reset"), 2)
	}
	r.stop(5 * time.Second)
	for _, s := range r.w.Stats() {
		if s.Slots != 0 {
			t.Errorf("queue %s holds %d slots after Run returned: %+v", s.QueueURL, s.Slots, s)
		}
		if s.PeakSlots == 0 {
			t.Errorf("queue %s never ran", s.QueueURL)
		}
	}
}

// After a burst of exactly one full receive on the critical queue, the
// critical queue's next receive long-polls an empty queue. Meanwhile the
// busy low queue goes on in the free slots of the pool: the critical queue
// holds back lower queues only while it may have messages, and a receive
// that waits in a long poll finds none.
func TestFakeMultiLowRunsWhileCriticalLongPollsEmpty(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	crit, low := f.CreateQueue("crit", nil), f.CreateQueue("low", nil)
	for range 2000 {
		f.Send(low, "l")
	}
	qc, ql := queue(crit, 1, 0), queue(low, 0, 0)
	qc.WaitTime, ql.WaitTime = 10*time.Second, 10*time.Second
	var lowDone, critDone atomic.Int64
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 20, Queues: []worker.QueueConfig{qc, ql}},
		sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			if m.Body == "c" {
				critDone.Add(1)
				return nil
			}
			time.Sleep(20 * time.Millisecond)
			lowDone.Add(1)
			return nil
		}))
	localtest.Eventually(t, 10*time.Second, func() bool { return lowDone.Load() > 50 }, "low queue never ran")
	// The critical queue's idle long poll returns at once on this burst:
	// one full receive of 10, then its next receive waits for 10 s.
	time.Sleep(200 * time.Millisecond) // the critical queue's first poll has been cut by the burst
	for range 10 {
		f.Send(crit, "c")
	}
	localtest.Eventually(t, 10*time.Second, func() bool { return critDone.Load() == 10 }, "critical burst not handled")
	time.Sleep(time.Second)
	before := lowDone.Load()
	time.Sleep(3 * time.Second)
	if n := lowDone.Load() - before; n == 0 {
		t.Errorf("low queue ran nothing for 3 s while the critical queue long-polled an empty queue: %+v", r.w.Stats())
	} else {
		t.Logf("low queue ran %d messages in 3 s", n)
	}
}

// With the critical queue empty, the low queue starts at once: the
// critical queue's first long poll, on slots it holds, does not keep the
// free rest of the pool from the low queue for a whole WaitTime.
func TestFakeMultiLowStartsBesideEmptyCriticalPoll(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	crit, low := f.CreateQueue("crit", nil), f.CreateQueue("low", nil)
	for range 5 {
		f.Send(low, "l")
	}
	first := make(chan time.Time, 5)
	qc, ql := queue(crit, 1, 0), queue(low, 0, 0)
	qc.WaitTime, ql.WaitTime = 10*time.Second, 10*time.Second
	start := time.Now()
	startMulti(t, f, worker.MultiConfig{Concurrency: 20, Queues: []worker.QueueConfig{qc, ql}},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { first <- time.Now(); return nil }))
	select {
	case at := <-first:
		t.Logf("low queue's first message ran %s after the start", at.Sub(start))
	case <-time.After(9 * time.Second):
		t.Errorf("low queue ran nothing while the empty critical queue long-polled on 10 of 20 slots")
	}
}

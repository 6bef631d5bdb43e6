package worker_test

// Review tests of the shared slot pool under faults: every run ends with
// every slot free, whatever its messages and receives went through.

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
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
	ql := queue(low, 0, 0)
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

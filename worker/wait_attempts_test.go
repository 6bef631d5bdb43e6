package worker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A job whose dependency is down on every receive its redrive policy allows
// (maxReceiveCount 4, the last one waiting in a fresh copy), then fails
// once for a reason of its own (a transient error) and then succeeds, on
// the local SQS: it is done, not dead-lettered. The copy counted the three
// receives spent waiting as attempts, so the job came out of the outage on
// its last attempt and the one failure dead-lettered it.
func TestOutageLeavesTheJobItsRetries(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 4})
	var mu sync.Mutex
	var attempts []int
	calls := 0
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch {
		case calls <= 4:
			return sqsworker.Unavailable(errors.New("the dependency is down"))
		case calls == 5:
			attempts = append(attempts, m.ReceiveCount)
			return errors.New("a transient failure of its own")
		}
		attempts = append(attempts, m.ReceiveCount)
		return nil
	})
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second,
		Backoff: sqsworker.ExponentialBackoff{Base: 100 * time.Millisecond, Cap: 500 * time.Millisecond},
		Breaker: sqsworker.BreakerConfig{Threshold: 100}}, h)
	localtest.Send(t, c, q.URL, "", "job")
	localtest.Eventually(t, 120*time.Second, func() bool {
		s := r.w.Stats()
		return s.Succeeded == 1 || s.DeadLettered > 0
	}, "the job neither succeeded nor was dead-lettered: %+v", r.w.Stats())
	s := r.w.Stats()
	if s.DeadLettered != 0 || s.Succeeded != 1 || s.Requeued != 1 {
		t.Errorf("stats %+v; want the job done after one copy, not dead-lettered", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 2 || attempts[0] != 3 || attempts[1] != 4 {
		t.Errorf("after the outage the job ran as attempts %v, want [3 4]", attempts)
	}
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("%d messages in the dead-letter queue, want none", v+fl+d)
	}
}

// A job whose endpoint is down (PartlyUnavailable: its key alone) for
// longer than the queue's retention period, on the local SQS with the
// shortest period SQS allows (60 s) and a redrive policy of 100 receives:
// before the last quarter of the period it waits in a fresh copy (a new
// message, its period anew), and is done once the endpoint is back. SQS
// deletes a message at the end of the period, received or not (the
// emulator does not; the fake, TestWaitOutlastsTheRetentionPeriod, does):
// the job waited by its visibility until then, and was lost.
func TestOutageLongerThanTheRetentionPeriod(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 100})
	if _, err := c.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: &q.URL,
		Attributes: map[string]string{"MessageRetentionPeriod": "60"}}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ids := map[string]bool{}
	var back atomic.Bool
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		ids[m.ID] = true
		mu.Unlock()
		if !back.Load() {
			return sqsworker.PartlyUnavailable(errors.New("its endpoint is down"))
		}
		return nil
	})
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second,
		Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: 2 * time.Second}}, h)
	localtest.Send(t, c, q.URL, "", "job")
	localtest.Eventually(t, 120*time.Second, func() bool { return r.w.Stats().Requeued > 0 },
		"no fresh copy before the end of the retention period: %+v", r.w.Stats())
	back.Store(true)
	localtest.Eventually(t, 60*time.Second, func() bool { return r.w.Stats().Succeeded == 1 }, "the job not done: %+v", r.w.Stats())
	localtest.Eventually(t, 60*time.Second, func() bool { v, fl, d := localtest.Depth(t, c, q.URL); return v+fl+d == 0 },
		"messages left in the queue: %+v", r.w.Stats())
	mu.Lock()
	defer mu.Unlock()
	if len(ids) < 2 {
		t.Errorf("the job ran as %d message(s), want its copy among them", len(ids))
	}
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("%d messages dead-lettered", v+fl+d)
	}
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

// Heartbeat settings for a 2s visibility timeout with room for a loaded
// machine: extend from 1.5s before the end, every 250ms.
var heartbeat2s = visibility.Config{Threshold: 1500 * time.Millisecond, Interval: 250 * time.Millisecond}

// With a 2s visibility timeout, 50 jobs of 10s on two competing workers run
// exactly once each: no redelivery.
func TestHeartbeatLongJobsRunOnce(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second})
	var mu sync.Mutex
	runs := map[string]int{}
	maxReceive := 0
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		mu.Lock()
		runs[m.Body]++
		maxReceive = max(maxReceive, m.ReceiveCount)
		mu.Unlock()
		select {
		case <-time.After(10 * time.Second):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	bodies := make([]string, 50)
	for i := range bodies {
		bodies[i] = fmt.Sprintf("job-%d", i)
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	a := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 25, Heartbeat: heartbeat2s}, h)
	b := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 25, Heartbeat: heartbeat2s}, h)
	localtest.Eventually(t, 90*time.Second, func() bool { return a.w.Stats().Deleted+b.w.Stats().Deleted == 50 }, "not all jobs done")
	emptyEventually(t, c, q.URL, 10*time.Second)
	mu.Lock()
	defer mu.Unlock()
	for _, body := range bodies {
		if runs[body] != 1 {
			t.Errorf("%s ran %d times", body, runs[body])
		}
	}
	if maxReceive != 1 {
		t.Errorf("a job was received %d times", maxReceive)
	}
	for _, r := range []*running{a, b} {
		if s := r.w.Stats(); s.Extensions == 0 || s.LeasesLost != 0 {
			t.Errorf("stats = %+v", s)
		}
	}
}

// 100 concurrent long jobs cost at most ten ChangeMessageVisibilityBatch calls
// a heartbeat round; a finished job is extended no more, and its delete
// meets no error.
func TestHeartbeatBatchesAndStops(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingSQS(t, &counter)
	// A dead-letter queue, so that the worker has nothing to warn of.
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 10})
	bodies := make([]string, 100)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 100, Heartbeat: heartbeat2s}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			time.Sleep(6 * time.Second)
			return nil
		}))
	localtest.Eventually(t, 60*time.Second, func() bool { return r.w.Stats().Deleted == 100 }, "not all jobs done")
	hs := r.w.HeartbeatStats()
	calls := counter.Get("ChangeMessageVisibilityBatch")
	if calls != int(hs.Calls) || hs.Rounds == 0 || hs.Calls > 10*hs.Rounds || hs.Calls > hs.Extended/10+hs.Rounds {
		t.Errorf("heartbeat %+v, %d calls seen: want at most ceil(100/10) calls a round", hs, calls)
	}
	t.Logf("heartbeat: %d extensions in %d calls over %d rounds", hs.Extended, hs.Calls, hs.Rounds)
	time.Sleep(3 * time.Second) // longer than a lease: nothing left to extend
	if after := counter.Get("ChangeMessageVisibilityBatch"); after != calls {
		t.Errorf("%d extension calls after every job finished", after-calls)
	}
	if s := r.w.Stats(); s.AckFailures != 0 || s.LeasesLost != 0 || hs.Lost != 0 {
		t.Errorf("stats = %+v, heartbeat %+v", s, hs)
	}
	if logs := r.logs.String(); strings.Contains(logs, "level=WARN") || strings.Contains(logs, "level=ERROR") {
		t.Errorf("warnings logged:\n%s", logs)
	}
}

// A lost lease cancels the handler's context with visibility.ErrLeaseLost,
// and the worker leaves the message to the consumer that now holds it.
func TestHeartbeatLostLeaseCancelsHandler(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 4 * time.Second})
	causes := make(chan error, 1)
	stolen := make(chan string, 1)
	// Concurrency 1: while the handler holds the only slot, the worker has
	// no receive under way, which would take the message made visible
	// below before the competitor does.
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 1}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			// Before the first beat, the message expires and another
			// consumer receives it: this receipt handle is dead.
			ctx2 := context.Background()
			if _, err := c.ChangeMessageVisibility(ctx2, &sqs.ChangeMessageVisibilityInput{QueueUrl: &q.URL, ReceiptHandle: &m.ReceiptHandle}); err != nil {
				return err
			}
			out, err := c.ReceiveMessage(ctx2, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, VisibilityTimeout: 120, WaitTimeSeconds: 5})
			if err != nil || len(out.Messages) != 1 {
				return fmt.Errorf("competitor received nothing: %v", err)
			}
			stolen <- aws.ToString(out.Messages[0].ReceiptHandle)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}))
	localtest.Send(t, c, q.URL, "", "contested")
	var cause error
	select {
	case cause = <-causes:
	case <-time.After(60 * time.Second):
		t.Fatal("handler context not cancelled after its lease was lost")
	}
	var invalid *types.ReceiptHandleIsInvalid
	if !errors.Is(cause, visibility.ErrLeaseLost) || !errors.As(cause, &invalid) {
		t.Errorf("cause = %v, want visibility.ErrLeaseLost wrapping ReceiptHandleIsInvalid", cause)
	}
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().LeasesLost == 1 }, "lost lease not counted")
	// The competitor still holds the message and can delete it.
	h := <-stolen
	if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: &h}); err != nil {
		t.Errorf("competitor's delete: %v", err)
	}
	if s := r.w.Stats(); s.Deleted != 0 || s.Retried != 0 || s.AckFailures != 0 {
		t.Errorf("the worker acknowledged a message it no longer held: %+v", s)
	}
	emptyEventually(t, c, q.URL, 10*time.Second)
}

// A queue without a dead-letter queue is warned of at start: a job that
// keeps failing there is retried until the queue's retention ends, and then
// lost.
func TestWarnsOfAQueueWithoutDeadLetterQueue(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	r := start(t, c, worker.Config{QueueURL: q.URL}, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	localtest.Eventually(t, time.Minute, func() bool { return strings.Contains(r.logs.String(), "the queue has no dead-letter queue") },
		"no warning of the queue without a dead-letter queue:\n%s", r.logs.String())
}

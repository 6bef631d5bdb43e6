package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

// extensionsViaProxy is a client whose visibility changes (the heartbeat's
// extensions) go through another client, one behind a fault proxy; its
// other calls go straight to SQS.
type extensionsViaProxy struct {
	worker.API
	via *sqs.Client
}

func (v extensionsViaProxy) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return v.via.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// A job whose handler succeeds once the worker has taken its lease for
// lost, on the last receive its redrive policy allows (1): the heartbeat's
// extensions reached SQS, which applied them, but their replies were lost,
// so the heartbeat found the lease run out (4s visibility timeout) while
// SQS still held the message. The job is done: its delete is sent all the
// same, lands, and nothing is dead-lettered or run again. Before, the
// message was left to SQS unacknowledged, and SQS moved it, on its next
// receive, to the dead-letter queue though its job was done. On the fake
// (in a synctest bubble) and on the emulator, whose extensions go through
// a fault proxy that loses their replies.
func TestSucceededPastItsLeaseDeleted(t *testing.T) {
	t.Parallel()
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			q := fakeRelQueueOf("succeeded", 4*time.Second, 1)
			api := &slowSQS{API: q.api}
			succeededPastItsLease(t, q, api, func() { api.armed.Store(true) }, func() { api.armed.Store(false) })
		})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		q := emuRelQueueOf(t, 4*time.Second, 1)
		proxy, via := proxiedSQS(t)
		succeededPastItsLease(t, q, extensionsViaProxy{API: q.api, via: via},
			func() {
				if err := proxy.LoseReplies(1000); err != nil {
					t.Error(err)
				}
			},
			func() {
				if err := proxy.Pass(); err != nil {
					t.Error(err)
				}
				if proxy.Stats().LostReplies == 0 {
					t.Error("no extension's reply was lost")
				}
			})
	})
}

// succeededPastItsLease runs the test above on q through api: lose makes
// the extensions' replies lost from then on, pass ends that.
func succeededPastItsLease(t *testing.T, q relQueue, api worker.API, lose, pass func()) {
	var calls, effects atomic.Int64
	returned := make(chan error, 1)
	r := start(t, api, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true},
		sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			if calls.Add(1) > 1 {
				effects.Add(1)
				return nil
			}
			lose()
			<-ctx.Done() // the lease looks lost; the job's work is done all the same
			effects.Add(1)
			pass()
			returned <- context.Cause(ctx)
			return nil
		}))
	q.send(t, "job")
	select {
	case cause := <-returned:
		if !errors.Is(cause, visibility.ErrLeaseLost) {
			t.Fatalf("the handler's context ended with %v, want a lost lease", cause)
		}
	case <-time.After(time.Minute):
		t.Fatal("the lease was not taken for lost")
	}
	localtest.Eventually(t, time.Minute, func() bool { return q.count(q.url) == 0 || q.count(q.dlq) > 0 },
		"the message neither deleted nor dead-lettered")
	// Past any extension SQS applied: a message not deleted would come
	// back, and the worker's receives would have it dead-lettered.
	time.Sleep(6 * time.Second)
	r.stop(20 * time.Second)
	if n := q.count(q.dlq); n != 0 {
		t.Errorf("%d messages dead-lettered, want none: the job was done", n)
	}
	if n := q.count(q.url); n != 0 {
		t.Errorf("%d messages left in the queue, want none", n)
	}
	if c, e := calls.Load(), effects.Load(); c != 1 || e != 1 {
		t.Errorf("the handler was called %d times, the effect applied %d times; want once each", c, e)
	}
	if s := r.w.Stats(); s.Succeeded != 1 || s.LeasesLost != 1 || s.Deleted != 1 || s.AckFailures != 0 {
		t.Errorf("stats %+v: want one success, its lease taken for lost, its delete landed", s)
	}
}

package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/worker"
)

// The sends of a waiting copy that fail before one goes through, in the
// test below: its eighth send is the first SQS takes.
const refusedCopySends = 7

// A job postponed (RetryAfter with a nil error) on the last receive its
// redrive policy allows (1) waits in a fresh copy, whose sends SQS refuses
// seven times; the worker sends it again while it holds the message, until
// a second before its lease ends. The worker batches its deletes for 4s
// (AckInterval), has no heartbeat, and the queue's visibility timeout is
// 12s. The original's delete goes at once once its copy is sent, not after
// its batch's 4s: it lands, nothing is dead-lettered, and the job runs
// once, on its copy. Before, it waited for its batch: the eighth send,
// spread out by the backoff, went through over 8s into the lease (seven
// sends fit in the first 8s whatever the jitter draws), the delete, 4s
// later, was dropped as the lease had ended, and SQS moved the original,
// back on its last receive, to the dead-letter queue, though no handler
// failed, while its copy ran the job. The fault is a count of sends, not a
// time, as the backoff's jitter moves the sends. On the fake (in a synctest
// bubble, sends refused at once), and on the emulator with three sends
// refused. With the heartbeat on (on the fake), which holds the original
// until its delete lands, the job is not dead-lettered either.
func TestCopyRetriesLeaveTimeForABatchedDelete(t *testing.T) {
	t.Parallel()
	for _, heartbeat := range []bool{false, true} {
		t.Run(fmt.Sprintf("fake/heartbeat=%v", heartbeat), func(t *testing.T) {
			t.Parallel()
			bubble.Test(t, func(t *testing.T) {
				copyRetriesLeaveTimeForABatchedDelete(t, fakeRelQueueOf("reserve", 12*time.Second, 1), heartbeat, refusedCopySends)
			})
		})
	}
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		q := emuRelQueueOf(t, 12*time.Second, 1)
		// Three refused sends, not seven: the count that shows the
		// defect leaves the retries about 0.3s to spare in real time,
		// which a loaded machine's late timers could take. The fake,
		// whose clock is the bubble's, shows it; here the copy and the
		// original's batched delete are checked against SQS.
		copyRetriesLeaveTimeForABatchedDelete(t, q, false, 3)
	})
}

func copyRetriesLeaveTimeForABatchedDelete(t *testing.T, q relQueue, heartbeat bool, refused int64) {
	api := &hungSends{API: q.api}
	api.hang = func(ctx context.Context, in *sqs.SendMessageInput) error {
		if api.sends.Load() <= refused {
			return errors.New("dial tcp: connection refused")
		}
		_, err := q.api.SendMessage(ctx, in)
		return err
	}
	r := postponeOnceOnLastReceive(t, api, q, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true, DisableHeartbeat: !heartbeat,
		AckInterval: 4 * time.Second}, &api.armed)
	if s := r.w.Stats(); s.Requeued != 1 || s.RequeueFailures != 0 || s.AckFailures != 0 || api.sends.Load() != refused+1 {
		t.Errorf("stats %+v, %d sends of the copy: want the copy sent on its %dth send, no acknowledgement failed", s, api.sends.Load(), refused+1)
	}
}

// postponeOnceOnLastReceive runs a worker with cfg on api, whose handler
// postpones q's one job (RetryAfter with a nil error) on its first call,
// arming the test's fault then, and does it on the next, disarming it. Once
// the job is done and the queue empty, or something is dead-lettered, it
// stops the worker and checks that nothing was dead-lettered nor left, and
// that the job ran once, on its copy. It returns the stopped worker.
func postponeOnceOnLastReceive(t *testing.T, api worker.API, q relQueue, cfg worker.Config, armed interface{ Store(bool) }) *running {
	t.Helper()
	var calls, done atomic.Int64
	r := start(t, api, cfg, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		if calls.Add(1) == 1 {
			armed.Store(true)
			return sqsworker.RetryAfter(time.Second, nil)
		}
		armed.Store(false)
		done.Add(1)
		return nil
	}))
	q.send(t, "job")
	deadline := time.Now().Add(2 * time.Minute)
	for !(done.Load() >= 1 && q.count(q.url) == 0 || q.count(q.dlq) > 0) {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not run to its end (%d calls)", calls.Load())
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.stop(20 * time.Second)
	if n := q.count(q.dlq); n != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed on the last receive", n)
	}
	if n := q.count(q.url); n != 0 {
		t.Errorf("%d messages left in the queue, want none", n)
	}
	if c, d := calls.Load(), done.Load(); c != 2 || d != 1 {
		t.Errorf("the handler was called %d times, the job done %d times; want called twice, done once (on its copy)", c, d)
	}
	return r
}

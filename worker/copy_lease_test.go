package worker_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/worker"
)

// slowSQS is an SQS whose replies to the heartbeat's extensions are lost
// once armed (SQS applied them; the worker sees the call fail, as a call
// given up on its timeout), and whose sends take hang.
type slowSQS struct {
	worker.API
	armed atomic.Bool
	hang  time.Duration
}

func (s *slowSQS) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if s.armed.Load() {
		t := time.NewTimer(s.hang)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.API.SendMessage(ctx, in, opts...)
}

func (s *slowSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := s.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
	if err == nil && s.armed.Load() {
		return nil, errors.New("read tcp: i/o timeout (the reply was lost)")
	}
	return out, err
}

// A job postponed on the last receive its redrive policy allows (1) waits
// in a fresh copy, whose send takes 5s (a loaded SQS); meanwhile the
// heartbeat's extensions reach SQS, which applies them, but their replies
// are lost: the worker takes the lease of a 4s visibility timeout for run
// out, while SQS still holds the message. The copy sent, the original's
// delete is sent all the same: it lands, nothing is dead-lettered, and the
// job runs once, on its copy. Before, the delete was dropped unsent
// ("receipt handle expired": AckFailures 1), and SQS moved the original,
// back on its next receive, to the dead-letter queue while its copy ran the
// job. On the fake (in a synctest bubble) and on the emulator.
func TestCopiedOriginalDeletedPastItsLease(t *testing.T) {
	t.Parallel()
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			copiedOriginalDeletedPastItsLease(t, fakeRelQueueOf("pastlease", 4*time.Second, 1))
		})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		copiedOriginalDeletedPastItsLease(t, emuRelQueueOf(t, 4*time.Second, 1))
	})
}

func copiedOriginalDeletedPastItsLease(t *testing.T, q relQueue) {
	api := &slowSQS{API: q.api, hang: 5 * time.Second}
	r := postponeOnceOnLastReceive(t, api, q, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true}, &api.armed)
	if s := r.w.Stats(); s.Requeued != 1 || s.AckFailures != 0 {
		t.Errorf("stats %+v: want one copy sent, no acknowledgement failed", s)
	}
}

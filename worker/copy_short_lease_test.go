package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/worker"
)

// A standard queue, on the emulator, whose visibility timeout is short (2s,
// 3s): the heartbeat extends a lease when half of it is left (1s, 1.5s),
// about when the waiting copy's retries would stop for the original's
// delete (a second before the lease ends). A job postponed (RetryAfter
// with a nil error) on the last receive its redrive policy allows (1)
// waits in a fresh copy, whose sends SQS refuses (through a fault proxy)
// for 8s, longer than the visibility timeout: the worker must send it
// again while the heartbeat holds the original, not give up at the lease
// as it stands before the heartbeat's first extension, which releases the
// original, and SQS moves it to the dead-letter queue on its next receive
// though no handler failed. Once SQS takes sends, the copy is sent, the
// original deleted, and the job runs once, on its copy.
func TestEmulatorCopyRetriesOutlastAShortVisibilityTimeout(t *testing.T) {
	t.Parallel()
	for _, vis := range []time.Duration{2 * time.Second, 3 * time.Second} {
		t.Run(fmt.Sprint(vis), func(t *testing.T) {
			t.Parallel()
			q := emuRelQueueOf(t, vis, 1)
			api, proxy := sendsThroughProxy(t, q)
			if err := proxy.Refuse(); err != nil {
				t.Fatal(err)
			}
			var back atomic.Pointer[time.Timer]
			t.Cleanup(func() {
				if b := back.Load(); b != nil {
					b.Stop()
				}
			})
			armed := &armOutage{armed: &api.armed, arm: func() {
				back.Store(time.AfterFunc(8*time.Second, func() {
					if err := proxy.Pass(); err != nil {
						t.Error(err)
					}
				}))
			}}
			r := postponeOnceOnLastReceive(t, api, q, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true}, armed)
			if s := r.w.Stats(); s.Requeued != 1 || s.RequeueFailures != 0 || api.sends.Load() < 2 {
				t.Errorf("stats %+v, %d sends of the copy: want it sent again until SQS took it, none given up", s, api.sends.Load())
			}
		})
	}
}

// armOutage is a switch for postponeOnceOnLastReceive that also starts an
// outage's clock when first armed.
type armOutage struct {
	armed *atomic.Bool
	arm   func()
	once  atomic.Bool
}

func (a *armOutage) Store(v bool) {
	if v && !a.once.Swap(true) {
		a.arm()
	}
	a.armed.Store(v)
}

// The same on the fake, in a synctest bubble, SQS refusing every send of
// the copy: the worker goes on sending it while the heartbeat holds the
// message, past many extensions of a 2s visibility timeout (here 30s),
// logging the failure once, not at every send, and nothing is given up or
// dead-lettered meanwhile, the sends spaced by their backoff, not cut
// short at every end of the lease as it stands. Shutdown ends the retries within the stop's
// bound on copies (5s), its deadline a minute away: the message is then
// released by its visibility, given up once, not dead-lettered by the
// worker. Before, the copy was given up at the lease as it stood, some
// 1.6s in, before the heartbeat's first extension.
func TestCopyRetriesHeldByTheHeartbeatEndAtTheStop(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		q := fakeRelQueueOf("held", 2*time.Second, 1)
		api := &hungSends{API: q.api, hang: func(context.Context, *sqs.SendMessageInput) error {
			return errors.New("dial tcp: connection refused")
		}}
		var calls atomic.Int64
		r := start(t, api, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true},
			sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
				calls.Add(1)
				api.armed.Store(true)
				return sqsworker.RetryAfter(time.Second, nil)
			}))
		q.send(t, "job")
		time.Sleep(30 * time.Second)
		s := r.w.Stats()
		t.Logf("after 30s: %d sends, %d extensions", api.sends.Load(), r.w.HeartbeatStats().Extended)
		if s.RequeueFailures != 0 || api.sends.Load() < 5 || q.count(q.dlq) != 0 {
			t.Errorf("after 30s: stats %+v, %d sends, %d dead-lettered: want the copy still sent again, nothing given up nor dead-lettered",
				s, api.sends.Load(), q.count(q.dlq))
		}
		if n := api.sends.Load(); n > 20 {
			t.Errorf("%d sends in 30s, want them spaced by the backoff (up to 5s), not by the lease's end", n)
		}
		if n := r.w.HeartbeatStats().Extended; n < 10 {
			t.Errorf("%d extensions in 30s, want the heartbeat holding the message", n)
		}
		if n := strings.Count(r.logs.String(), "sending the waiting copy of a message on its last receive failed"); n != 1 {
			t.Errorf("the failed sends logged %d times, want once", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		if err := r.w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		took := time.Since(begin)
		t.Logf("stopped %s after Shutdown", took)
		if took > 6500*time.Millisecond {
			t.Errorf("the stop took %s, want within some 5s: the copy's retries held it up", took)
		}
		r.stop(10 * time.Second)
		if s := r.w.Stats(); s.Requeued != 0 || s.RequeueFailures != 1 || s.DeadLettered != 0 || calls.Load() != 1 {
			t.Errorf("stats %+v, %d calls: want the copy given up once at the stop, the job run once, nothing dead-lettered", s, calls.Load())
		}
		if n, d := q.count(q.url), q.count(q.dlq); n != 1 || d != 0 {
			t.Errorf("%d messages in the queue, %d dead-lettered; want the job in the queue", n, d)
		}
	})
}

package worker_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
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
			localtest.Require(t)
			c := localtest.NewSQS(t)
			eq := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 1, VisibilityTimeout: vis})
			q := relQueue{api: c, url: eq.URL, dlq: eq.DLQURL,
				count: func(url string) int { v, fl, d := localtest.Depth(t, c, url); return v + fl + d }}
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

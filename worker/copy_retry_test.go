package worker_test

// The waiting copy of a message postponed or released without an attempt on
// the last receive its redrive policy allows, when its send fails for a
// while (SQS refusing connections, or swallowing requests, for some
// seconds; replies lost): the worker tries it again while it holds the
// message, so that the job is not dead-lettered though no handler failed.
// On the emulator, the worker's SQS client going through a fault proxy.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/internal/idemtest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// lastReceiveOutage is a handler whose first attempt fails and whose second,
// on the last receive of a redrive policy allowing 2, makes SQS unreachable
// through proxy (fault) for outage and returns Unavailable (a dependency
// down): that attempt is not counted, and its message waits in a fresh
// copy. Its third call succeeds.
type lastReceiveOutage struct {
	t      *testing.T
	proxy  *faultproxy.Proxy
	fault  func(*faultproxy.Proxy) error
	outage time.Duration

	calls, done atomic.Int64
	mu          sync.Mutex
	attempts    []int
	back        *time.Timer // ends the outage; stopped when the test ends
}

func (h *lastReceiveOutage) Handle(_ context.Context, m *sqsworker.Message) error {
	n := h.calls.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts = append(h.attempts, m.ReceiveCount)
	switch n {
	case 1:
		return errors.New("the first attempt fails")
	case 2:
		if err := h.fault(h.proxy); err != nil {
			h.t.Error(err)
		}
		h.back = time.AfterFunc(h.outage, func() {
			if err := h.proxy.Pass(); err != nil {
				h.t.Error(err)
			}
		})
		return sqsworker.Unavailable(errors.New("the dependency is down"))
	}
	h.done.Add(1)
	return nil
}

func (h *lastReceiveOutage) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.back != nil {
		h.back.Stop()
	}
}

// A job whose dependency is down (Unavailable) on the last receive its
// redrive policy allows (2) waits in a fresh copy; SQS is unreachable from
// then on, refusing connections for 6s (longer than the SDK's own retries
// take), or swallowing requests for 35s (longer than a send's own bound,
// 30s), so that the copy's send fails. The worker tries it again, with
// backoff, while it holds the message (its visibility timeout is 60s): once
// SQS answers, the copy is sent and the original deleted, and the job runs
// once more (as attempt 2: the Unavailable one is not counted) and is
// done, never dead-lettered. With the heartbeat on and off. Before, the
// copy was given up after one send, the message released by its
// visibility, and SQS moved it to the dead-letter queue on its next
// receive though no handler failed there.
func TestEmulatorLastReceiveCopyOutlastsAnOutage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		fault  func(*faultproxy.Proxy) error
		outage time.Duration
	}{
		{"refuse", (*faultproxy.Proxy).Refuse, 6 * time.Second},
		{"blackhole", (*faultproxy.Proxy).Blackhole, 35 * time.Second},
	} {
		for _, heartbeat := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/heartbeat=%v", tc.name, heartbeat), func(t *testing.T) {
				t.Parallel()
				q := emuRelQueueOf(t, time.Minute, 2)
				proxy, via := proxiedSQS(t)
				h := &lastReceiveOutage{t: t, proxy: proxy, fault: tc.fault, outage: tc.outage}
				t.Cleanup(h.stop)
				q.send(t, "job")
				r := start(t, via, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true, Backoff: oneSecond,
					DisableHeartbeat: !heartbeat}, sqsworker.HandlerFunc(h.Handle))
				localtest.Eventually(t, 3*time.Minute, func() bool {
					return h.done.Load() >= 1 && q.count(q.url) == 0 || q.count(q.dlq) > 0
				}, "the job did not run to its end (%d calls)", h.calls.Load())
				r.stop(20 * time.Second)
				if n := q.count(q.dlq); n != 0 {
					t.Fatalf("%d messages dead-lettered, want none: no handler failed on the last receive", n)
				}
				h.mu.Lock()
				defer h.mu.Unlock()
				if n := h.done.Load(); n != 1 || len(h.attempts) != 3 || h.attempts[2] != 2 {
					t.Errorf("the job was done %d times, its calls as attempts %v; want done once, on its third call, as attempt 2", n, h.attempts)
				}
				if s := r.w.Stats(); s.Requeued != 1 || s.RequeueFailures != 0 {
					t.Errorf("stats %+v: want the copy sent, none given up", s)
				}
			})
		}
	}
}

// viaProxy is a client whose SendMessage calls go through another client
// (one behind a fault proxy); its other calls go straight to SQS.
type viaProxy struct {
	worker.API
	via *sqs.Client
}

func (v viaProxy) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return v.via.SendMessage(ctx, in, opts...)
}

// A job whose dependency is down on its last receive (as above) waits in a
// fresh copy whose sends SQS carries out but whose replies are lost, more
// often than the SDK tries a request (3 times): the worker sends it again
// until a reply comes, and the job waits in several copies, its original
// deleted. The copies carry the job's key, so that the idempotency
// middleware, on DynamoDB Local, applies its effect once; none is
// dead-lettered. Before, the copy was given up after the SDK's retries, the
// original released by its visibility and moved by SQS to the dead-letter
// queue on its next receive.
func TestEmulatorLastReceiveCopyLostReplies(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	q := emuRelQueue(t)
	proxy, via := proxiedSQS(t)
	db := localtest.NewDynamoDB(t)
	store := idemtest.NewStore(t, db, idempotency.StoreConfig{})
	guard, err := idempotency.New(store, idempotency.Config{ClaimGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const lost = 4
	var calls, effects atomic.Int64
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		switch calls.Add(1) {
		case 1:
			return errors.New("the first attempt fails")
		case 2:
			if err := proxy.LoseReplies(lost); err != nil {
				t.Error(err)
			}
			return sqsworker.Unavailable(errors.New("the dependency is down"))
		}
		effects.Add(1)
		return nil
	}), guard.Middleware)
	q.send(t, "job")
	r := start(t, viaProxy{API: q.api, via: via}, worker.Config{QueueURL: q.url, Concurrency: 4, WaitTime: time.Second,
		DisableDepth: true, Backoff: oneSecond}, h)
	localtest.Eventually(t, 2*time.Minute, func() bool {
		return effects.Load() >= 1 && q.count(q.url) == 0 || q.count(q.dlq) > 0
	}, "the job did not run to its end (%d calls)", calls.Load())
	time.Sleep(2 * time.Second) // a copy more would show now
	r.stop(20 * time.Second)
	if n := q.count(q.dlq); n != 0 {
		t.Errorf("%d messages dead-lettered, want none", n)
	}
	if n := q.count(q.url); n != 0 {
		t.Errorf("%d messages left in the queue, want none", n)
	}
	if n := effects.Load(); n != 1 {
		t.Errorf("the job's effect applied %d times, want once", n)
	}
	if l := proxy.Stats().LostReplies; l != lost {
		t.Errorf("%d replies lost, want %d", l, lost)
	}
	if s := r.w.Stats(); s.Requeued != 1 || s.RequeueFailures != 0 {
		t.Errorf("stats %+v: want the copy sent, none given up", s)
	}
}

// Ten messages that the stopping worker's last long poll takes, each on
// the last receive its redrive policy allows, are released in fresh copies
// whose sends SQS refuses: each copy is sent again, with backoff, until
// the stop's bound (5s), and then given up, the message released by its
// visibility, as before (none lost, none dead-lettered by the worker). The
// stop ends within its bound. Before, each copy was sent once. On the fake
// (in a synctest bubble) and on the emulator, whose sends go through a
// fault proxy that refuses connections. For sends that hang, see
// TestStoppingCopiesShareOneBound.
func TestStoppingCopiesRefusedEndAtTheBound(t *testing.T) {
	t.Parallel()
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			q := fakeRelQueue(t, "stopping-refused")
			api := &hungSends{API: q.api, hang: func(context.Context, *sqs.SendMessageInput) error {
				return errors.New("dial tcp: connection refused")
			}}
			refusedCopiesWhileStopping(t, q, api, 10*time.Second)
		})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		q := emuRelQueue(t)
		api, proxy := sendsThroughProxy(t, q)
		if err := proxy.Refuse(); err != nil {
			t.Fatal(err)
		}
		refusedCopiesWhileStopping(t, q, api, 25*time.Second)
	})
}

// refusedCopiesWhileStopping runs the test above on q through api: the
// stop must end within within of the messages' release to the last poll.
func refusedCopiesWhileStopping(t *testing.T, q relQueue, api *hungSends, within time.Duration) {
	took, s := stopWithCopies(t, q, api, true)
	if took > within {
		t.Errorf("the stop took %s, want within %s: the retries of the copies' sends end at the stop's bound", took.Round(time.Millisecond), within)
	}
	if s.Requeued != 0 || s.RequeueFailures != copies || api.sends.Load() < 2*copies {
		t.Errorf("stats %+v, %d sends: want each copy sent again, then given up", s, api.sends.Load())
	}
	if got := q.count(q.url); got != copies {
		t.Errorf("%d messages in the queue after the stop, want %d", got, copies)
	}
}

// A worker told to stop while it sends the waiting copy of a message on
// its last receive (its dependency down), SQS swallowing the copy's sends
// (through a fault proxy), stops within its bound: the shutdown deadline
// (1s), then ackFlushGrace (5s) for the send under way. The message is not
// lost. Before, the send, started before the stop, hung for its whole
// bound (30s), which the stop waited for.
func TestEmulatorStopWhileCopySendHangs(t *testing.T) {
	t.Parallel()
	q := emuRelQueue(t)
	api, proxy := sendsThroughProxy(t, q)
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	sent := make(chan struct{})
	var calls atomic.Int64
	r := start(t, api, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true, Backoff: oneSecond},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
			if calls.Add(1) == 1 {
				return errors.New("the first attempt fails")
			}
			api.armed.Store(true)
			close(sent)
			return sqsworker.Unavailable(errors.New("the dependency is down"))
		}))
	q.send(t, "job")
	select {
	case <-sent:
	case <-time.After(time.Minute):
		t.Fatal("the last receive's attempt did not run")
	}
	time.Sleep(time.Second) // the copy's send under way, hanging
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	begin := time.Now()
	go func() { _ = r.w.Shutdown(ctx) }()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup's stop
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return")
	}
	took := time.Since(begin)
	t.Logf("Run returned %s after Shutdown", took.Round(time.Millisecond))
	if took > 20*time.Second {
		t.Errorf("Run returned %s after Shutdown, want within some 6s: the copy's send held the stop up", took.Round(time.Millisecond))
	}
	if s := r.w.Stats(); s.Requeued != 0 || s.RequeueFailures != 1 || api.sends.Load() != 1 {
		t.Errorf("stats %+v, %d sends: want the copy's one send cut at the stop's bound, and given up", s, api.sends.Load())
	}
	if n := q.count(q.url) + q.count(q.dlq); n != 1 {
		t.Errorf("%d messages in the queue and its dead-letter queue, want the job", n)
	}
}

// A worker told to stop while the waiting copy of a message on its last
// receive (its dependency down) waits to be sent again, SQS refusing its
// sends, stops within the bound its stop gives the copy's sends
// (ackFlushGrace, 5s), its shutdown deadline a minute away: the wait
// between two sends wakes when the stop begins. The message is released
// by its visibility, not lost nor dead-lettered. Before, the wait ran to
// its end (up to 5s), and only then was the stop's bound read: the stop
// took the rest of the wait and 5s more. On the fake, in a synctest bubble,
// the stop beginning some 5 sends in, while a wait of 2.5s to 5s is under
// way.
func TestStoppingWakesTheCopyRetryWait(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		q := fakeRelQueue(t, "stopping-wakes-copy-wait")
		api := &hungSends{API: q.api, hang: func(context.Context, *sqs.SendMessageInput) error {
			return errors.New("dial tcp: connection refused")
		}}
		var calls atomic.Int64
		r := start(t, api, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true, Backoff: oneSecond},
			sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
				if calls.Add(1) == 1 {
					return errors.New("the first attempt fails")
				}
				api.armed.Store(true)
				return sqsworker.Unavailable(errors.New("the dependency is down"))
			}))
		q.send(t, "job")
		for api.sends.Load() < 6 {
			if calls.Load() > 2 {
				t.Fatalf("the job ran %d times", calls.Load())
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The sixth send failed: the seventh waits 2.5s to 5s.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		begin := time.Now()
		if err := r.w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		took := time.Since(begin)
		t.Logf("stopped %s after Shutdown", took)
		if took > 6500*time.Millisecond {
			t.Errorf("the stop took %s, want within some 5s: the copy's wait between sends did not wake when the stop began", took)
		}
		r.stop(10 * time.Second)
		if s := r.w.Stats(); s.Requeued != 0 || s.RequeueFailures != 1 || s.DeadLettered != 0 {
			t.Errorf("stats %+v: want the copy given up once, nothing dead-lettered", s)
		}
		if n, d := q.count(q.url), q.count(q.dlq); n != 1 || d != 0 {
			t.Errorf("%d messages in the queue, %d dead-lettered; want the job in the queue", n, d)
		}
	})
}

package worker_test

// Unit tests of the MultiWorker against sqstest.Fake: configuration errors,
// handlers per queue, priority order, shutdown.

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// runningMulti is a MultiWorker running in the background of a test.
type runningMulti struct {
	t    *testing.T
	w    *worker.MultiWorker
	done chan error
	logs *syncBuffer
}

// startMulti runs a MultiWorker on api with cfg and h until the test ends,
// after calling each of before on it. Queues without a WaitTime long-poll
// for 1s.
func startMulti(t *testing.T, api worker.API, cfg worker.MultiConfig, h sqsworker.Handler, before ...func(*worker.MultiWorker)) *runningMulti {
	t.Helper()
	logs := &syncBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	for i := range cfg.Queues {
		if cfg.Queues[i].WaitTime == 0 {
			cfg.Queues[i].WaitTime = time.Second
		}
	}
	w, err := worker.NewMulti(api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(w)
	}
	r := &runningMulti{t: t, w: w, done: make(chan error, 1), logs: logs}
	go func() { r.done <- w.Run(context.Background(), h) }()
	t.Cleanup(func() {
		r.stop(10 * time.Second)
		if t.Failed() {
			t.Logf("worker logs:\n%s", logs.String())
		}
	})
	return r
}

// stop shuts the worker down within d and checks that Run returned nil.
func (r *runningMulti) stop(d time.Duration) {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	select {
	case err := <-r.done:
		if err != nil {
			r.t.Errorf("Run returned %v", err)
		}
		r.done <- nil // stop is idempotent
	case <-time.After(d + 10*time.Second):
		r.t.Fatal("Run did not return after Shutdown")
	}
}

func queue(url string, priority, reserved int) worker.QueueConfig {
	return worker.QueueConfig{Config: worker.Config{QueueURL: url}, Priority: priority, Reserved: reserved}
}

// Bad configurations are refused with one error naming every problem and
// its fix.
func TestMultiConfigErrors(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	a, b := sqstest.QueueURL("a"), sqstest.QueueURL("b")
	for name, tc := range map[string]struct {
		cfg  worker.MultiConfig
		want []string
	}{
		"no queues":         {worker.MultiConfig{}, []string{"Queues is empty"}},
		"duplicate":         {worker.MultiConfig{Queues: []worker.QueueConfig{queue(a, 1, 0), queue(a, 0, 0)}}, []string{"Queues[1]", "listed twice (also Queues[0])", "list each queue once"}},
		"reserved > max":    {worker.MultiConfig{Concurrency: 10, Queues: []worker.QueueConfig{{Config: worker.Config{QueueURL: a, Concurrency: 2}, Reserved: 3}}}, []string{"Reserved 3 is above the queue's Concurrency 2", "raise Concurrency or lower Reserved"}},
		"reserved > pool":   {worker.MultiConfig{Concurrency: 5, Queues: []worker.QueueConfig{queue(a, 1, 4), queue(b, 0, 3)}}, []string{"reserve 7 slots in all but the pool has 5", "raise Concurrency or lower the reservations"}},
		"pool all reserved": {worker.MultiConfig{Concurrency: 4, Queues: []worker.QueueConfig{queue(a, 1, 4), queue(b, 0, 0)}}, []string{"Queues[1]", "would never run"}},
		"bad priority":      {worker.MultiConfig{Queues: []worker.QueueConfig{queue(a, -1, 0)}}, []string{"Priority -1 is negative"}},
		"max above pool":    {worker.MultiConfig{Concurrency: 4, Queues: []worker.QueueConfig{{Config: worker.Config{QueueURL: a, Concurrency: 9}}}}, []string{"Concurrency 9 is above the pool's 4"}},
		"share without age": {worker.MultiConfig{Queues: []worker.QueueConfig{{Config: worker.Config{QueueURL: a}, StarvationShare: 2}}}, []string{"StarvationShare 2 does nothing without MaxAge"}},
		"queue config":      {worker.MultiConfig{Queues: []worker.QueueConfig{{Config: worker.Config{QueueURL: a, WaitTime: time.Minute}}}}, []string{"Queues[0] (" + a + "): WaitTime 1m0s"}},
		"rates":             {worker.MultiConfig{RateLimit: -1, Queues: []worker.QueueConfig{{Config: worker.Config{QueueURL: a, RateLimit: -2}}}}, []string{"RateLimit -1", "RateLimit -2"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := worker.NewMulti(f, tc.cfg)
			if err == nil {
				t.Fatal("NewMulti accepted the configuration")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// Every queue is drained; a queue with its own handler uses it, the others
// share Run's, which tells them apart by Message.QueueURL.
func TestFakeMultiHandlers(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	a, b, c := f.CreateQueue("a", nil), f.CreateQueue("b", nil), f.CreateQueue("c", nil)
	var mu sync.Mutex
	seen := map[string]int{}
	shared := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.QueueURL+" "+m.Body[:1]]++
		return nil
	})
	var own atomic.Int64
	qc := queue(c, 0, 0)
	qc.Handler = sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { own.Add(1); return nil })
	for range 30 {
		f.Send(a, "a")
		f.Send(b, "b")
		f.Send(c, "c")
	}
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 4, Queues: []worker.QueueConfig{queue(a, 2, 1), queue(b, 1, 0), qc}}, shared)
	localtest.Eventually(t, 10*time.Second, func() bool {
		n := int64(0)
		for _, s := range r.w.Stats() {
			n += s.Deleted
		}
		return n == 90
	}, "not every message was deleted: %+v", r.w.Stats())
	mu.Lock()
	defer mu.Unlock()
	if seen[a+" a"] != 30 || seen[b+" b"] != 30 || len(seen) != 2 || own.Load() != 30 {
		t.Errorf("shared handler saw %v, own handler %d, want 30 of a and b there and 30 of c here", seen, own.Load())
	}
	for _, s := range r.w.Stats() {
		if s.PeakSlots > 4 || (s.QueueURL != a && s.PeakSlots > 3) {
			t.Errorf("queue %s held up to %d slots of 4, 1 reserved for a", s.QueueURL, s.PeakSlots)
		}
	}
}

// Run refuses a queue without a handler, and returns the errors when no
// queue could start.
func TestFakeMultiRunErrors(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	a := f.CreateQueue("a", nil)
	w, err := worker.NewMulti(f, worker.MultiConfig{Queues: []worker.QueueConfig{queue(a, 0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), "nil handler for queue "+a) {
		t.Errorf("Run(nil) = %v, want an error naming the queue", err)
	}
	gone, lost := sqstest.QueueURL("gone"), sqstest.QueueURL("lost")
	w, err = worker.NewMulti(f, worker.MultiConfig{Logger: slog.New(slog.DiscardHandler), Queues: []worker.QueueConfig{queue(gone, 1, 0), queue(lost, 0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	w.SetParkBase(100 * time.Millisecond)
	done := make(chan error, 1)
	nop := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	go func() { done <- w.Run(context.Background(), nop) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return when no queue exists")
	}
	var dne *types.QueueDoesNotExist
	if !errors.As(err, &dne) || !strings.Contains(err.Error(), gone) || !strings.Contains(err.Error(), lost) {
		t.Errorf("Run = %v, want *types.QueueDoesNotExist naming both queues", err)
	}
	if err := w.Run(context.Background(), nop); !errors.Is(err, worker.ErrClosed) {
		t.Errorf("second Run = %v, want ErrClosed: a MultiWorker runs once", err)
	}

	// A configuration that does not fit its queue fails Run at the start,
	// as a Worker's does, though another queue could run.
	f.CreateQueue("dlq", nil)
	mis := f.CreateQueue("mis", map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":2}`})
	qm := queue(mis, 0, 0)
	qm.MaxReceiveCount = 5
	w, err = worker.NewMulti(f, worker.MultiConfig{Logger: slog.New(slog.DiscardHandler), Queues: []worker.QueueConfig{queue(a, 1, 0), qm}})
	if err != nil {
		t.Fatal(err)
	}
	w.SetParkBase(100 * time.Millisecond)
	go func() { done <- w.Run(context.Background(), nop) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return for a configuration that does not fit its queue")
	}
	if err == nil || !strings.Contains(err.Error(), "MaxReceiveCount 5 is above the redrive policy's maxReceiveCount 2") {
		t.Errorf("Run = %v, want the misfit named", err)
	}
}

// A queue that cannot be used, at start or later, does not stop the
// others: it waits, named in its QueueStats, holding no lower queue back,
// and is consumed again once it can be.
func TestFakeMultiUnusableQueueWaits(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	gone := sqstest.QueueURL("gone") // the critical queue, missing at start
	low := f.CreateQueue("low", nil)
	for range 30 {
		f.Send(low, "low")
	}
	var handled recorder
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 4, Queues: []worker.QueueConfig{queue(gone, 1, 0), queue(low, 0, 0)}},
		recordOrder(&handled), func(m *worker.MultiWorker) { m.SetParkBase(200 * time.Millisecond) })
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[1].Deleted == 30 }, "the low queue is not consumed while the critical one is missing")
	var dne *types.QueueDoesNotExist
	if st := r.w.Stats()[0]; !errors.As(st.Unusable, &dne) {
		t.Errorf("the missing queue's Unusable = %v, want *types.QueueDoesNotExist", st.Unusable)
	}
	if r.w.Ready() {
		t.Error("Ready with a queue missing, want false")
	}

	// Created, the queue is consumed at its next try.
	if url := f.CreateQueue("gone", nil); url != gone {
		t.Fatalf("created %s, want %s", url, gone)
	}
	for range 5 {
		f.Send(gone, "critical")
	}
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[0].Deleted == 5 }, "the created queue is not consumed")
	localtest.Eventually(t, 5*time.Second, r.w.Ready, "not Ready once every queue is consumed")
	if st := r.w.Stats()[0]; st.Unusable != nil {
		t.Errorf("Unusable = %v once consumed, want nil", st.Unusable)
	}

	// Deleted while consumed, the critical queue waits again; the low one
	// goes on.
	f.DeleteQueue(gone)
	for range 10 {
		f.Send(low, "low")
	}
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[1].Deleted == 40 }, "the low queue stopped with the critical one deleted")
	localtest.Eventually(t, 20*time.Second, func() bool { return errors.As(r.w.Stats()[0].Unusable, &dne) }, "the deleted queue is not reported unusable")
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v with one queue deleted, want it to go on", err)
	default:
	}
	if !strings.Contains(r.logs.String(), "queue cannot be used; the other queues go on without it") {
		t.Error("no error logged for the unusable queue")
	}
}

// With a pool of two slots and a flood on the low queue, the critical
// queue's messages are all handled within the first few: a freed slot goes
// to the critical queue while it has messages.
func TestFakeMultiPriorityOrder(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	crit, low := critAndLow(f, 10, 100)
	var handled recorder
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 2, Queues: []worker.QueueConfig{queue(crit, 1, 0), queue(low, 0, 0)}}, recordOrder(&handled))
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[1].Deleted == 100 }, "low queue not drained")
	handled.mu.Lock()
	defer handled.mu.Unlock()
	order := handled.order
	last := 0
	for i, b := range order {
		if b == "critical" {
			last = i
		}
	}
	// The critical queue holds the low one back from the start, however
	// late its receive loop runs (TestFakeMultiPriorityHoldsWhileStarting),
	// and until it is empty. The slack of two is one receive of the low
	// queue's: on a busy machine a critical receive still under way after
	// the pool's 200 ms grace is taken for a long poll on an empty queue,
	// and the low queue may take a slot the critical one is not using.
	if last >= 10+2 {
		t.Errorf("the last critical message was the %dth handled, want within the first 12: %v", last+1, order[:min(len(order), 20)])
	}
}

// slowStart is a client on which the first read of one queue's attributes
// takes a while: that queue's receive loop starts after the others'.
type slowStart struct {
	worker.API
	url   string
	delay time.Duration
	once  sync.Once
}

func (s *slowStart) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if aws.ToString(in.QueueUrl) == s.url {
		s.once.Do(func() {
			select {
			case <-time.After(s.delay):
			case <-ctx.Done():
			}
		})
	}
	return s.API.GetQueueAttributes(ctx, in, opts...)
}

// A higher-priority queue holds the lower ones back from the start, not
// only once its receive loop runs: here reading the critical queue's
// attributes takes a second, in which the low queue, with no slot
// reserved, must not fill the pool with its flood. Every critical message
// is handled before any low one.
func TestFakeMultiPriorityHoldsWhileStarting(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		crit, low := critAndLow(f, 10, 20)
		var handled recorder
		api := &slowStart{API: f, url: crit, delay: time.Second}
		r := startMulti(t, api, worker.MultiConfig{Concurrency: 2, Queues: []worker.QueueConfig{queue(crit, 1, 0), queue(low, 0, 0)}}, recordOrder(&handled))
		localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[1].Deleted == 20 }, "low queue not drained: %+v", r.w.Stats())
		handled.mu.Lock()
		defer handled.mu.Unlock()
		order := handled.order
		for i, b := range order[:10] {
			if b != "critical" {
				t.Fatalf("message %d handled was a low one, before the critical backlog, which starts a second late: %v", i+1, order)
			}
		}
	})
}

// unreachableQueue is a client on which reading one queue's attributes
// fails, as on a network fault, while down is set.
type unreachableQueue struct {
	worker.API
	url  string
	down atomic.Bool
}

func (u *unreachableQueue) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if aws.ToString(in.QueueUrl) == u.url && u.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return u.API.GetQueueAttributes(ctx, in, opts...)
}

// A higher queue that cannot start, as its attributes cannot be read for a
// while, does not hold the lower ones back meanwhile, as a receive loop
// paused by receive errors does not: the low queue is drained, and the
// critical one once it is reachable.
func TestFakeMultiUnreachableStartHoldsNoOne(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		crit, low := critAndLow(f, 10, 20)
		api := &unreachableQueue{API: f, url: crit}
		api.down.Store(true)
		r := startMulti(t, api, worker.MultiConfig{Logger: slog.New(slog.DiscardHandler), Concurrency: 2,
			Queues: []worker.QueueConfig{queue(crit, 1, 0), queue(low, 0, 0)}},
			sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
		localtest.Eventually(t, time.Minute, func() bool { return r.w.Stats()[1].Deleted == 20 },
			"low queue not drained while the critical queue is unreachable: %+v", r.w.Stats())
		api.down.Store(false)
		localtest.Eventually(t, time.Minute, func() bool { return r.w.Stats()[0].Deleted == 10 },
			"critical queue not drained once reachable: %+v", r.w.Stats())
	})
}

// A rate limit of the whole worker spreads over its queues: none receives
// while no token is left.
func TestFakeMultiRateLimit(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	a, b := f.CreateQueue("a", nil), f.CreateQueue("b", nil)
	for range 100 {
		f.Send(a, "a")
		f.Send(b, "b")
	}
	var handled atomic.Int64
	r := startMulti(t, f, worker.MultiConfig{RateLimit: 50, RateBurst: 5, Queues: []worker.QueueConfig{queue(a, 1, 0), queue(b, 0, 0)}},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { handled.Add(1); return nil }))
	time.Sleep(time.Second)
	n := handled.Load()
	r.stop(5 * time.Second)
	// 50/s for 1s, plus the burst of 5: generous bounds, as the count
	// depends on when the worker started; the 30 s test on the emulator
	// holds the 5%.
	if n < 25 || n > 70 {
		t.Errorf("%d messages in 1s at 50/s", n)
	}
}

// Under the worker's shared rate limit, the critical queue with a backlog
// takes the tokens, and the low queue waits for it as it waits for slots:
// a loop waiting for a shared token stays counted active. Before, it
// waited paused, and the low queue took about a third of the rate while
// the critical one had messages.
func TestFakeMultiRateLimitKeepsThePriority(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	crit, low := critAndLow(f, 200, 200)
	r := startMulti(t, f, worker.MultiConfig{RateLimit: 50, RateBurst: 5, Queues: []worker.QueueConfig{queue(crit, 1, 0), queue(low, 0, 0)}},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	// 2 s at 50 a second: about 100 of the critical queue's 200.
	time.Sleep(2 * time.Second)
	st := r.w.Stats()
	r.stop(5 * time.Second)
	c, l := st[0].Received, st[1].Received
	if c == 0 || l > c/20 {
		t.Errorf("received %d critical and %d low messages while the critical queue had a backlog: want the low queue held back", c, l)
	}
	t.Logf("received %d critical, %d low", c, l)
}

// A critical queue whose dependency is down opens its circuit breaker and
// stops receiving; the low queue is no longer held back by it and runs in
// the whole pool meanwhile.
func TestFakeMultiBreakerOpenLetsLowerQueuesRun(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	crit, low := f.CreateQueue("critical", nil), f.CreateQueue("low", nil)
	for range 50 {
		f.Send(crit, "critical")
	}
	for range 20 {
		f.Send(low, "low")
	}
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.Body == "critical" {
			return sqsworker.Unavailable(errors.New("payments service down"))
		}
		return nil
	})
	qc := queue(crit, 1, 0)
	qc.Breaker = sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Minute}
	qc.Backoff = noDelay
	r := startMulti(t, f, worker.MultiConfig{Concurrency: 2, Queues: []worker.QueueConfig{qc, queue(low, 0, 0)}}, h)
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats()[1].Deleted == 20 },
		"low queue not drained while the critical queue's breaker is open: %+v", r.w.Stats())
	if s := r.w.Stats()[0]; s.BreakerOpens == 0 {
		t.Errorf("critical queue's breaker never opened: %+v", s)
	}
}

// A Worker's own rate limit: it receives no faster than its tokens.
func TestFakeWorkerRateLimit(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", nil)
	for range 200 {
		f.Send(url, "m")
	}
	r := start(t, f, worker.Config{QueueURL: url, RateLimit: 40, RateBurst: 4}, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	time.Sleep(time.Second)
	n := r.w.Stats().Received
	r.stop(5 * time.Second)
	// 40/s for 1 s plus the burst of 4; generous, as the count depends on
	// when the worker started.
	if n < 20 || n > 55 {
		t.Errorf("received %d in 1s at 40/s", n)
	}
}

// critAndLow creates a "critical" and a "low" queue on f, holding crits and
// lows messages of those bodies, and returns their URLs.
func critAndLow(f *sqstest.Fake, crits, lows int) (crit, low string) {
	crit, low = f.CreateQueue("critical", nil), f.CreateQueue("low", nil)
	for range lows {
		f.Send(low, "low")
	}
	for range crits {
		f.Send(crit, "critical")
	}
	return crit, low
}

// recordOrder is a handler that takes 2ms a message and records the bodies
// it handled, in order, in rec.
func recordOrder(rec *recorder) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		time.Sleep(2 * time.Millisecond)
		rec.add(m.Body)
		return nil
	})
}

// A queue whose deletes SQS refuses (the role lost sqs:DeleteMessage)
// waits, and receives again only once a probe finds them taken: the
// messages it ran meanwhile are not received again and again, each time a
// receive nearer the dead-letter queue. The first 6 delete calls fail: the
// consumer's and then the probes', refused but for the third, throttled,
// which says nothing of the refusal.
func TestFakeMultiRefusedDeletesWait(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	q := f.CreateQueue("refused", map[string]string{"VisibilityTimeout": "5"})
	for range 5 {
		f.Send(q, "job")
	}
	denied := &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform sqs:DeleteMessage"}
	f.FailNext(sqstest.OpDeleteMessageBatch, denied, 2)
	f.FailNext(sqstest.OpDeleteMessageBatch, &smithy.GenericAPIError{Code: "RequestThrottled", Message: "slow down"}, 1)
	f.FailNext(sqstest.OpDeleteMessageBatch, denied, 3)
	var receives receiveCounts
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		receives.add(m)
		return nil
	})
	r := startMulti(t, f, worker.MultiConfig{Queues: []worker.QueueConfig{queue(q, 0, 0)}}, h,
		func(m *worker.MultiWorker) { m.SetParkBase(100 * time.Millisecond) })
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats()[0].Deleted == 5 }, "the jobs are not deleted once SQS takes deletes again")
	receives.atMostTwice(t)
	if n := f.Calls(sqstest.OpDeleteMessageBatch); n < 6 {
		t.Errorf("%d delete calls, want the 6 failed and more", n)
	}
	if !strings.Contains(r.logs.String(), "refused on") {
		t.Error("the refusal is not logged")
	}
}

// A queue missing at start waits; created later with a redrive policy its
// configuration does not fit, it goes on waiting, naming the misfit, while
// the other queue runs: only a queue's first try stops Run for that.
func TestFakeMultiMisfitAfterAWaitWaits(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	a := f.CreateQueue("a", nil)
	late := sqstest.QueueURL("late")
	ql := queue(late, 1, 0)
	ql.MaxReceiveCount = 5
	r := startMulti(t, f, worker.MultiConfig{Queues: []worker.QueueConfig{queue(a, 0, 0), ql}},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		func(m *worker.MultiWorker) { m.SetParkBase(100 * time.Millisecond) })
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[1].Unusable != nil }, "the missing queue does not wait")
	f.CreateQueue("dlq", nil)
	f.CreateQueue("late", map[string]string{
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":2}`})
	localtest.Eventually(t, 20*time.Second, func() bool {
		u := r.w.Stats()[1].Unusable
		return u != nil && strings.Contains(u.Error(), "MaxReceiveCount 5 is above")
	}, "the misfit is not reported")
	f.Send(a, "job")
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats()[0].Deleted == 1 }, "the other queue stopped")
	select {
	case err := <-r.done:
		t.Fatalf("Run returned %v", err)
	default:
	}
}

// A queue's wait grows while it stays unusable, and starts again from the
// first once the queue was consumed long enough (5 minutes; 500 ms here):
// an outage days later is not waited on as the sixth of the first.
func TestFakeMultiWaitStartsAgainAfterAConsumedSpell(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	q := f.CreateQueue("q", nil)
	r := startMulti(t, f, worker.MultiConfig{Queues: []worker.QueueConfig{queue(q, 0, 0)}},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		func(m *worker.MultiWorker) {
			m.SetParkBase(100 * time.Millisecond)
			m.SetParkReset(500 * time.Millisecond)
		})
	waits := func() []time.Duration {
		var ds []time.Duration
		for _, line := range strings.Split(r.logs.String(), "\n") {
			if m := retryIn.FindStringSubmatch(line); m != nil && strings.Contains(line, "queue cannot be used") {
				d, err := time.ParseDuration(m[1])
				if err != nil {
					t.Fatalf("retry_in %q: %v", m[1], err)
				}
				ds = append(ds, d)
			}
		}
		return ds
	}
	localtest.Eventually(t, 20*time.Second, r.w.Ready, "not consuming")
	f.DeleteQueue(q)
	localtest.Eventually(t, 20*time.Second, func() bool { return len(waits()) >= 4 }, "the deleted queue does not wait")
	if ds := waits(); ds[3] <= 400*time.Millisecond {
		t.Fatalf("waits %v, want them to grow", ds)
	}
	f.CreateQueue("q", nil)
	localtest.Eventually(t, 20*time.Second, r.w.Ready, "not consuming once created")
	time.Sleep(time.Second) // consumed past the reset
	before := len(waits())
	f.DeleteQueue(q)
	localtest.Eventually(t, 20*time.Second, func() bool { return len(waits()) > before }, "the deleted queue does not wait")
	if d := waits()[before]; d > 100*time.Millisecond {
		t.Errorf("first wait after a consumed spell %s, want the first wait's, at most 100ms", d)
	}
}

var retryIn = regexp.MustCompile(`retry_in=(\S+)`)

// blockingDeletes holds every DeleteMessageBatch once block is set, until
// its context ends, and says when one came in.
type blockingDeletes struct {
	worker.API
	block   atomic.Bool
	entered chan struct{}
}

func (b *blockingDeletes) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if b.block.Load() {
		select {
		case b.entered <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return b.API.DeleteMessageBatch(ctx, in, opts...)
}

// A shutdown while a queue's acknowledgement probe is under way ends the
// probe and Run, and is not logged as one more try of a queue that cannot
// be used.
func TestFakeMultiShutdownDuringTheProbe(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	q := f.CreateQueue("q", nil)
	f.Send(q, "job")
	f.FailNext(sqstest.OpDeleteMessageBatch, &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform sqs:DeleteMessage"}, 1)
	api := &blockingDeletes{API: f, entered: make(chan struct{}, 1)}
	r := startMulti(t, api, worker.MultiConfig{Queues: []worker.QueueConfig{queue(q, 0, 0)}},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		func(m *worker.MultiWorker) { m.SetParkBase(100 * time.Millisecond) })
	const waits = "queue cannot be used"
	localtest.Eventually(t, 20*time.Second, func() bool { return strings.Count(r.logs.String(), waits) == 1 }, "the refused delete is not waited on")
	api.block.Store(true)
	select {
	case <-api.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("no probe came")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.w.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown during the probe: %v", err)
	}
	if err := <-r.done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	r.done <- nil // for the cleanup's stop
	if n := strings.Count(r.logs.String(), waits); n != 1 {
		t.Errorf("%d lines %q, want the one of the refusal, none for the shutdown", n, waits)
	}
}

// receiveCounts keeps, for each message a handler ran, the highest receive
// count it ran with. It is safe for concurrent use.
type receiveCounts struct {
	mu  sync.Mutex
	max map[string]int
}

func (r *receiveCounts) add(m *sqsworker.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.max == nil {
		r.max = map[string]int{}
	}
	r.max[m.ID] = max(r.max[m.ID], m.ReceiveCount)
}

// atMostTwice fails t for each message received more than twice: a queue
// whose deletes were refused receives its messages once before the
// refusal and once after.
func (r *receiveCounts) atMostTwice(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, n := range r.max {
		if n > 2 {
			t.Errorf("message %s received %d times, want at most 2: once before the refusal, once after", id, n)
		}
	}
}

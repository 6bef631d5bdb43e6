package visibility_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// setup creates a queue with the given visibility timeout on a fake, sends n
// messages and receives them all.
func setup(t *testing.T, vis time.Duration, n int) (*sqstest.Fake, string, []*sqsworker.Message) {
	t.Helper()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "30"})
	for range n {
		f.Send(url, "job")
	}
	var msgs []*sqsworker.Message
	for len(msgs) < n {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: int32(vis / time.Second),
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range out.Messages {
			msgs = append(msgs, sqsmsg.FromSDK(url, &out.Messages[i]))
		}
	}
	return f, url, msgs
}

// running starts an extender's rounds; stop ends them.
func running(t *testing.T, f *sqstest.Fake, cfg visibility.Config) (*visibility.Extender, func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	e, err := visibility.New(f, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = e.Run(ctx) })
	return e, func() { cancel(); wg.Wait() }
}

func TestDefaultsDeriveFromVisibilityTimeout(t *testing.T) {
	e, err := visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := e.Config()
	if c.Extension != 30*time.Second || c.Threshold != 15*time.Second || c.Interval != 5*time.Second || c.MaxLifetime != 12*time.Hour {
		t.Errorf("defaults = extension %s, threshold %s, interval %s, lifetime %s", c.Extension, c.Threshold, c.Interval, c.MaxLifetime)
	}
	e, _ = visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: "q", VisibilityTimeout: 10 * time.Minute})
	if c := e.Config(); c.Interval != 10*time.Second {
		t.Errorf("interval for a 10m visibility timeout = %s, want the 10s cap", c.Interval)
	}
}

func TestConfigErrorsNameEveryProblem(t *testing.T) {
	for _, c := range []struct {
		cfg  visibility.Config
		want []string
	}{
		{visibility.Config{}, []string{"QueueURL is required", "VisibilityTimeout 0s"}},
		{visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, Interval: 20 * time.Second}, []string{"Interval 20s is not below Threshold 15s"}},
		{visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, Threshold: 30 * time.Second, Interval: time.Second}, []string{"Threshold 30s is not below VisibilityTimeout 30s"}},
		{visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, MaxLifetime: 13 * time.Hour, Extension: 1500 * time.Millisecond}, []string{"MaxLifetime 13h0m0s", "Extension 1.5s"}},
		{visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, Extension: 10 * time.Second}, []string{"Threshold 15s is not below Extension 10s"}},
	} {
		_, err := visibility.New(sqstest.NewFake(), c.cfg)
		for _, w := range c.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("New(%+v) = %v, want it to name %q", c.cfg, err, w)
			}
		}
	}
}

// A message is extended once its visibility timeout ends within the
// threshold, not before, and hooks see every extension.
func TestExtendsWhenDue(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		var mu sync.Mutex
		var hooked, leaseHooked []time.Time
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second,
			OnExtend: func(m *sqsworker.Message, until time.Time) { mu.Lock(); hooked = append(hooked, until); mu.Unlock() }})
		defer stop()
		start := time.Now()
		ctx, lease := e.Track(context.Background(), msgs[0], start)
		lease.OnExtend(func(until time.Time) { mu.Lock(); leaseHooked = append(leaseHooked, until); mu.Unlock() })
		if visibility.FromContext(ctx) != lease {
			t.Fatal("FromContext does not return the lease")
		}
		time.Sleep(14 * time.Second)
		synctest.Wait()
		if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 0 {
			t.Fatalf("%d extension calls before the threshold", n)
		}
		time.Sleep(6 * time.Second) // past 15s left: the round at 15s or 20s extends
		synctest.Wait()
		if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 1 {
			t.Fatalf("%d extension calls after the threshold, want 1", n)
		}
		if d := lease.Deadline().Sub(start); d < 45*time.Second || d > 50*time.Second {
			t.Errorf("deadline %s after the receive, want 30s after the extension", d)
		}
		mu.Lock()
		if len(hooked) != 1 || len(leaseHooked) != 1 || !hooked[0].Equal(lease.Deadline()) {
			t.Errorf("hooks saw %v and %v", hooked, leaseHooked)
		}
		mu.Unlock()
		// Kept invisible for ten minutes: never visible in between.
		for range 60 {
			time.Sleep(10 * time.Second)
			synctest.Wait()
			if v, _, _ := f.Depth(url); v != 0 {
				t.Fatalf("message visible again after %s", time.Since(start))
			}
		}
		if ctx.Err() != nil {
			t.Errorf("lease context ended: %v", context.Cause(ctx))
		}
		lease.Release()
	})
}

// 100 messages received together cost ten calls a round.
func TestBatchesTenPerCall(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 100)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		defer stop()
		now := time.Now()
		for _, m := range msgs {
			e.Track(context.Background(), m, now)
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		s := e.Stats()
		if s.Rounds == 0 || s.Calls != 10*s.Rounds || s.Extended != 100*s.Rounds || s.Lost != 0 {
			t.Errorf("stats = %+v, want 10 calls and 100 extensions per round", s)
		}
	})
}

// Messages received at different times share calls: a round that must call
// fills the call with the messages due next.
func TestFillsCallsWithMessagesDueNext(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, _ := setup(t, 30*time.Second, 0)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		defer stop()
		for range 100 { // one message received every 300ms
			f.Send(url, "job")
			out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: 30})
			if err != nil || len(out.Messages) != 1 {
				t.Fatal(err)
			}
			e.Track(context.Background(), sqsmsg.FromSDK(url, &out.Messages[0]), time.Now())
			time.Sleep(300 * time.Millisecond)
		}
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		s := e.Stats()
		minCalls := (s.Extended + 9) / 10
		t.Logf("%d extensions in %d calls over %d rounds (minimum %d calls)", s.Extended, s.Calls, s.Rounds, minCalls)
		if s.Lost != 0 || s.Calls > minCalls+1 {
			t.Errorf("stats = %+v: %d calls for %d extensions, want about %d", s, s.Calls, s.Extended, minCalls)
		}
	})
}

// A released lease is not extended any more.
func TestReleaseStopsExtensions(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 2)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		defer stop()
		_, a := e.Track(context.Background(), msgs[0], time.Now())
		ctxB, b := e.Track(context.Background(), msgs[1], time.Now())
		time.Sleep(20 * time.Second)
		synctest.Wait()
		a.Release()
		before := e.Stats().Extended
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := e.Stats().Extended - before; got != 4 { // b alone, every 15s
			t.Errorf("%d extensions in a minute after releasing a, want b's 4", got)
		}
		if ctxB.Err() != nil || e.Stats().Tracked != 1 {
			t.Errorf("b ended (%v) or tracked = %d", ctxB.Err(), e.Stats().Tracked)
		}
		b.Release()
	})
}

// A rejected extension ends the lease with ErrLeaseLost and the SDK's own
// error type.
func TestRejectedExtensionLosesLease(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 2)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		defer stop()
		ctxA, _ := e.Track(context.Background(), msgs[0], time.Now())
		ctxB, b := e.Track(context.Background(), msgs[1], time.Now())
		// The first message's handle goes stale: it is received elsewhere.
		_, _ = f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: aws.String(msgs[0].ReceiptHandle)})
		if out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: 300}); len(out.Messages) != 1 {
			t.Fatal("stale message not received elsewhere")
		}
		time.Sleep(20 * time.Second)
		synctest.Wait()
		cause := context.Cause(ctxA)
		var invalid *types.ReceiptHandleIsInvalid
		if !errors.Is(cause, visibility.ErrLeaseLost) || !errors.As(cause, &invalid) {
			t.Errorf("cause = %v, want ErrLeaseLost wrapping ReceiptHandleIsInvalid", cause)
		}
		if ctxB.Err() != nil || e.Stats().Lost != 1 {
			t.Errorf("other lease ended (%v) or lost = %d", context.Cause(ctxB), e.Stats().Lost)
		}
		b.Release()
	})
}

// Transient errors are retried in the next rounds; a lease whose extensions
// keep failing until it runs out is lost.
func TestTransientErrorsRetriedUntilLeaseRunsOut(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 2)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		defer stop()
		throttled := &smithy.GenericAPIError{Code: "RequestThrottled", Message: "slow down"}
		f.FailNext(sqstest.OpChangeMessageVisibilityBatch, throttled, 1)
		f.FailEntries(sqstest.OpChangeMessageVisibilityBatch, "InternalError", false, 1)
		ctxA, a := e.Track(context.Background(), msgs[0], time.Now())
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if ctxA.Err() != nil || e.Stats().Extended == 0 {
			t.Fatalf("lease not kept through transient errors: %v, %+v", context.Cause(ctxA), e.Stats())
		}
		a.Release()
		// Now every call fails until the second lease runs out.
		f.FailNext(sqstest.OpChangeMessageVisibilityBatch, throttled, 1000)
		ctxB, _ := e.Track(context.Background(), msgs[1], time.Now())
		time.Sleep(31 * time.Second)
		synctest.Wait()
		if cause := context.Cause(ctxB); !errors.Is(cause, visibility.ErrLeaseLost) || !strings.Contains(cause.Error(), "ran out") {
			t.Errorf("cause = %v, want a lease that ran out", cause)
		}
	})
}

// No extension goes past MaxLifetime; the lease then ends with
// ErrMaxLifetime, while the message is still invisible.
func TestMaxLifetime(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, MaxLifetime: 100 * time.Second})
		defer stop()
		start := time.Now()
		ctx, lease := e.Track(context.Background(), msgs[0], start)
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, visibility.ErrMaxLifetime) {
			t.Errorf("cause = %v", cause)
		}
		if d := lease.Deadline().Sub(start); d > 100*time.Second {
			t.Errorf("extended to %s after the receive, past the 100s lifetime", d)
		}
		if left := time.Until(lease.Deadline()); left <= 0 {
			t.Errorf("lease ended after the message became visible (%s left)", left)
		}
		if v, _, _ := f.Depth(url); v != 0 {
			t.Error("message visible when its lease ended")
		}
	})
}

// Released leases are not kept by the context they were derived from: a
// poller tracks every message it receives on one long-lived context.
func TestReleaseFreesLeaseContext(t *testing.T) {
	const n = 100_000
	e, err := visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	parent, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	m := &sqsworker.Message{ID: "m", ReceiptHandle: "h"}
	track := func(n int) {
		for range n {
			ctx, l := e.Track(parent, m, time.Now())
			l.Release()
			if !errors.Is(context.Cause(ctx), visibility.ErrReleased) {
				t.Fatalf("cause after Release = %v, want ErrReleased", context.Cause(ctx))
			}
		}
	}
	track(1000) // the extender's map and the parent's children map exist
	before := heapInUse()
	track(n)
	after := heapInUse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use grew by %d bytes over %d leases (%.1f bytes each)", grew, n, float64(grew)/n)
	// A lease's cancel context and its entry in the parent's children map
	// take about 120 bytes: 11 MB for 100k leases kept. Allow 2 MB of noise.
	if grew > 2<<20 {
		t.Errorf("heap in use grew by %.1f MB over %d released leases: the parent context keeps them", float64(grew)/(1<<20), n)
	}
	if s := e.Stats(); s.Tracked != 0 {
		t.Errorf("%d leases still tracked", s.Tracked)
	}
	runtime.KeepAlive(parent)
}

// heapInUse is the heap in use after a garbage collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// Track and Release cost three allocations: the lease (with the context
// Track returns), the cancel context and its cancel function.
func TestTrackAllocations(t *testing.T) {
	e, err := visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := &sqsworker.Message{ID: "m", ReceiptHandle: "h"}
	now := time.Now()
	allocs := testing.AllocsPerRun(1000, func() {
		ctx, l := e.Track(parent, m, now)
		if visibility.FromContext(ctx) != l {
			t.Fatal("FromContext does not return the lease")
		}
		l.Release()
	})
	if allocs > 3 {
		t.Errorf("Track and Release make %.0f allocations, want at most 3", allocs)
	}
}

// The lease's context is cancelled by Release with ErrReleased; contexts
// derived from it find the lease and end with it; the parent's cancellation
// reaches it before.
func TestReleaseCancelsWithErrReleased(t *testing.T) {
	e, err := visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m := &sqsworker.Message{ID: "m", ReceiptHandle: "h"}
	ctx, l := e.Track(context.Background(), m, time.Now())
	child, cancelChild := context.WithTimeout(ctx, time.Hour)
	defer cancelChild()
	if visibility.FromContext(child) != l || l.Message() != m {
		t.Fatal("a derived context does not carry the lease")
	}
	if ctx.Err() != nil || child.Err() != nil {
		t.Fatal("lease context done before Release")
	}
	l.Release()
	l.Release()
	for _, c := range []context.Context{ctx, child} {
		if cause := context.Cause(c); !errors.Is(cause, visibility.ErrReleased) || errors.Is(cause, visibility.ErrLeaseLost) {
			t.Errorf("cause after Release = %v, want ErrReleased", cause)
		}
	}
	if s := e.Stats(); s.Tracked != 0 || s.Lost != 0 {
		t.Errorf("stats after Release = %+v", s)
	}

	shutdown := errors.New("shutdown")
	parent, cancel := context.WithCancelCause(context.Background())
	ctx, l = e.Track(parent, m, time.Now())
	cancel(shutdown)
	l.Release()
	if cause := context.Cause(ctx); !errors.Is(cause, shutdown) {
		t.Errorf("cause after the parent's cancellation = %v, want the parent's", cause)
	}
}

// A lease lost before its release keeps ErrLeaseLost as its cause, whichever
// of the round and the handler's end comes first.
func TestLostLeaseKeepsCauseAfterRelease(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		defer stop()
		ctx, l := e.Track(context.Background(), msgs[0], time.Now())
		f.FailEntries(sqstest.OpChangeMessageVisibilityBatch, "ReceiptHandleIsInvalid", true, 1)
		<-ctx.Done()
		l.Release()
		if cause := context.Cause(ctx); !errors.Is(cause, visibility.ErrLeaseLost) {
			t.Errorf("cause after a loss and Release = %v, want ErrLeaseLost", cause)
		}
	})
	// Without synctest, a round racing with Release: the cause is in place
	// when Release returns, and it is the one of whichever ended it first.
	f, url, msgs := setup(t, 2*time.Second, 200)
	e, err := visibility.New(f, visibility.Config{QueueURL: url, VisibilityTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Minute) // every lease has run out
	ctxs := make([]context.Context, len(msgs))
	leases := make([]*visibility.Lease, len(msgs))
	for i, m := range msgs {
		ctxs[i], leases[i] = e.Track(context.Background(), m, past)
	}
	var wg sync.WaitGroup
	wg.Go(func() { e.Round(context.Background()) })
	lost := 0
	for i, l := range leases {
		l.Release()
		switch cause := context.Cause(ctxs[i]); {
		case errors.Is(cause, visibility.ErrLeaseLost):
			lost++
		case !errors.Is(cause, visibility.ErrReleased):
			t.Fatalf("cause after Release = %v", cause)
		}
	}
	wg.Wait()
	if got := e.Stats().Lost; got != int64(lost) {
		t.Errorf("%d leases counted lost, %d contexts say so", got, lost)
	}
}

// slowAPI answers ChangeMessageVisibilityBatch after delay and records the
// visibility timeouts asked for.
type slowAPI struct {
	*sqstest.Fake
	delay time.Duration

	mu      sync.Mutex
	timeout []int32
}

func (s *slowAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	s.mu.Lock()
	for _, e := range in.Entries {
		s.timeout = append(s.timeout, e.VisibilityTimeout)
	}
	s.mu.Unlock()
	out, err := s.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
	time.Sleep(s.delay)
	return out, err
}

// A call that waits behind MaxInFlight others extends by the whole
// Extension from its own start, not from the round's, and never asks for a
// visibility timeout of zero or less, which would make its messages visible
// at once: the leases that ran out while it waited end as lost instead.
func TestLateCallExtendsFromItsStart(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 80)
		api := &slowAPI{Fake: f, delay: 4500 * time.Millisecond}
		// One call at a time, each 4.5s: the round at 15s finds all 80
		// due, and its eight calls would start at 15s, 19.5s, ... 46.5s:
		// the last four after the leases' 30s, the last one even after the
		// 45s the round's own extensions would have reached.
		e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, MaxInFlight: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(ctx) })
		start := time.Now()
		ctxs := make([]context.Context, len(msgs))
		leases := make([]*visibility.Lease, len(msgs))
		for i, m := range msgs {
			ctxs[i], leases[i] = e.Track(context.Background(), m, start)
		}
		time.Sleep(50 * time.Second)
		synctest.Wait()
		defer func() {
			cancel()
			wg.Wait()
			for _, l := range leases {
				l.Release()
			}
		}()

		api.mu.Lock()
		sent := slices.Clone(api.timeout)
		api.mu.Unlock()
		for _, s := range sent {
			if s != 30 {
				t.Errorf("visibility timeouts sent: %v, want the 30s extension each time", sent)
				break
			}
		}
		kept, lost := 0, 0
		for i, l := range leases {
			switch cause := context.Cause(ctxs[i]); {
			case cause == nil:
				kept++
				if d := l.Deadline().Sub(start); d < 45*time.Second {
					t.Errorf("lease kept with a deadline %s after the receive", d)
				}
			case errors.Is(cause, visibility.ErrLeaseLost):
				lost++
			default:
				t.Errorf("lease ended with %v", cause)
			}
		}
		// The calls at 15s, 19.5s, 24s and 28.5s come before the leases'
		// end: 40 kept; the rest ran out while they waited.
		if kept != 40 || lost != 40 || e.Stats().Lost != 40 {
			t.Errorf("%d leases kept and %d lost (stats %+v), want 40 and 40", kept, lost, e.Stats())
		}
		if v, inFlight, _ := f.Depth(url); inFlight < 40 {
			t.Errorf("%d messages visible, %d in flight, want the 40 kept leases' messages in flight", v, inFlight)
		}
	})
}

// A lease whose message is being acknowledged ends quietly when SQS rejects
// its extension: the delete landed first; it is not a lost lease.
func TestAcknowledgingLeaseEndsQuietly(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "2"})
	f.Send(url, "m")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url})
	if err != nil || len(out.Messages) != 1 {
		t.Fatal(err)
	}
	m := &sqsworker.Message{ID: aws.ToString(out.Messages[0].MessageId), ReceiptHandle: aws.ToString(out.Messages[0].ReceiptHandle)}
	e, err := visibility.New(f, visibility.Config{QueueURL: url, VisibilityTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, l := e.Track(context.Background(), m, time.Now().Add(-1500*time.Millisecond))
	l.Acknowledging()
	if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &m.ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	e.Round(context.Background())
	if s := e.Stats(); s.Lost != 0 || s.Tracked != 0 {
		t.Errorf("stats %+v, want the lease ended without counting it lost", s)
	}
	if !errors.Is(context.Cause(ctx), visibility.ErrReleased) {
		t.Errorf("cause %v, want ErrReleased", context.Cause(ctx))
	}
}

// heldCalls is a client whose extension calls wait for release before they
// reach the queue.
type heldCalls struct {
	visibility.API
	entered chan struct{} // one value per call that waits
	release chan struct{} // closed to let the calls through
}

func (h *heldCalls) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	h.entered <- struct{}{}
	<-h.release
	return h.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// Release returns only once an extension of the lease under way has
// returned, so that a visibility change sent after it lands after the
// extension, and the lease's Deadline counts the extension. A lease being
// acknowledged, or one no call carries, is released at once.
func TestReleaseWaitsForExtensionUnderWay(t *testing.T) {
	for _, acking := range []bool{false, true} {
		bubble.Test(t, func(t *testing.T) {
			f, url, msgs := setup(t, 30*time.Second, 3)
			api := &heldCalls{API: f, entered: make(chan struct{}, 1), release: make(chan struct{})}
			e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_, lease := e.Track(context.Background(), msgs[0], start)
			_, other := e.Track(context.Background(), msgs[1], start)
			other.Release() // before any round: not waited for
			time.Sleep(20 * time.Second)
			done := make(chan struct{})
			go func() { e.Round(context.Background()); close(done) }()
			<-api.entered
			_, fresh := e.Track(context.Background(), msgs[2], time.Now())
			fresh.Release() // carried by no call: not waited for
			if acking {
				lease.Acknowledging()
			}
			released := make(chan struct{})
			go func() { lease.Release(); close(released) }()
			synctest.Wait()
			select {
			case <-released:
				if !acking {
					t.Fatal("Release returned while an extension of the lease was under way")
				}
			default:
				if acking {
					t.Fatal("Release of a lease being acknowledged waits for its extension")
				}
			}
			close(api.release)
			<-released
			<-done
			if d := lease.Deadline().Sub(start); d != 50*time.Second {
				t.Errorf("deadline %s after the receive, want 50s: the extension that landed during Release (20s+30s)", d)
			}
		})
	}
}

// A lease's OnExtend hook may release the lease: Release does not wait for
// the call that runs the hook, which no longer counts once the extension is
// recorded.
func TestReleaseFromOnExtendHook(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		e, err := visibility.New(f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, lease := e.Track(context.Background(), msgs[0], time.Now())
		lease.OnExtend(func(time.Time) { lease.Release() })
		time.Sleep(20 * time.Second)
		e.Round(context.Background())
		if !errors.Is(context.Cause(ctx), visibility.ErrReleased) {
			t.Errorf("cause = %v, want ErrReleased from the hook's Release", context.Cause(ctx))
		}
	})
}

// SQS counts its 12 hours from its own receive, before the receive time
// the lease is tracked with (here by 2s): the last extension, planned up to
// a MaxLifetime of 12 hours, goes past them, and the queue refuses it. The
// lease then ends as having reached its lifetime, not as lost, with its
// message still invisible.
func TestExtensionRefusedPastTwelveHours(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		var logs strings.Builder
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		time.Sleep(2 * time.Second)
		ctx, lease := e.Track(context.Background(), msgs[0], time.Now())
		<-ctx.Done()
		stop() // the round that ended the lease has logged
		if cause := context.Cause(ctx); !errors.Is(cause, visibility.ErrMaxLifetime) {
			t.Errorf("cause = %v, want ErrMaxLifetime", cause)
		}
		if s := e.Stats(); s.Lost != 0 || s.Expired != 1 {
			t.Errorf("stats %+v: want no lease lost, one expired", s)
		}
		if time.Until(lease.Deadline()) <= 0 {
			t.Error("the lease ended after its message became visible")
		}
		if v, _, _ := f.Depth(url); v != 0 {
			t.Error("message visible when its lease ended")
		}
		if strings.Contains(logs.String(), "lost") {
			t.Errorf("logged as lost:\n%s", logs.String())
		}
	})
}

// ReleaseBy waits for an extension of the lease under way no later than its
// time, and the lease is released with the cause ErrReleased all the same.
func TestReleaseByBoundsTheWait(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		api := &heldCalls{API: f, entered: make(chan struct{}, 1), release: make(chan struct{})}
		e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, lease := e.Track(context.Background(), msgs[0], time.Now())
		time.Sleep(20 * time.Second)
		done := make(chan struct{})
		go func() { e.Round(context.Background()); close(done) }()
		<-api.entered
		start := time.Now()
		lease.ReleaseBy(start.Add(time.Second))
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("ReleaseBy waited %s, want 1s", waited)
		}
		if !errors.Is(context.Cause(ctx), visibility.ErrReleased) {
			t.Errorf("cause = %v, want ErrReleased", context.Cause(ctx))
		}
		close(api.release)
		<-done
	})
}

// A hook may release any lease, not only its own: every lease of the call
// that runs the hooks no longer counts as under way by then. Here each
// message's hook releases the other message's lease, both extended by one
// call: whichever hook runs first must not wait for the call it runs in.
func TestReleaseOfAnotherLeaseFromHook(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 2)
		e, err := visibility.New(f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		ctxA, a := e.Track(context.Background(), msgs[0], now)
		ctxB, b := e.Track(context.Background(), msgs[1], now)
		a.OnExtend(func(time.Time) { b.Release() })
		b.OnExtend(func(time.Time) { a.Release() })
		time.Sleep(20 * time.Second)
		e.Round(context.Background())
		for _, ctx := range []context.Context{ctxA, ctxB} {
			if !errors.Is(context.Cause(ctx), visibility.ErrReleased) {
				t.Errorf("cause = %v, want ErrReleased", context.Cause(ctx))
			}
		}
	})
}

// hangAPI leaves every ChangeMessageVisibilityBatch unanswered until its
// context ends, as a network that swallows requests does.
type hangAPI struct{ *sqstest.Fake }

func (hangAPI) ChangeMessageVisibilityBatch(ctx context.Context, _ *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// While extension calls hang, a round of many calls (one at a time, each
// given up after Interval: 5s) lasts several rounds' time: 10 leases whose
// deadline comes at 16s, in the round at 15s with 190 more due at 30s, are
// seen lost within LossLag of it (two Intervals: 10s), not once the round
// is over. Before, they were seen lost at 30s.
func TestLossSeenWithinLossLagWhileCallsHang(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 200)
		e, err := visibility.New(hangAPI{f}, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, MaxInFlight: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(ctx) })
		defer func() { cancel(); wg.Wait() }()
		start := time.Now()
		var early []context.Context
		var lag time.Duration
		for i, m := range msgs {
			at := start
			if i < 10 {
				at = start.Add(-14 * time.Second) // its deadline at 16s
			}
			c, l := e.Track(context.Background(), m, at)
			if i < 10 {
				early = append(early, c)
			}
			lag = l.LossLag()
		}
		if lag != 10*time.Second {
			t.Fatalf("LossLag %s, want two Intervals of 5s", lag)
		}
		time.Sleep(16*time.Second + lag)
		synctest.Wait()
		live := 0
		for _, c := range early {
			if c.Err() == nil {
				live++
			}
		}
		if live > 0 {
			t.Errorf("%d of 10 leases still live %s after their deadline, want none past LossLag (%+v)", live, lag, e.Stats())
		}
	})
}

// orderAPI records the receipt handles of each ChangeMessageVisibilityBatch
// call, in the order they come, and answers each after delay.
type orderAPI struct {
	*sqstest.Fake
	delay time.Duration
	mu    sync.Mutex
	calls [][]string
}

func (o *orderAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	var handles []string
	for _, e := range in.Entries {
		handles = append(handles, aws.ToString(e.ReceiptHandle))
	}
	o.mu.Lock()
	o.calls = append(o.calls, handles)
	o.mu.Unlock()
	time.Sleep(o.delay)
	return o.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// When more leases are due than MaxInFlight calls carry at once, the ones
// that run out first are sent first: a backlog of leases received late
// does not keep the oldest waiting until they run out. Before, the newest
// went first, and with SQS slow to answer the oldest were lost.
func TestDueLeasesSentOldestFirst(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, _ := setup(t, 30*time.Second, 0)
		api := &orderAPI{Fake: f, delay: time.Second}
		e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, MaxInFlight: 1, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var order []string // receipt handles, oldest lease first
		for range 30 {
			f.Send(url, "job")
			out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: 30})
			if err != nil || len(out.Messages) != 1 {
				t.Fatal(err)
			}
			m := sqsmsg.FromSDK(url, &out.Messages[0])
			e.Track(context.Background(), m, time.Now())
			order = append(order, m.ReceiptHandle)
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(16 * time.Second) // all due: less than Threshold left
		e.Round(context.Background())
		if len(api.calls) != 3 {
			t.Fatalf("%d calls, want 3", len(api.calls))
		}
		if got := slices.Concat(api.calls...); !slices.Equal(got, order) {
			t.Errorf("leases sent in the order %v, want the oldest first %v", got, order)
		}
		if s := e.Stats(); s.Lost != 0 {
			t.Errorf("stats %+v: leases lost", s)
		}
	})
}

// The same when the lease is tracked well after SQS's receive (here 40s,
// more than an Extension): the extension SQS refuses was not cut at
// MaxLifetime, and the lease still ends as having reached its lifetime,
// not as lost. Before, it was counted lost.
func TestUncutExtensionRefusedPastTwelveHours(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 2*time.Minute, 1) // received hidden for 2m
		e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second})
		time.Sleep(40 * time.Second)
		ctx, _ := e.Track(context.Background(), msgs[0], time.Now())
		<-ctx.Done()
		stop()
		if cause := context.Cause(ctx); !errors.Is(cause, visibility.ErrMaxLifetime) {
			t.Errorf("cause = %v, want ErrMaxLifetime", cause)
		}
		if s := e.Stats(); s.Lost != 0 || s.Expired != 1 {
			t.Errorf("stats %+v: want no lease lost, one expired", s)
		}
	})
}

// A lease tracked as estimated (its receive time may be later than SQS's)
// is extended at the next round whatever its time left, once: its deadline
// is then one SQS confirmed, and it is extended as any other after. A
// lease tracked the same way by Track waits for its threshold.
func TestEstimatedLeaseExtendedAtTheNextRound(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 2)
		e, err := visibility.New(f, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, est := e.TrackEstimated(context.Background(), msgs[0], start)
		_, known := e.Track(context.Background(), msgs[1], start)
		defer est.Release()
		defer known.Release()
		time.Sleep(time.Second)
		e.Round(context.Background())
		if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 1 {
			t.Fatalf("%d extension calls at the first round, want 1", n)
		}
		if d := est.Deadline().Sub(start); d != 31*time.Second {
			t.Errorf("the estimated lease ends %s after its receive, want 31s: extended at the round", d)
		}
		if d := known.Deadline().Sub(start); d != 30*time.Second {
			t.Errorf("the other lease ends %s after its receive, want 30s: not due", d)
		}
		e.Round(context.Background())
		if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch); n != 1 {
			t.Errorf("%d extension calls after the second round, want 1: the estimated lease is confirmed", n)
		}
	})
}

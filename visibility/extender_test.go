package visibility_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
	synctest.Test(t, func(t *testing.T) {
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
		if left := lease.Deadline().Sub(time.Now()); left <= 0 {
			t.Errorf("lease ended after the message became visible (%s left)", left)
		}
		if v, _, _ := f.Depth(url); v != 0 {
			t.Error("message visible when its lease ended")
		}
	})
}

package lambda_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest"
)

// While a dependency is down the breaker opens: the records of later
// invocations are not run but postponed to the next probe, without counting
// as failures; one record runs as the probe, and once probes succeed the
// records run again. Nothing is dead-lettered.
func TestBreakerPostponesRecords(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	var down atomic.Bool
	var calls atomic.Int64
	down.Store(true)
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		calls.Add(1)
		if down.Load() {
			return sqsworker.Unavailable(errors.New("connection refused"))
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true,
		Breaker: sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Second, CloseAfter: 1}})
	resp, err := fn(context.Background(), received(t, f, "orders", "a", "b", "c"))
	if err != nil || len(resp.BatchItemFailures) != 3 {
		t.Fatalf("first invocation: %v %v", resp, err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d handler calls, want 2: the third record must be postponed once the breaker opened", n)
	}
	// Postponed to the next probe, not released at once.
	if v, _, _ := f.Depth(sqstest.QueueURL("orders")); v != 0 {
		t.Errorf("%d records visible at once, want them held until the probe", v)
	}
	// A later invocation while open: nothing runs.
	resp, _ = fn(context.Background(), received(t, f, "orders", "d"))
	if len(resp.BatchItemFailures) != 1 || calls.Load() != 2 {
		t.Errorf("while open: %v, %d calls", resp, calls.Load())
	}
	// After the probe interval, one record runs as the probe; the dependency
	// is back, so the breaker closes and the rest runs.
	time.Sleep(2500 * time.Millisecond) // every earlier record is visible again too
	down.Store(false)
	url := sqstest.QueueURL("orders")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 4 {
		t.Fatalf("received %d records, want the 4 failed or postponed: %v", len(out.Messages), err)
	}
	resp, _ = fn(context.Background(), sqstest.SQSEvent(sqstest.QueueARN("orders"), out.Messages))
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("after recovery: %v, want every record handled", resp)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
		t.Errorf("%d records dead-lettered, want none", v)
	}
}

// A probe whose handler ignores its context and is still running when the
// invocation gives up on it (a call to the dependency that hangs) gives
// its turn back: a later invocation's record runs as the next probe once
// the interval has passed, and, the dependency back, closes the breaker.
// Before, the breaker waited for that probe's outcome for as long as the
// handler hung: every record of the execution environment was postponed,
// invocation after invocation, though the dependency was back.
func TestStuckProbeGivesItsTurnBack(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	var down atomic.Bool
	down.Store(true)
	var ran atomic.Int64
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		switch {
		case m.Body == "hang":
			<-hung // ignores its context
			return sqsworker.Unavailable(errors.New("connection timed out"))
		case down.Load():
			return sqsworker.Unavailable(errors.New("connection refused"))
		}
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true,
		Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Second, CloseAfter: 1}})
	hangProbe(t, f, fn)
	down.Store(false)
	time.Sleep(2500 * time.Millisecond) // past any probe interval the hung probe could have set
	resp, err := fn(context.Background(), received(t, f, "orders", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if ran.Load() != 2 || len(resp.BatchItemFailures) != 0 {
		t.Errorf("%d records ran, failures %v: want both run once the dependency is back", ran.Load(), failedIDs(resp))
	}
}

// handled counts the handler calls that returned, by the HandlerDuration the
// executor observes once it has recorded the call's outcome with the
// circuit breaker.
type handled struct {
	metrics.Nop
	n atomic.Int64
}

func (h *handled) Observe(name string, _ float64, _ metrics.Dims) {
	if name == metrics.HandlerDuration {
		h.n.Add(1)
	}
}

// A probe the invocation gave up on (its handler hung past the deadline)
// whose handler returns late with success, while the next invocation's probe
// is out and the dependency still down, settles nothing: the newer probe's
// failure opens the breaker again, and the rest of its invocation's records
// are postponed, not run against the dependency still down. Before, the
// stale success closed the breaker, the newer probe's failure then counted
// for nothing, and the next record ran (and failed, its attempt spent).
func TestStaleProbeSuccessDoesNotClose(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	down := sqsworker.Unavailable(errors.New("connection refused"))
	hung := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hung) }) }
	t.Cleanup(release)
	var others atomic.Int64
	var ended handled
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "down":
			return down
		case "hang": // ignores its context, then its call succeeds
			<-hung
			return nil
		case "slow": // the next probe: the hung one returns meanwhile
			n := ended.n.Load()
			release()
			for deadline := time.Now().Add(30 * time.Second); ended.n.Load() == n; {
				if time.Now().After(deadline) {
					t.Error("the hung probe did not return once released")
					break
				}
				time.Sleep(time.Millisecond)
			}
			return down
		}
		others.Add(1)
		return down
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true, Metrics: &ended,
		Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Second, CloseAfter: 1}})
	hangProbe(t, f, fn)
	resp, err := fn(context.Background(), received(t, f, "orders", "slow", "x", "y"))
	if err != nil {
		t.Fatal(err)
	}
	if n := others.Load(); n != 0 || len(resp.BatchItemFailures) != 3 {
		t.Errorf("%d records ran against the dependency still down, failures %v: want none run, all 3 reported failed", n, failedIDs(resp))
	}
	// Postponed to the next probe, not released at once.
	if v, _, _ := f.Depth(sqstest.QueueURL("orders")); v != 0 {
		t.Errorf("%d records visible at once, want them kept away until the next probe", v)
	}
}

// hangProbe opens fn's breaker (probe interval 1s) on queue "orders" of f
// with a record whose handler fails ("down"), waits out the probe
// interval, and invokes fn, with a 2s deadline, on a record whose handler
// hangs ("hang"), the probe the invocation gives up on. It deletes both
// records, out of the way of the next receive.
func hangProbe(t *testing.T, f *sqstest.Fake, fn lambda.HandlerFunc) {
	t.Helper()
	url := sqstest.QueueURL("orders")
	settled := func(ev events.SQSEvent) {
		for _, r := range ev.Records {
			if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &r.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ev := received(t, f, "orders", "down")
	if resp, err := fn(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("opening the breaker: %v %v", resp, err)
	}
	settled(ev)
	time.Sleep(1500 * time.Millisecond) // the probe interval, jittered by up to a fifth
	ev = received(t, f, "orders", "hang")
	invokeBy(t, fn, ev, 2*time.Second)
	settled(ev)
}

// A record's handler cut short by the invocation's deadline, returning an
// error the breaker does not count, says nothing of the dependency: it
// counts as nothing and does not break a run of dependency failures. Before,
// it counted as a success: failures, a cut, a failure left the breaker
// closed with Threshold 3, and the next record ran against the dependency.
func TestCutRecordDoesNotBreakARunOfFailures(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	var calls atomic.Int64
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		calls.Add(1)
		if m.Body == "c" { // hangs until the invocation gives it up
			<-ctx.Done()
			return ctx.Err()
		}
		return sqsworker.Unavailable(errors.New("connection refused"))
	})
	later := sqsworker.BackoffFunc(func(int, error) time.Duration { return time.Minute }) // out of the second receive
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true, Backoff: later,
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := fn(ctx, received(t, f, "orders", "a", "b", "c")); err != nil {
		t.Fatalf("first invocation: %v", err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d handler calls in the first invocation, want 3", n)
	}
	// The cut record was released at the deadline: out of the way of the
	// next invocation's records.
	url := sqstest.QueueURL("orders")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if err != nil || len(out.Messages) != 1 || *out.Messages[0].Body != "c" {
		t.Fatalf("after the first invocation: %v, %v; want the cut record c visible", out, err)
	}
	if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	resp, err := fn(context.Background(), received(t, f, "orders", "d", "e"))
	if err != nil || len(resp.BatchItemFailures) != 2 {
		t.Fatalf("second invocation: %v %v", resp, err)
	}
	if n := calls.Load(); n != 4 {
		t.Errorf("%d handler calls, want 4: after two failures, a cut record and a failure the breaker is open, and the last record waits", n)
	}
}

// A FIFO record on the last receive its redrive policy allows, come while
// the breaker is open, runs rather than being postponed: postponed by its
// visibility (a copy would go behind the rest of its group), SQS would move
// it to the dead-letter queue on its next receive, though its job is not
// broken. Run, it waits in flight for the probe if its dependency is still
// down, as in the worker. Here the dependency is back before the breaker
// knows it: the record succeeds and nothing is dead-lettered.
func TestFIFOLastReceiveRunsWhileTheBreakerIsOpen(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	url := sqstest.QueueURL("orders.fifo")
	var down atomic.Bool
	down.Store(true)
	var ran []string
	var mu sync.Mutex
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		ran = append(ran, m.Body)
		mu.Unlock()
		if down.Load() {
			return sqsworker.Unavailable(errors.New("connection refused"))
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true,
		Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour}})
	resp, err := fn(context.Background(), received(t, f, "orders.fifo", "a"))
	if err != nil || len(resp.BatchItemFailures) != 1 {
		t.Fatalf("first invocation: %v %v", resp, err)
	}
	down.Store(false) // back, but the breaker stays open for an hour
	g, d := "other", "last"
	f.Send(url, "last", func(in *sqs.SendMessageInput) { in.MessageGroupId, in.MessageDeduplicationId = &g, &d })
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("received %d: %v", len(out.Messages), err)
	}
	ev := sqstest.SQSEvent(sqstest.QueueARN("orders.fifo"), out.Messages)
	ev.Records[0].Attributes[sqsworker.AttrReceiveCount] = "3" // maxReceiveCount
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err = fn(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("the record on its last receive: %v %v, want it run and done", resp, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 2 || ran[1] != "last" {
		t.Errorf("handlers ran for %v, want a and last", ran)
	}
}

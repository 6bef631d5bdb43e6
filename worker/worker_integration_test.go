package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A message that fails twice then succeeds is handled three times and deleted
// once.
func TestFailTwiceThenSucceed(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingSQS(t, &counter)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 5})
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			if n := rec.add(m.Body); n <= 2 {
				return fmt.Errorf("attempt %d: %w", n, errTransient)
			}
			return nil
		}))
	localtest.Send(t, c, q.URL, "", "flaky")
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "message not deleted")
	emptyEventually(t, c, q.URL, 10*time.Second)
	r.stop(10 * time.Second)
	if got := rec.count("flaky"); got != 3 {
		t.Errorf("handled %d times, want 3", got)
	}
	s := r.w.Stats()
	if s.Succeeded != 1 || s.Failed != 2 || s.Retried != 2 || s.Deleted != 1 || s.DeadLettered != 0 {
		t.Errorf("stats = %+v", s)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("dead-letter queue holds %d messages, want 0", v+f+d)
	}
}

func dlqMessages(t *testing.T, c *sqs.Client, q localtest.Queue, want int) []types.Message {
	t.Helper()
	var got []types.Message
	localtest.Eventually(t, 30*time.Second, func() bool {
		got = append(got, localtest.ReceiveAll(t, c, q.DLQURL, time.Second, 60*time.Second)...)
		return len(got) >= want
	}, "dead-letter queue holds %d messages, want %d", len(got), want)
	if len(got) != want {
		t.Fatalf("dead-letter queue holds %d messages, want %d", len(got), want)
	}
	return got
}

// A permanent failure reaches the DLQ after one attempt, with its metadata,
// its body and its attributes.
func TestPermanentGoesToDLQ(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 5})
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Backoff: noDelay, Host: "test-host"}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			rec.add(m.Body)
			return sqsworker.Permanent(errors.New("invalid order 42"))
		}))
	out, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{
		QueueUrl: &q.URL, MessageBody: aws.String(`{"order":42}`),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
			"blob":   {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := dlqMessages(t, c, q, 1)[0]
	emptyEventually(t, c, q.URL, 10*time.Second)
	if n := rec.count(`{"order":42}`); n != 1 {
		t.Errorf("handled %d times, want 1", n)
	}
	m := sqsmsg.FromSDK(q.DLQURL, &got)
	if m.Body != `{"order":42}` {
		t.Errorf("body = %q", m.Body)
	}
	if v, _ := m.Attribute("tenant"); v != "acme" {
		t.Errorf("tenant attribute = %q, want acme", v)
	}
	if b := m.MessageAttributes["blob"].BinaryValue; string(b) != "\x00\x01\x02" {
		t.Errorf("binary attribute = %v", b)
	}
	f, ok := sqsworker.ParseFailure(m.MessageAttributes)
	if !ok {
		t.Fatalf("no failure metadata in %v", m.MessageAttributes)
	}
	if f.Error != "permanent: invalid order 42" || f.ErrorClass != "*errors.errorString" || f.Attempts != 1 ||
		f.SourceQueue != q.URL || f.MessageID != aws.ToString(out.MessageId) || f.Host != "test-host" ||
		f.FirstReceived.IsZero() || f.FailedAt.Before(f.FirstReceived) {
		t.Errorf("failure metadata = %+v", f)
	}
	if s := r.w.Stats(); s.DeadLettered != 1 || s.Failed != 1 || s.Retried != 0 {
		t.Errorf("stats = %+v", s)
	}
}

// With maxReceiveCount 3, an always-failing message reaches the DLQ after
// exactly 3 attempts, with its metadata.
func TestAlwaysFailingReachesDLQAfterMaxReceiveCount(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	var rec recorder
	start(t, c, worker.Config{QueueURL: q.URL, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			rec.add(m.Body)
			return errClass{errTransient}
		}))
	localtest.Send(t, c, q.URL, "", "doomed")
	got := dlqMessages(t, c, q, 1)[0]
	emptyEventually(t, c, q.URL, 10*time.Second)
	if n := rec.count("doomed"); n != 3 {
		t.Errorf("handled %d times, want 3", n)
	}
	f, ok := sqsworker.ParseFailure(sqsmsg.FromSDK(q.DLQURL, &got).MessageAttributes)
	if !ok || f.Attempts != 3 || f.ErrorClass != "upstream-unavailable" || f.Error != "transient failure" {
		t.Errorf("failure metadata = %+v, %v", f, ok)
	}
}

type errClass struct{ error }

func (errClass) ErrorClass() string { return "upstream-unavailable" }

// Without a dead-letter queue, a permanent failure is not dropped: it is
// retried with backoff, and logged as an error.
func TestPermanentWithoutDLQIsKept(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			if rec.add(m.Body) < 3 {
				return sqsworker.Permanent(errors.New("bad"))
			}
			return nil
		}))
	localtest.Send(t, c, q.URL, "", "kept")
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "message not handled 3 times")
	if !strings.Contains(r.logs.String(), "no dead-letter queue") {
		t.Errorf("no error logged for a permanent failure without DLQ:\n%s", r.logs)
	}
	if s := r.w.Stats(); s.DeadLettered != 0 || s.Failed != 2 || s.Retried != 2 {
		t.Errorf("stats = %+v", s)
	}
}

// Panics are recovered and count as failures.
func TestPanicIsAFailure(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	start(t, c, worker.Config{QueueURL: q.URL, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error { panic("boom") }))
	localtest.Send(t, c, q.URL, "", "explodes")
	got := dlqMessages(t, c, q, 1)[0]
	f, _ := sqsworker.ParseFailure(sqsmsg.FromSDK(q.DLQURL, &got).MessageAttributes)
	if f.ErrorClass != "panic" || f.Error != "handler panic: boom" || f.Attempts != 2 {
		t.Errorf("failure metadata = %+v", f)
	}
}

// RetryAfter sets the message's next attempt to the given delay.
func TestRetryAfterDelays(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	var mu sync.Mutex
	var seen []time.Time
	r := start(t, c, worker.Config{QueueURL: q.URL}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, time.Now())
			if len(seen) == 1 {
				return sqsworker.RetryAfter(2*time.Second, errors.New("429"))
			}
			return nil
		}))
	localtest.Send(t, c, q.URL, "", "later")
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "message not deleted")
	mu.Lock()
	defer mu.Unlock()
	if gap := seen[1].Sub(seen[0]); gap < 1900*time.Millisecond {
		t.Errorf("second attempt %s after the first, want >= 2s", gap)
	}
}

// The handler's failure delay follows the backoff policy: the message is not
// receivable before its delay.
func TestBackoffDelayHoldsMessageBack(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	fixed := sqsworker.BackoffFunc(func(attempt int, err error) time.Duration { return 3 * time.Second })
	var mu sync.Mutex
	var seen []time.Time
	r := start(t, c, worker.Config{QueueURL: q.URL, Backoff: fixed}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, time.Now())
			if len(seen) == 1 {
				return errTransient
			}
			return nil
		}))
	localtest.Send(t, c, q.URL, "", "backoff")
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "message not deleted")
	mu.Lock()
	defer mu.Unlock()
	if gap := seen[1].Sub(seen[0]); gap < 2900*time.Millisecond {
		t.Errorf("second attempt %s after the first, want >= 3s", gap)
	}
}

// The concurrency limit is never exceeded, and the worker never holds more
// messages than it has handler slots.
func TestConcurrencyLimit(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingSQS(t, &counter)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	const limit, total = 5, 60
	var cur, peak atomic.Int64
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: limit, Pollers: 3}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			n := cur.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(30 * time.Millisecond)
			rec.add(m.Body)
			cur.Add(-1)
			return nil
		}))
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	// Sample the messages received but not yet handled while the worker runs.
	var maxHeld int64
	deadline := time.Now().Add(60 * time.Second)
	for r.w.Stats().Deleted < total && time.Now().Before(deadline) {
		received := r.w.Stats().Received
		maxHeld = max(maxHeld, received-int64(rec.total()))
		time.Sleep(time.Millisecond)
	}
	if p := peak.Load(); p > limit || p < 2 {
		t.Errorf("peak concurrency %d, want 2..%d", p, limit)
	}
	if maxHeld > limit {
		t.Errorf("%d messages received and not yet handled at once, want at most %d", maxHeld, limit)
	}
	for _, b := range bodies {
		if n := rec.count(b); n != 1 {
			t.Errorf("message %s handled %d times", b, n)
		}
	}
}

// Any message body, however odd, reaches the handler unchanged.
func TestOddBodiesReachHandler(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	bodies := []string{
		"{not json", " ", "\t\n\r", "ünïcödé ✓ \uE000", strings.Repeat("x", 256*1024),
		"<xml attr=\"1\">", `{"deeply":` + strings.Repeat("[", 500) + strings.Repeat("]", 500) + "}",
	}
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error { rec.add(m.Body); return nil }))
	localtest.Send(t, c, q.URL, "", bodies...)
	localtest.Eventually(t, 30*time.Second, func() bool { return r.w.Stats().Deleted == int64(len(bodies)) }, "not all deleted")
	for _, b := range bodies {
		if rec.count(b) != 1 {
			t.Errorf("body %.20q handled %d times", b, rec.count(b))
		}
	}
}

// The handler timeout cancels the handler's context with ErrHandlerTimeout
// and counts as a failure.
func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 1})
	causes := make(chan error, 1)
	start(t, c, worker.Config{QueueURL: q.URL, HandlerTimeout: 200 * time.Millisecond}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}))
	localtest.Send(t, c, q.URL, "", "slow")
	if cause := <-causes; !errors.Is(cause, worker.ErrHandlerTimeout) {
		t.Errorf("cause = %v, want ErrHandlerTimeout", cause)
	}
	got := dlqMessages(t, c, q, 1)[0]
	f, _ := sqsworker.ParseFailure(sqsmsg.FromSDK(q.DLQURL, &got).MessageAttributes)
	if f.ErrorClass != "timeout" {
		t.Errorf("error class %q, want timeout", f.ErrorClass)
	}
}

// Shutdown during in-flight work loses nothing: running handlers finish and
// their messages are deleted; messages never started stay in the queue.
func TestShutdownLosesNothing(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	started := make(chan string, 10)
	release := make(chan struct{})
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 2}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			started <- m.Body
			<-release
			rec.add(m.Body)
			return nil
		}))
	bodies := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}
	localtest.Send(t, c, q.URL, "", bodies...)
	<-started
	<-started
	stopped := make(chan struct{})
	go func() { r.stop(30 * time.Second); close(stopped) }()
	time.Sleep(200 * time.Millisecond) // Shutdown is waiting for the handlers
	close(release)
	<-stopped
	if s := r.w.Stats(); s.Received != 2 || s.Deleted != 2 || s.Released != 0 {
		t.Errorf("stats after shutdown = %+v, want 2 received and deleted", s)
	}
	left := localtest.ReceiveAll(t, c, q.URL, time.Second, 60*time.Second)
	seen := map[string]bool{}
	for _, m := range left {
		seen[aws.ToString(m.Body)] = true
	}
	for _, b := range bodies {
		if seen[b] == (rec.count(b) == 1) {
			t.Errorf("message %s: handled %d times, left in queue %v", b, rec.count(b), seen[b])
		}
	}
}

// At the shutdown deadline running handlers are cancelled with ErrShutdown
// and their messages become visible again at once.
func TestShutdownDeadlineReleasesRunning(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Minute})
	started := make(chan struct{}, 3)
	causes := make(chan error, 3)
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 3}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			started <- struct{}{}
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}))
	localtest.Send(t, c, q.URL, "", "a", "b", "c")
	for range 3 {
		<-started
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.w.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded", err)
	}
	r.stop(10 * time.Second)
	for range 3 {
		if c := <-causes; !errors.Is(c, worker.ErrShutdown) {
			t.Errorf("cause = %v, want ErrShutdown", c)
		}
	}
	// Visible again within a second, not after the 5-minute timeout.
	got := localtest.ReceiveAll(t, c, q.URL, 1500*time.Millisecond, 60*time.Second)
	if len(got) != 3 {
		t.Errorf("%d messages visible after shutdown, want 3", len(got))
	}
}

// A handler cut short at the shutdown deadline has its message released
// only once the worker's last long polls have ended: released at once, one
// of them (Shutdown does not cut them short) would take it again, a receive
// more, one step nearer the dead-letter queue.
func TestShutdownDeadlineReleaseIsNotReceivedAgain(t *testing.T) {
	t.Parallel()
	var calls localtest.Counter
	c := localtest.NewCountingSQS(t, &calls)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Minute})
	started := make(chan struct{}, 1)
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 3 * time.Second},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}))
	localtest.Send(t, c, q.URL, "", "m")
	<-started
	// Both loops wait in long polls: the message's loop has a free slot again.
	base := calls.Get("ReceiveMessage")
	localtest.Eventually(t, 30*time.Second, func() bool { return calls.Get("ReceiveMessage") >= base+2 }, "no long poll under way")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	r.stop(30 * time.Second)
	if s := r.w.Stats(); s.Received != 1 {
		t.Errorf("the worker received the message %d times, want once: its own last long poll took the released message again", s.Received)
	}
	got := localtest.ReceiveAll(t, c, q.URL, 1500*time.Millisecond, 60*time.Second)
	if len(got) != 1 {
		t.Fatalf("%d messages visible after the shutdown, want the released one", len(got))
	}
	if n := got[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
	}
}

// A handler cut short at the shutdown deadline, whose lease ends before the
// last receives do, has its message hidden until they have surely ended:
// a last receive that reaches the queue late (5s, with 2s long polls and a
// 4s lease: as a receive the SDK sends again) does not take it again. Once
// the receives have ended it is visible at once, received once.
func TestShutdownDeadlineReleaseLateLastReceive(t *testing.T) {
	t.Parallel()
	for _, heartbeat := range []bool{true, false} {
		t.Run(fmt.Sprint("heartbeat=", heartbeat), func(t *testing.T) {
			t.Parallel()
			c := localtest.NewSQS(t)
			q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 4 * time.Second})
			api := &lateReceives{API: c, late: 5 * time.Second, entered: make(chan struct{})}
			stopBehindLateReceive(t, api, q.URL, func() { localtest.Send(t, c, q.URL, "", "m") }, heartbeat, untilCancelled)
			got := localtest.ReceiveAll(t, c, q.URL, 1500*time.Millisecond, 60*time.Second)
			if len(got) != 1 {
				t.Fatalf("%d messages visible after the shutdown, want the released one", len(got))
			}
			if n := got[0].Attributes["ApproximateReceiveCount"]; n != "2" {
				t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
			}
		})
	}
}

// A message a last long poll brings while the worker stops, with a lease
// shorter than the other loop's last long poll, is released unstarted and
// not taken again by that poll: it comes back received once. The emulator
// passes this with the message released only after the polls, too (its
// long poll under way did not take the message when the visibility timeout
// ran out); the in-memory fake, which hands it over as SQS does, shows the
// difference: TestFakeReceivedWhileStoppingShortLease.
func TestReceivedWhileStoppingShortLease(t *testing.T) {
	t.Parallel()
	var calls localtest.Counter
	c := localtest.NewCountingSQS(t, &calls)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second})
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 10 * time.Second,
		DisableHeartbeat: true, DisableDepth: true},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			t.Errorf("handler ran for %s while the worker was stopping", m.ID)
			return nil
		}))
	localtest.Eventually(t, 30*time.Second, func() bool { return calls.Get("ReceiveMessage") >= 2 }, "the loops do not poll")
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = r.w.Shutdown(context.Background())
	}()
	localtest.Eventually(t, 30*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
	localtest.Send(t, c, q.URL, "", "m") // taken by one of the two long polls under way
	<-stopped
	r.stop(30 * time.Second)
	if s := r.w.Stats(); s.Received != 1 || s.AckFailures != 0 {
		t.Errorf("stats %+v: want the message received once (the worker's own last long poll took it again?), no acknowledgement failure", s)
	}
	got := localtest.ReceiveAll(t, c, q.URL, 15*time.Second, 60*time.Second)
	if len(got) != 1 {
		t.Fatalf("%d messages visible after the stop, want the released one", len(got))
	}
	if n := got[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
	}
}

// A message sent while the worker shuts down is not swallowed by the long
// poll under way: it is released at once, not left invisible for the
// visibility timeout.
func TestShutdownDuringLongPollHidesNothing(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Minute})
	polls := &pollCount{API: c}
	r := start(t, polls, worker.Config{QueueURL: q.URL, WaitTime: 3 * time.Second}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error { return nil }))
	polls.under(t, 1) // the poller waits in a long poll
	stopped := make(chan struct{})
	go func() { r.stop(30 * time.Second); close(stopped) }()
	time.Sleep(200 * time.Millisecond)
	localtest.Send(t, c, q.URL, "", "late")
	<-stopped
	got := localtest.ReceiveAll(t, c, q.URL, time.Second, 60*time.Second)
	if len(got) != 1 {
		t.Errorf("%d messages visible after shutdown, want the late one (stats %+v)", len(got), r.w.Stats())
	}
}

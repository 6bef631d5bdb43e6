package worker_test

// Unit tests of the worker against sqstest.Fake, for what the emulator cannot
// show: SQS's several messages of one FIFO group per receive, and injected
// failures of single calls and batch entries.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// fakeFIFO creates a FIFO queue on f and returns its URL.
func fakeFIFO(f *sqstest.Fake, name string, attrs map[string]string) string {
	a := map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}
	for k, v := range attrs {
		a[k] = v
	}
	return f.CreateQueue(name+".fifo", a)
}

// fakeGroup sends each body to group of a FIFO queue, in order.
func fakeGroup(f *sqstest.Fake, url, group string, bodies ...string) {
	for _, b := range bodies {
		f.Send(url, b, func(in *sqs.SendMessageInput) {
			in.MessageGroupId = aws.String(group)
			in.MessageDeduplicationId = aws.String(b)
		})
	}
}

// fakeCall is one handler call.
type fakeCall struct {
	body         string
	receiveCount int
}

// fakeCalls records handler calls in order.
type fakeCalls struct {
	mu    sync.Mutex
	calls []fakeCall
}

func (c *fakeCalls) add(m *sqsworker.Message) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fakeCall{m.Body, m.ReceiveCount})
	n := 0
	for _, x := range c.calls {
		if x.body == m.Body {
			n++
		}
	}
	return n
}

// of returns the calls whose body starts with prefix, in order.
func (c *fakeCalls) of(prefix string) []fakeCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []fakeCall
	for _, x := range c.calls {
		if strings.HasPrefix(x.body, prefix) {
			out = append(out, x)
		}
	}
	return out
}

// FIFO: five messages of a group come in one receive; when the third fails,
// the two after it are released at once, unhandled, and handled in order
// after the third succeeds; another group in the same receive runs on.
func TestFakeFIFOFailureReleasesRestOfGroup(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := fakeFIFO(f, "orders", nil)
	// Interleaved: g0 h0 g1 h1 g2 h2 g3 g4.
	for i := range 5 {
		fakeGroup(f, url, "g", fmt.Sprintf("g%d", i))
		if i < 3 {
			fakeGroup(f, url, "h", fmt.Sprintf("h%d", i))
		}
	}
	var calls fakeCalls
	r := start(t, f, worker.Config{QueueURL: url, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			if calls.add(m) == 1 && m.Body == "g2" {
				return errTransient
			}
			return nil
		}))
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 8 }, "not all 8 messages deleted: %+v", r.w.Stats())
	// Nothing else happens afterwards.
	time.Sleep(100 * time.Millisecond)
	if got := r.w.Stats(); got.Released != 2 || got.Failed != 1 || got.Retried != 1 || got.Succeeded != 8 || got.AckFailures != 0 {
		t.Errorf("stats = %+v, want 2 released, 1 failed and retried, 8 succeeded", got)
	}
	want := []fakeCall{{"g0", 1}, {"g1", 1}, {"g2", 1}, {"g2", 2}, {"g3", 2}, {"g4", 2}}
	if got := calls.of("g"); !slices.Equal(got, want) {
		t.Errorf("group g handled as %v, want %v (g3 and g4 released unhandled, then received again)", got, want)
	}
	if got := calls.of("h"); !slices.Equal(got, []fakeCall{{"h0", 1}, {"h1", 1}, {"h2", 1}}) {
		t.Errorf("group h handled as %v, want h0 h1 h2 once each, from the first receive", got)
	}
	if n := f.Calls(sqstest.OpReceiveMessage); n < 2 {
		t.Errorf("%d receives", n)
	}
	if v, fl, d := f.Depth(url); v+fl+d != 0 {
		t.Errorf("queue depth %d %d %d, want empty", v, fl, d)
	}
}

// fakeWatch wraps a Fake and reports receives: how many began, and when one
// ended because its context was cancelled, that is, when the worker stopped
// receiving.
type fakeWatch struct {
	*sqstest.Fake
	once    sync.Once
	stopped chan struct{}
}

func (w *fakeWatch) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := w.Fake.ReceiveMessage(ctx, in, opts...)
	if err != nil && ctx.Err() != nil {
		w.once.Do(func() { close(w.stopped) })
	}
	return out, err
}

// FIFO shutdown: of five messages of a group received together, the first is
// being handled when Shutdown is called; it finishes and is deleted, and the
// four others are released at once, unhandled.
func TestFakeFIFOShutdownReleasesRestOfGroup(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := fakeFIFO(f, "shutdown", map[string]string{"VisibilityTimeout": "300"})
	fakeGroup(f, url, "g", "g0", "g1", "g2", "g3", "g4")
	// The poller is in its next long poll (the group is locked, so it
	// waits there) when Shutdown is called; that poll runs to its end.
	r, calls, before := shutDownWhileG0Runs(t, f, url, 2)
	if after := f.Calls(sqstest.OpReceiveMessage); after != before {
		t.Errorf("%d receives started after Shutdown", after-before)
	}
	if s := r.w.Stats(); s.Received != 5 || s.Succeeded != 1 || s.Deleted != 1 || s.Released != 4 || s.AckFailures != 0 {
		t.Errorf("stats = %+v, want 5 received, 1 deleted, 4 released", s)
	}
	if got := calls.of(""); !slices.Equal(got, []fakeCall{{"g0", 1}}) {
		t.Errorf("handled %v, want only g0", got)
	}
	// Receivable at once, not after the 300s visibility timeout.
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range out.Messages {
		got = append(got, aws.ToString(m.Body))
	}
	if !slices.Equal(got, []string{"g1", "g2", "g3", "g4"}) {
		t.Errorf("after shutdown received %q, want g1..g4", got)
	}
}

// shutDownWhileG0Runs starts a worker on the fake FIFO queue url whose
// handler holds g0 until Shutdown is called, once the fake has seen
// receives receives (the worker's next long poll under way, its group
// locked), then lets g0 end and waits for Shutdown to return. It returns
// the worker, its handler's calls, and the receives made before g0 ended.
func shutDownWhileG0Runs(t *testing.T, f *sqstest.Fake, url string, receives int) (*running, *fakeCalls, int) {
	t.Helper()
	api := &fakeWatch{Fake: f, stopped: make(chan struct{})}
	started := make(chan struct{})
	unblock := make(chan struct{})
	calls := &fakeCalls{}
	r := start(t, api, worker.Config{QueueURL: url, WaitTime: 2 * time.Second}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			calls.add(m)
			if m.Body != "g0" {
				return nil
			}
			close(started)
			select {
			case <-unblock:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
	<-started
	localtest.Eventually(t, 10*time.Second, func() bool { return f.Calls(sqstest.OpReceiveMessage) >= receives }, "no receive after g0's")
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- r.w.Shutdown(ctx)
	}()
	time.Sleep(100 * time.Millisecond) // Shutdown waits for g0
	before := f.Calls(sqstest.OpReceiveMessage)
	close(unblock)
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	return r, calls, before
}

// fakeOne starts a worker on a standard queue with one message and returns
// it once the message was handled.
func fakeOne(t *testing.T, f *sqstest.Fake, queueAttrs map[string]string, h sqsworker.HandlerFunc) (*running, string) {
	t.Helper()
	url := f.CreateQueue("q", queueAttrs)
	f.Send(url, "m")
	return start(t, f, worker.Config{QueueURL: url, Backoff: noDelay}, h), url
}

// A delete that fails as a whole, twice, is retried and succeeds.
func TestFakeDeleteCallFailuresAreRetried(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"server error":  &smithy.GenericAPIError{Code: "InternalError", Message: "try again", Fault: smithy.FaultServer},
		"network error": &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")},
		"throttled":     &smithy.GenericAPIError{Code: "RequestThrottled", Fault: smithy.FaultClient},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := sqstest.NewFake()
			f.FailNext(sqstest.OpDeleteMessageBatch, err, 2)
			r, url := fakeOne(t, f, nil, func(ctx context.Context, m *sqsworker.Message) error { return nil })
			localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "not deleted: %+v", r.w.Stats())
			if s := r.w.Stats(); s.AckFailures != 0 {
				t.Errorf("stats = %+v", s)
			}
			if n := f.Calls(sqstest.OpDeleteMessageBatch); n != 3 {
				t.Errorf("%d DeleteMessageBatch calls, want 3", n)
			}
			if v, fl, d := f.Depth(url); v+fl+d != 0 {
				t.Errorf("queue depth %d %d %d", v, fl, d)
			}
		})
	}
}

// Entries that fail through SQS's fault are retried; those that fail through
// the caller's are not: they count as acknowledgement failures, and the
// worker runs on.
func TestFakeDeleteEntryFailures(t *testing.T) {
	t.Parallel()
	t.Run("retryable", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		f.FailEntries(sqstest.OpDeleteMessageBatch, "InternalError", false, 2)
		r, url := fakeOne(t, f, nil, func(ctx context.Context, m *sqsworker.Message) error { return nil })
		localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "not deleted: %+v", r.w.Stats())
		if s := r.w.Stats(); s.AckFailures != 0 {
			t.Errorf("stats = %+v", s)
		}
		if n := f.Calls(sqstest.OpDeleteMessageBatch); n != 3 {
			t.Errorf("%d DeleteMessageBatch calls, want 3", n)
		}
		if v, fl, d := f.Depth(url); v+fl+d != 0 {
			t.Errorf("queue depth %d %d %d", v, fl, d)
		}
	})
	t.Run("permanent", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		f.FailEntries(sqstest.OpDeleteMessageBatch, "ReceiptHandleIsInvalid", true, 1)
		var calls fakeCalls
		r, url := fakeOne(t, f, map[string]string{"VisibilityTimeout": "1"}, func(ctx context.Context, m *sqsworker.Message) error {
			calls.add(m)
			return nil
		})
		localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().AckFailures == 1 }, "no acknowledgement failure: %+v", r.w.Stats())
		if n := f.Calls(sqstest.OpDeleteMessageBatch); n != 1 {
			t.Errorf("%d DeleteMessageBatch calls, want 1: a sender fault is not retried", n)
		}
		// The counter is bumped before the log line is written.
		localtest.Eventually(t, 5*time.Second, func() bool { return strings.Contains(r.logs.String(), "ReceiptHandleIsInvalid") },
			"the failure is not logged")
		// The worker runs on: a new message is handled, and the first one
		// comes back after its visibility timeout and is deleted.
		f.Send(url, "next")
		localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 2 }, "not deleted: %+v", r.w.Stats())
		if got := calls.of("m"); len(got) != 2 || got[1].receiveCount != 2 {
			t.Errorf("m handled as %v, want twice", got)
		}
		if v, fl, d := f.Depth(url); v+fl+d != 0 {
			t.Errorf("queue depth %d %d %d", v, fl, d)
		}
	})
}

// Receive errors that may pass are retried with backoff; the message is then
// handled.
func TestFakeReceiveErrorsAreRetried(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"throttled":     &smithy.GenericAPIError{Code: "RequestThrottled", Message: "slow down", Fault: smithy.FaultClient},
		"network error": &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")},
		"server error":  &smithy.GenericAPIError{Code: "ServiceUnavailable", Fault: smithy.FaultServer},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := sqstest.NewFake()
			f.FailNext(sqstest.OpReceiveMessage, err, 3)
			var calls fakeCalls
			r, _ := fakeOne(t, f, nil, func(ctx context.Context, m *sqsworker.Message) error { calls.add(m); return nil })
			localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "not handled: %+v", r.w.Stats())
			if n := f.Calls(sqstest.OpReceiveMessage); n < 4 {
				t.Errorf("%d receives, want at least 4", n)
			}
			if n := strings.Count(r.logs.String(), "receive failed, retrying"); n != 3 {
				t.Errorf("%d retries logged, want 3:\n%s", n, r.logs)
			}
			if got := calls.of("m"); len(got) != 1 {
				t.Errorf("handled %v", got)
			}
		})
	}
}

// fakeRunErr runs a worker until Run returns, within 10s, and returns Run's
// error.
func fakeRunErr(t *testing.T, api worker.API, cfg worker.Config) error {
	t.Helper()
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := worker.New(api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		<-done
		t.Fatalf("Run did not return an error; logs:\n%s", logs)
		return nil
	}
}

// Fatal receive errors stop the worker: Run returns an error that names them.
func TestFakeFatalReceiveErrorStopsRun(t *testing.T) {
	t.Parallel()
	t.Run("queue deleted", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		url := f.CreateQueue("q", nil)
		f.FailNext(sqstest.OpReceiveMessage, &types.QueueDoesNotExist{Message: aws.String("The specified queue does not exist.")}, 1)
		err := fakeRunErr(t, f, worker.Config{QueueURL: url})
		var dne *types.QueueDoesNotExist
		if !errors.As(err, &dne) || !strings.Contains(err.Error(), "QueueDoesNotExist") || !strings.Contains(err.Error(), url) {
			t.Errorf("Run = %v, want a QueueDoesNotExist error naming the queue", err)
		}
	})
	t.Run("access denied", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		url := f.CreateQueue("q", nil)
		f.FailNext(sqstest.OpReceiveMessage, &smithy.GenericAPIError{Code: "AccessDenied", Message: "not allowed", Fault: smithy.FaultClient}, 1)
		err := fakeRunErr(t, f, worker.Config{QueueURL: url})
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" || !strings.Contains(err.Error(), "AccessDenied") {
			t.Errorf("Run = %v, want an AccessDenied error", err)
		}
	})
	t.Run("deleted while running", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		url := f.CreateQueue("q", nil)
		done := make(chan error, 1)
		go func() { done <- fakeRunErr(t, f, worker.Config{QueueURL: url}) }()
		localtest.Eventually(t, 10*time.Second, func() bool { return f.Calls(sqstest.OpReceiveMessage) >= 1 }, "no receive")
		f.DeleteQueue(url)
		var dne *types.QueueDoesNotExist
		if err := <-done; !errors.As(err, &dne) {
			t.Errorf("Run = %v, want QueueDoesNotExist", err)
		}
	})
}

// Start-up: Run refuses a queue it cannot use.
func TestFakeStartupErrors(t *testing.T) {
	t.Parallel()
	t.Run("missing queue", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		err := fakeRunErr(t, f, worker.Config{QueueURL: sqstest.QueueURL("nope")})
		var dne *types.QueueDoesNotExist
		if !errors.As(err, &dne) {
			t.Errorf("Run = %v, want *types.QueueDoesNotExist", err)
		}
		if n := f.Calls(sqstest.OpReceiveMessage); n != 0 {
			t.Errorf("%d receives from a missing queue", n)
		}
	})
	for name, policy := range map[string]string{
		"no maxReceiveCount": `{"deadLetterTargetArn":"x"}`,
		"not JSON":           `deadLetterTargetArn=x`,
		"bad ARN":            `{"deadLetterTargetArn":"x","maxReceiveCount":3}`,
		"zero count":         `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":0}`,
	} {
		t.Run("redrive policy "+name, func(t *testing.T) {
			t.Parallel()
			f := sqstest.NewFake()
			f.CreateQueue("dlq", nil)
			url := f.CreateQueue("q", nil)
			f.SetAttribute(url, "RedrivePolicy", policy)
			err := fakeRunErr(t, f, worker.Config{QueueURL: url})
			if err == nil || !strings.Contains(err.Error(), "redrive policy") {
				t.Errorf("Run = %v, want an error about the redrive policy", err)
			}
			if n := f.Calls(sqstest.OpGetQueueAttributes); n != 1 {
				t.Errorf("%d GetQueueAttributes calls: a malformed policy is not retried", n)
			}
		})
	}
	t.Run("dead-letter queue missing", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		url := f.CreateQueue("q", nil)
		f.SetAttribute(url, "RedrivePolicy", `{"deadLetterTargetArn":"`+sqstest.QueueARN("gone")+`","maxReceiveCount":3}`)
		err := fakeRunErr(t, f, worker.Config{QueueURL: url})
		var dne *types.QueueDoesNotExist
		if !errors.As(err, &dne) || !strings.Contains(err.Error(), "gone") {
			t.Errorf("Run = %v, want QueueDoesNotExist naming the dead-letter queue", err)
		}
	})
	t.Run("MaxReceiveCount above the policy's", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		f.CreateQueue("dlq", nil)
		url := f.CreateQueue("q", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":"3"}`})
		err := fakeRunErr(t, f, worker.Config{QueueURL: url, MaxReceiveCount: 5})
		if err == nil || !strings.Contains(err.Error(), "MaxReceiveCount 5") || !strings.Contains(err.Error(), "maxReceiveCount 3") {
			t.Errorf("Run = %v, want an error comparing 5 with 3", err)
		}
	})
	t.Run("transient errors are retried", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		url := f.CreateQueue("q", nil)
		f.FailNext(sqstest.OpGetQueueAttributes, &smithy.GenericAPIError{Code: "RequestThrottled", Fault: smithy.FaultClient}, 2)
		f.Send(url, "m")
		r := start(t, f, worker.Config{QueueURL: url}, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
		localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "not handled: %+v", r.w.Stats())
		if n := f.Calls(sqstest.OpGetQueueAttributes); n != 3 {
			t.Errorf("%d GetQueueAttributes calls, want 3", n)
		}
	})
}

// A dead-letter move that fails leaves the message to be retried; the next
// attempt moves it.
func TestFakeDeadLetterMoveFailure(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	dlq := f.CreateQueue("dlq", nil)
	url := f.CreateQueue("q", map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":5}`})
	f.Send(url, "bad")
	f.FailNext(sqstest.OpSendMessage, &net.OpError{Op: "write", Net: "tcp", Err: errors.New("broken pipe")}, 1)
	var calls fakeCalls
	r := start(t, f, worker.Config{QueueURL: url, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			calls.add(m)
			return sqsworker.Permanent(errors.New("invalid"))
		}))
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().DeadLettered == 1 && r.w.Stats().Deleted == 1 }, "not dead-lettered: %+v", r.w.Stats())
	if s := r.w.Stats(); s.MoveFailures != 1 || s.Failed != 2 || s.Retried != 1 || s.AckFailures != 0 {
		t.Errorf("stats = %+v, want 1 move failure, 2 failures, 1 retry", s)
	}
	if got := calls.of("bad"); !slices.Equal(got, []fakeCall{{"bad", 1}, {"bad", 2}}) {
		t.Errorf("handled %v, want twice", got)
	}
	if n := f.Calls(sqstest.OpSendMessage); n != 2 {
		t.Errorf("%d SendMessage calls, want 2", n)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &dlq, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("dead-letter queue: %v, %d messages", err, len(out.Messages))
	}
	m := sqsmsg.FromSDK(dlq, &out.Messages[0])
	if fl, ok := sqsworker.ParseFailure(m.MessageAttributes); !ok || fl.Attempts != 2 || fl.Error != "permanent: invalid" || fl.SourceQueue != url {
		t.Errorf("failure metadata %+v, %v", fl, ok)
	}
	if v, fl, d := f.Depth(url); v+fl+d != 0 {
		t.Errorf("source queue depth %d %d %d", v, fl, d)
	}
}

// FIFO: the messages of a group received together wait in their group's
// goroutine while the ones before them are handled, but their visibility
// timeout runs from the receive. A group that takes longer than the
// visibility timeout must not see its waiting messages handed out again and
// handled twice, in parallel and out of order: the worker releases them once
// half of their lease is gone.
func TestFakeFIFOGroupOutlivingVisibilityTimeout(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	// 2s, handlers of 600ms: the group (3s) outlives it, and the last
	// message run before the others are released (at 1s) ends at 1.2s,
	// leaving its delete 0.7s: with 1s and 400ms it had 0.1s after the
	// ack interval, which a loaded machine running the tests with -race
	// used up, and the message came back to be handled twice.
	url := fakeFIFO(f, "lease", map[string]string{"VisibilityTimeout": "2"})
	fakeGroup(f, url, "g", "g0", "g1", "g2", "g3", "g4")
	var mu sync.Mutex
	running, maxRunning := 0, 0
	var calls fakeCalls
	r := start(t, f, worker.Config{QueueURL: url, DisableHeartbeat: true}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			calls.add(m)
			mu.Lock()
			running++
			maxRunning = max(maxRunning, running)
			mu.Unlock()
			time.Sleep(600 * time.Millisecond) // each within the 2s timeout
			mu.Lock()
			running--
			mu.Unlock()
			return nil
		}))
	localtest.Eventually(t, 20*time.Second, func() bool { v, fl, d := f.Depth(url); return v+fl+d == 0 }, "queue not drained")
	time.Sleep(500 * time.Millisecond)
	var order []string
	for _, c := range calls.of("") {
		order = append(order, c.body)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRunning > 1 {
		t.Errorf("%d handlers of one FIFO group ran at once", maxRunning)
	}
	if !slices.Equal(order, []string{"g0", "g1", "g2", "g3", "g4"}) {
		t.Errorf("handled %v, want g0..g4 once each, in order", order)
	}
	if s := r.w.Stats(); s.AckFailures != 0 {
		t.Errorf("stats = %+v, want no acknowledgement failure", s)
	}
}

// The default handler timeout ends before the message's lease, counted from
// the receive: the timed-out handler's visibility change still holds the
// message, and its retry comes after the backoff delay, not at once.
func TestFakeHandlerTimeoutOutlivesVisibility(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "1"})
	f.Send(url, "m")
	var mu sync.Mutex
	var at []time.Time
	backoff := sqsworker.BackoffFunc(func(int, error) time.Duration { return 3 * time.Second })
	r := start(t, f, worker.Config{QueueURL: url, Backoff: backoff, DisableHeartbeat: true}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			mu.Lock()
			at = append(at, time.Now())
			mu.Unlock()
			if m.ReceiveCount == 1 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
	localtest.Eventually(t, 20*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "not deleted")
	mu.Lock()
	defer mu.Unlock()
	if gap := at[1].Sub(at[0]); gap < 3*time.Second {
		t.Errorf("retried %s after the first attempt, want the 3s backoff after its 1s timeout", gap.Round(time.Millisecond))
	}
	if s := r.w.Stats(); s.AckFailures != 0 {
		t.Errorf("stats = %+v, want no acknowledgement failure", s)
	}
}

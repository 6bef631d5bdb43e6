package keybreaker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/keybreaker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// endpoint is a webhook receiver on the loopback interface: it answers 503
// while down, answers nothing while it swallows requests (until the caller
// gives up), else records the delivery.
type endpoint struct {
	srv     *httptest.Server
	down    atomic.Bool
	swallow atomic.Bool
	calls   atomic.Int64
	mu      sync.Mutex
	got     map[string]int // deliveries answered 200, by job
}

func newEndpoint(t *testing.T) *endpoint {
	e := &endpoint{got: map[string]int{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		body, _ := io.ReadAll(r.Body)
		if e.swallow.Load() {
			<-r.Context().Done()
			return
		}
		if e.down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		e.mu.Lock()
		e.got[string(body)]++
		e.mu.Unlock()
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *endpoint) delivered() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.got))
	for k, v := range e.got {
		out[k] = v
	}
	return out
}

// deliver posts the job's body to the endpoint its "endpoint" attribute
// names: a 5xx or a failed call is the endpoint down (PartlyUnavailable),
// a 4xx the job's fault.
var deliver = sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
	url, _ := m.Attribute("endpoint")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(m.Body))
	if err != nil {
		return sqsworker.Permanent(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return sqsworker.PartlyUnavailable(err)
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return sqsworker.PartlyUnavailable(fmt.Errorf("POST %s: %s", url, resp.Status))
	case resp.StatusCode >= 400:
		return sqsworker.Permanent(fmt.Errorf("POST %s: %s", url, resp.Status))
	}
	return nil
})

// newWebhookBreaker keys jobs by their "endpoint" attribute, opening a key
// after failures in a row for 1 s at first, 2 s at most.
func newWebhookBreaker(t *testing.T, failures int) *keybreaker.Breaker {
	t.Helper()
	kb, err := keybreaker.New(keybreaker.Config{
		Key:        func(m *sqsworker.Message) string { u, _ := m.Attribute("endpoint"); return u },
		Failures:   failures,
		OpenFor:    time.Second,
		MaxOpenFor: 2 * time.Second,
		Logger:     quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return kb
}

// deliveredOnce asserts that the endpoint received each of jobs once.
func deliveredOnce(t *testing.T, e *endpoint, jobs []string) {
	t.Helper()
	got := e.delivered()
	for _, j := range jobs {
		if got[j] != 1 {
			t.Errorf("%s delivered %d times, want 1", j, got[j])
		}
	}
}

// spared asserts that the down endpoint was called no more than failures
// in a row, concurrency in flight at once and one per probe allow, and that
// jobs of its key were skipped.
func spared(t *testing.T, down *endpoint, kb *keybreaker.Breaker, failures, concurrency int) {
	t.Helper()
	s := kb.Stats()
	calls := down.calls.Load()
	if calls > int64(failures+concurrency)+s.Probes {
		t.Errorf("the down endpoint was called %d times, want at most %d failures in a row, %d in flight at once and %d probes",
			calls, failures, concurrency, s.Probes)
	}
	if s.Skipped == 0 {
		t.Errorf("keybreaker %+v: no job skipped", s)
	}
	t.Logf("while down: endpoint called %d times; keybreaker %+v", calls, s)
}

// runWorker runs a worker on the queue at url with h, Concurrency
// concurrency and a short backoff, until the test ends; it then shuts it
// down and checks that Run returned nil.
func runWorker(t *testing.T, c *sqs.Client, url string, concurrency int, h sqsworker.Handler) *worker.Worker {
	t.Helper()
	return runWorkerWith(t, c, worker.Config{QueueURL: url, Concurrency: concurrency}, h)
}

// runWorkerWith is runWorker with cfg, to which it adds a 1 s long poll,
// the short backoff and a quiet logger.
func runWorkerWith(t *testing.T, c *sqs.Client, cfg worker.Config, h sqsworker.Handler) *worker.Worker {
	t.Helper()
	cfg.WaitTime, cfg.Logger = time.Second, quiet()
	cfg.Backoff = sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second}
	w, err := worker.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background(), h) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

func sendTo(t *testing.T, c *sqs.Client, queueURL, endpoint, prefix string, n int) []string {
	t.Helper()
	var bodies []string
	for start := 0; start < n; start += 10 {
		in := &sqs.SendMessageBatchInput{QueueUrl: &queueURL}
		for i := start; i < min(start+10, n); i++ {
			body := fmt.Sprint(prefix, i)
			bodies = append(bodies, body)
			in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i)), MessageBody: &body,
				MessageAttributes: map[string]types.MessageAttributeValue{"endpoint": {DataType: aws.String("String"), StringValue: aws.String(endpoint)}}})
		}
		if out, err := c.SendMessageBatch(context.Background(), in); err != nil || len(out.Failed) > 0 {
			t.Fatalf("SendMessageBatch: %v %+v", err, out)
		}
	}
	return bodies
}

// Webhook delivery on the emulator: one endpoint of two is down. Its jobs
// stop reaching it after three failures in a row, but for a probe per
// interval; the other endpoint's jobs are delivered meanwhile; the worker's
// own breaker stays closed. Once the endpoint is back, its jobs are
// delivered, each once, and none was dead-lettered, though each was
// received far more often than the queue's maxReceiveCount of 2.
func TestWebhookEndpointDownOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 2})
	up, down := newEndpoint(t), newEndpoint(t)
	down.down.Store(true)
	const failures, concurrency = 3, 4
	kb := newWebhookBreaker(t, failures)
	downJobs := sendTo(t, c, q.URL, down.srv.URL, "down-", 20)
	upJobs := sendTo(t, c, q.URL, up.srv.URL, "up-", 20)

	w := runWorker(t, c, q.URL, concurrency, kb.Middleware(deliver))

	// The healthy endpoint's jobs are delivered while the other is down,
	// and the down one sees three probes.
	localtest.Eventually(t, 120*time.Second, func() bool {
		return len(up.delivered()) == len(upJobs) && kb.Stats().Probes >= 3
	}, "up delivered %d of %d; keybreaker %+v", len(up.delivered()), len(upJobs), kb.Stats())
	spared(t, down, kb, failures, concurrency)
	if ws := w.Stats(); ws.BreakerOpens != 0 {
		t.Errorf("the worker's circuit breaker opened %d times for one endpoint", ws.BreakerOpens)
	}

	down.down.Store(false)
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return len(down.delivered()) == len(downJobs) && v+f+d == 0
	}, "down delivered %d of %d after it came back; keybreaker %+v", len(down.delivered()), len(downJobs), kb.Stats())
	deliveredOnce(t, up, upJobs)
	deliveredOnce(t, down, downJobs)
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d jobs dead-lettered", v+f+d)
	}
	if s := kb.Stats(); s.Tracked != 0 {
		t.Errorf("keybreaker %+v: the endpoint should be closed and forgotten", s)
	}
	t.Logf("worker %+v; keybreaker %+v", w.Stats(), kb.Stats())
}

// statusError is an endpoint's answer as a plain error, not marked
// Unavailable.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprint("endpoint answered ", e.code) }

// deliverPlain is deliver whose 5xx are plain errors (statusError), left to
// a custom IsFailure to count.
var deliverPlain = sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
	url, _ := m.Attribute("endpoint")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewBufferString(m.Body))
	if err != nil {
		return sqsworker.Permanent(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode >= 500 {
		return &statusError{resp.StatusCode}
	}
	return nil
})

// A custom IsFailure that counts an endpoint's plain 5xx errors, on the
// emulator with maxReceiveCount 2: the failures it counts are the
// endpoint's, and no job is dead-lettered while it is down; each is
// delivered once when it is back. The middleware returned them as they
// were, ordinary attempts: the first failures and each failed probe spent
// the jobs' attempts, and healthy jobs were dead-lettered.
func TestCustomIsFailureSparesTheJobs(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 2})
	down := newEndpoint(t)
	down.down.Store(true)
	kb, err := keybreaker.New(keybreaker.Config{
		Key:        func(m *sqsworker.Message) string { u, _ := m.Attribute("endpoint"); return u },
		Failures:   3,
		OpenFor:    time.Second,
		MaxOpenFor: 2 * time.Second,
		IsFailure:  func(err error) bool { var s *statusError; return errors.As(err, &s) },
		Logger:     quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	jobs := sendTo(t, c, q.URL, down.srv.URL, "job-", 10)
	w := runWorker(t, c, q.URL, 4, kb.Middleware(deliverPlain))
	localtest.Eventually(t, 120*time.Second, func() bool { return kb.Stats().Probes >= 3 }, "keybreaker %+v", kb.Stats())
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Fatalf("%d jobs dead-lettered while the endpoint was down; worker %+v", v+f+d, w.Stats())
	}
	down.down.Store(false)
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return len(down.delivered()) == len(jobs) && v+f+d == 0
	}, "delivered %d of %d after it came back; worker %+v", len(down.delivered()), len(jobs), w.Stats())
	deliveredOnce(t, down, jobs)
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d jobs dead-lettered", v+f+d)
	}
	if ws := w.Stats(); ws.BreakerOpens != 0 {
		t.Errorf("the worker's circuit breaker opened %d times for one endpoint", ws.BreakerOpens)
	}
}

// An endpoint that takes requests and never answers, on the emulator with
// maxReceiveCount 2 and a HandlerTimeout of 300 ms, behind a handler that
// returns its HTTP client's error as it is (not marked Unavailable): the
// timeouts open the key, no job is dead-lettered while it swallows
// requests, and each is delivered once when it answers again. Before, a
// timeout counted as nothing: the key never opened, and every job spent
// its attempts on the endpoint and was dead-lettered.
func TestSwallowingEndpointOpensTheKey(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 2})
	down := newEndpoint(t)
	down.swallow.Store(true)
	kb := newWebhookBreaker(t, 3)
	jobs := sendTo(t, c, q.URL, down.srv.URL, "job-", 10)
	w := runWorkerWith(t, c, worker.Config{QueueURL: q.URL, Concurrency: 4, HandlerTimeout: 300 * time.Millisecond}, kb.Middleware(deliverPlain))
	dead := func() int { v, f, d := localtest.Depth(t, c, q.DLQURL); return v + f + d }
	localtest.Eventually(t, 120*time.Second, func() bool { return kb.Stats().Probes >= 3 || dead() > 0 },
		"keybreaker %+v; worker %+v", kb.Stats(), w.Stats())
	if n := dead(); n != 0 {
		t.Fatalf("%d jobs dead-lettered while the endpoint swallowed requests; keybreaker %+v, worker %+v", n, kb.Stats(), w.Stats())
	}
	spared(t, down, kb, 3, 4)
	down.swallow.Store(false)
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return len(down.delivered()) == len(jobs) && v+f+d == 0
	}, "delivered %d of %d after it answered again; worker %+v", len(down.delivered()), len(jobs), w.Stats())
	deliveredOnce(t, down, jobs)
	if n := dead(); n != 0 {
		t.Errorf("%d jobs dead-lettered", n)
	}
	if ws := w.Stats(); ws.BreakerOpens != 0 {
		t.Errorf("the worker's circuit breaker opened %d times for one endpoint", ws.BreakerOpens)
	}
}

// A job too slow on its own (its handler runs past the 300 ms
// HandlerTimeout whatever the endpoint), alone on its key, on the emulator
// with maxReceiveCount 3 and Failures 2: its timeouts open its key, but
// spend its attempts, and it reaches the dead-letter queue. With a timeout
// spared once the key was open, it never did: each probe of its own failed
// and kept the key open.
func TestSlowJobAloneIsDeadLettered(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 3})
	kb := newWebhookBreaker(t, 2)
	sendTo(t, c, q.URL, "http://127.0.0.1:9/unused", "slow-", 1)
	slow := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		<-ctx.Done()
		return fmt.Errorf("handling %s: %w", m.ID, ctx.Err())
	})
	w := runWorkerWith(t, c, worker.Config{QueueURL: q.URL, Concurrency: 2, HandlerTimeout: 300 * time.Millisecond}, kb.Middleware(slow))
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.DLQURL)
		return v+f+d == 1
	}, "the slow job was not dead-lettered; keybreaker %+v, worker %+v", kb.Stats(), w.Stats())
	if s := kb.Stats(); s.Opens == 0 {
		t.Errorf("keybreaker %+v: its timeouts did not open the key", s)
	}
}

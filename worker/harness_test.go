package worker_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// noDelay retries failed messages at once, to keep tests short.
var noDelay = sqsworker.ExponentialBackoff{Jitter: func() float64 { return 0 }}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// running is a worker running in the background of a test.
type running struct {
	t    *testing.T
	w    *worker.Worker
	done chan error
	logs *syncBuffer
}

// start runs a worker on api with cfg and h until the test ends.
func start(t *testing.T, api worker.API, cfg worker.Config, h sqsworker.Handler) *running {
	t.Helper()
	logs := &syncBuffer{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	w, err := worker.New(api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{t: t, w: w, done: make(chan error, 1), logs: logs}
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
func (r *running) stop(d time.Duration) {
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

// recorder counts handler calls per message body.
type recorder struct {
	mu    sync.Mutex
	calls map[string]int
	order []string
}

func (r *recorder) add(body string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls = map[string]int{}
	}
	r.calls[body]++
	r.order = append(r.order, body)
	return r.calls[body]
}

func (r *recorder) count(body string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[body]
}

func (r *recorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.order)
}

// emptyEventually waits until the queue holds no message, visible or not.
func emptyEventually(t *testing.T, c *sqs.Client, url string, timeout time.Duration) {
	t.Helper()
	localtest.Eventually(t, timeout, func() bool {
		v, f, d := localtest.Depth(t, c, url)
		return v+f+d == 0
	}, "queue %s is not empty", url)
}

var errTransient = errors.New("transient failure")

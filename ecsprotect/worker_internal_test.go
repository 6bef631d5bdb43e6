package ecsprotect

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// onWorker runs a worker on a queue of the local SQS with a Protector
// (After 300ms, Interval 50ms) on agentURI: a message whose body is "long"
// runs 1.5s, any other returns at once. It sends bodies, waits until the
// queue is empty (every message deleted), stops the worker and the
// Protector, and returns the Protector and the warnings logged.
func onWorker(t *testing.T, agentURI string, client *http.Client, bodies ...string) (*Protector, string) {
	t.Helper()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 2})
	var logs strings.Builder
	p, err := New(Config{AgentURI: agentURI, After: 300 * time.Millisecond, Interval: 50 * time.Millisecond, Client: client, Logger: quiet(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(c, worker.Config{QueueURL: q.URL, Concurrency: 4, WaitTime: time.Second, Logger: quiet(io.Discard)})
	if err != nil {
		t.Fatal(err)
	}
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "long" {
			time.Sleep(1500 * time.Millisecond)
		}
		return nil
	}), p.Middleware())

	ctx, stop := context.WithCancel(context.Background())
	protecting := make(chan error, 1)
	go func() { protecting <- p.Run(ctx) }()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(context.Background(), h) }()

	localtest.Send(t, c, q.URL, "", bodies...)
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return v+f+d == 0 && w.Stats().Deleted == int64(len(bodies))
	}, "every message handled and deleted")
	time.Sleep(200 * time.Millisecond) // four of the Protector's turns after the last job

	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	stop()
	select {
	case err := <-protecting:
		if err != nil {
			t.Errorf("Protector.Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the Protector did not stop within 30s of its context's end")
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	return p, logs.String()
}

// On the local SQS: short jobs leave the task unprotected; a long one
// protects it once it has run for After, and its end removes the
// protection.
func TestWorkerProtectsTheTaskForALongJob(t *testing.T) {
	a := newAgent(t)
	_, logs := onWorker(t, a.srv.URL+"/v3/abc", nil, "short", "short", "short", "short", "short")
	if got := protections(a.requests()); !equal(got, false) {
		t.Errorf("short jobs: requests %v, want only the removal at the start", strs(got))
	}
	p, logs2 := onWorker(t, a.srv.URL+"/v3/abc", nil, "short", "long", "short")
	if got := protections(a.requests()); !equal(got, false, false, true, false) || p.Protected() {
		t.Errorf("a long job: requests %v, protected %v: want off (each start), on, off", strs(got), p.Protected())
	}
	if logs+logs2 != "" {
		t.Errorf("logs:\n%s%s", logs, logs2)
	}
}

// On the local SQS, an agent that refuses connections, and one that takes
// requests and never answers: the jobs run and are deleted all the same,
// the failure is logged once, and the Protector stops within its calls'
// bound.
func TestWorkerRunsOnWhenTheAgentFails(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	_, logs := onWorker(t, closed.URL, nil, "long", "short")
	if n := strings.Count(logs, "could not change"); n != 1 || !strings.Contains(logs, "the ECS agent refuses connections") {
		t.Errorf("an agent refusing connections: %d warnings; logs:\n%s", n, logs)
	}

	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		<-r.Context().Done()
	}))
	defer stall.Close()
	_, logs = onWorker(t, stall.URL, &http.Client{Timeout: 300 * time.Millisecond}, "long", "short")
	if n := strings.Count(logs, "could not change"); n != 1 || !strings.Contains(logs, "Timeout") {
		t.Errorf("an agent that never answers: %d warnings; logs:\n%s", n, logs)
	}
}

package ecsprotect

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

// agent is the ECS agent's task protection endpoint as a test double on
// loopback: it records each request's body, and answers with the
// protection asked for, or with refusal when set.
type agent struct {
	mu      sync.Mutex
	bodies  []state
	refusal string        // an answer's body with an error or failure, and a status of 400
	lose    time.Duration // how long to hold each answer after applying its request (a lost answer, once the caller gives up)
	srv     *httptest.Server
}

func newAgent(t *testing.T) *agent {
	t.Helper()
	a := &agent{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || r.URL.Path != "/v3/abc/task-protection/v1/state" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var s state
		if err := json.Unmarshal(raw, &s); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.bodies = append(a.bodies, s)
		refusal, lose := a.refusal, a.lose
		a.mu.Unlock()
		if lose > 0 {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(lose):
			}
		}
		w.Header().Set("Content-Type", "application/json")
		if refusal != "" {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, refusal)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"protection": map[string]any{
			"ExpirationDate": "2026-12-04T10:00:00Z", "ProtectionEnabled": s.ProtectionEnabled, "TaskArn": "arn:aws:ecs:us-east-1:000000000000:task/c/abc"}})
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *agent) requests() []state {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]state(nil), a.bodies...)
}

func (a *agent) refuse(body string) {
	a.mu.Lock()
	a.refusal = body
	a.mu.Unlock()
}

// clock is a settable time.
type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time      { return time.Unix(0, c.t.Load()) }
func (c *clock) add(d time.Duration) { c.t.Add(int64(d)) }
func newClock() *clock {
	c := &clock{}
	c.t.Store(time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func quiet(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
func protections(ss []state) []bool {
	out := make([]bool, len(ss))
	for i, s := range ss {
		out[i] = s.ProtectionEnabled
	}
	return out
}
func equal(a []bool, b ...bool) bool {
	return len(a) == len(b) && strings.Trim(strings.Join(strs(a), ","), ",") == strings.Join(strs(b), ",")
}
func strs(bs []bool) (out []string) {
	for _, b := range bs {
		out = append(out, map[bool]string{true: "on", false: "off"}[b])
	}
	return out
}

// job runs a job through p's middleware until the returned func is called.
func job(p *Protector) (end func()) {
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	h := p.Middleware()(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		close(started)
		<-release
		return nil
	}))
	go func() {
		defer close(done)
		_ = h.HandleMessage(context.Background(), &sqsworker.Message{})
	}()
	<-started
	return func() { close(release); <-done }
}

// newProtector returns a Protector on the agent double, with a settable
// clock.
func newProtector(t *testing.T, a *agent, cfg Config) (*Protector, *clock) {
	t.Helper()
	if cfg.AgentURI == "" {
		cfg.AgentURI = a.srv.URL + "/v3/abc/"
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	p.now = c.now
	return p, c
}

// A job that has run for After protects the task for Expires, renewed
// once half of it has passed and not before; once it ends, the protection
// is removed, though a younger job runs; idle again, nothing is asked.
func TestProtectedWhileALongJobRuns(t *testing.T) {
	a := newAgent(t)
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Expires: 10 * time.Minute, Logger: quiet(&logs)})
	ctx := context.Background()

	p.poll(ctx) // idle: nothing asked
	endLong := job(p)
	c.add(DefaultAfter - time.Millisecond)
	p.poll(ctx) // not yet After: nothing asked
	if n := len(a.requests()); n != 0 {
		t.Fatalf("%d requests before the job ran for After", n)
	}
	c.add(time.Millisecond)
	p.poll(ctx)
	c.add(4 * time.Minute)
	p.poll(ctx) // within the first half: no renewal
	if got := a.requests(); len(got) != 1 || !got[0].ProtectionEnabled || got[0].ExpiresInMinutes != 10 || !p.Protected() {
		t.Fatalf("long job: requests %+v, protected %v; want one protection for 10 minutes", got, p.Protected())
	}
	c.add(time.Minute)
	p.poll(ctx) // half of Expires passed: renewed
	endShort := job(p)
	defer endShort()
	endLong()
	p.poll(ctx)
	p.poll(ctx)
	if got := protections(a.requests()); !equal(got, true, true, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want on, on (renewed), off", strs(got), p.Protected())
	}
	if got := a.requests()[2]; got.ExpiresInMinutes != 0 {
		t.Errorf("the removal %+v carries an expiry", got)
	}
	if logs.Len() != 0 {
		t.Errorf("logs:\n%s", logs.String())
	}
}

// Jobs shorter than After never protect the task, though one always runs:
// a task that is never idle can still be scaled in.
func TestShortJobsDoNotProtect(t *testing.T) {
	a := newAgent(t)
	p, c := newProtector(t, a, Config{After: 10 * time.Second})
	ctx := context.Background()
	end := job(p)
	for range 20 {
		c.add(6 * time.Second)
		next := job(p)
		end()
		end = next
		p.poll(ctx)
	}
	end()
	if n := len(a.requests()); n != 0 || p.Protected() {
		t.Errorf("%d requests, protected %v: want none", n, p.Protected())
	}
}

// A refusal of the agent (the task role without the permission) is
// logged once, naming the fix, and asked again at the next poll; the
// worker runs on unprotected. Once the agent accepts, that is logged.
func TestRefusalLoggedOnceAndRetried(t *testing.T) {
	a := newAgent(t)
	a.refuse(`{"error":{"Arn":"arn:aws:ecs:us-east-1:000000000000:task/c/abc","Code":"AccessDeniedException","Message":"User is not authorized to perform: ecs:UpdateTaskProtection"}}`)
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Logger: quiet(&logs)})
	defer job(p)()
	c.add(DefaultAfter)
	ctx := context.Background()
	p.poll(ctx)
	p.poll(ctx)
	if p.Protected() || len(a.requests()) != 2 {
		t.Fatalf("refused: protected %v after %d requests, want not protected, asked twice", p.Protected(), len(a.requests()))
	}
	if n := strings.Count(logs.String(), "could not change"); n != 1 || !strings.Contains(logs.String(), "grant the task role ecs:GetTaskProtection and ecs:UpdateTaskProtection") {
		t.Errorf("%d warnings; logs:\n%s", n, logs.String())
	}
	a.refuse("")
	p.poll(ctx)
	if !p.Protected() || !strings.Contains(logs.String(), "changes the task's scale-in protection again") {
		t.Errorf("accepted: protected %v; logs:\n%s", p.Protected(), logs.String())
	}
}

// The agent's other refusals, each an error that says what it is; an agent
// that refuses connections, and one that takes the request and never
// answers, whose request is bounded.
func TestAgentErrors(t *testing.T) {
	a := newAgent(t)
	p, _ := newProtector(t, a, Config{})
	for body, want := range map[string]string{
		`{"failure":{"Arn":"arn:aws:ecs:us-east-1:000000000000:task/c/abc","Reason":"TASK_NOT_VALID","Detail":null}}`: "TASK_NOT_VALID (only the tasks of an ECS service can be protected)",
		`not json`: "answered 400: not json",
	} {
		a.refuse(body)
		err := p.put(context.Background(), true)
		var ae *AgentError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an AgentError saying %q", body, err, want)
		}
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	p, _ = newProtector(t, a, Config{AgentURI: closed.URL})
	if err := p.put(context.Background(), true); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("an agent refusing connections: %v", err)
	}

	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // else the server does not see the client go
		<-r.Context().Done()
	}))
	defer stall.Close()
	p, _ = newProtector(t, a, Config{AgentURI: stall.URL})
	p.callTimeout = 200 * time.Millisecond
	if err := p.put(context.Background(), true); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a stalled agent: %v, want the call's deadline exceeded", err)
	}
}

// runUntilProtected runs p until the task is protected for a long job,
// then stops it (the worker stopping), and waits for Run to return.
func runUntilProtected(t *testing.T, p *Protector, c *clock, protected func() bool) {
	t.Helper()
	end := job(p)
	defer end()
	c.add(DefaultAfter)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for !protected() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// Run protects the task while a long job runs, and removes the protection
// when its context ends (the worker stopping), though the context has
// ended.
func TestRunRemovesItsProtectionAtTheEnd(t *testing.T) {
	a := newAgent(t)
	p, c := newProtector(t, a, Config{Interval: 10 * time.Millisecond})
	runUntilProtected(t, p, c, p.Protected)
	if got := protections(a.requests()); !equal(got, true, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want on, then off at the end", strs(got), p.Protected())
	}
}

// A protection the agent applied but whose answer was lost (the call timed
// out) is removed at the end all the same.
func TestRunRemovesAProtectionWhoseAnswerWasLost(t *testing.T) {
	a := newAgent(t)
	a.lose = time.Minute
	p, c := newProtector(t, a, Config{Interval: 10 * time.Millisecond, Logger: quiet(io.Discard)})
	p.callTimeout = 100 * time.Millisecond
	runUntilProtected(t, p, c, func() bool { return len(a.requests()) > 0 })
	if got := protections(a.requests()); len(got) < 2 || !got[0] || got[len(got)-1] {
		t.Errorf("requests %v: want on, then off at the end", strs(got))
	}
}

// A protection whose answer was lost, the job then ended, is removed at
// the next look: else an idle task could stay protected for Expires,
// and a scale-in wait for it.
func TestALostProtectionIsRemovedWhenIdle(t *testing.T) {
	a := newAgent(t)
	a.lose = time.Minute
	p, c := newProtector(t, a, Config{Logger: quiet(io.Discard)})
	p.callTimeout = 100 * time.Millisecond
	end := job(p)
	c.add(DefaultAfter)
	ctx := context.Background()
	p.poll(ctx) // applied, its answer lost
	end()
	a.mu.Lock()
	a.lose = 0
	a.mu.Unlock()
	p.poll(ctx)
	p.poll(ctx)
	if got := protections(a.requests()); !equal(got, true, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want on (answer lost), then off", strs(got), p.Protected())
	}
}

func TestNewChecksItsConfig(t *testing.T) {
	t.Setenv(AgentURIEnv, "")
	if _, err := New(Config{}); !errors.Is(err, ErrNotOnECS) {
		t.Errorf("no agent: %v, want ErrNotOnECS", err)
	}
	t.Setenv(AgentURIEnv, "http://169.254.170.2/api/abc")
	if p, err := New(Config{}); err != nil || p.url != "http://169.254.170.2/api/abc/task-protection/v1/state" ||
		p.cfg.After != DefaultAfter || p.cfg.Interval != DefaultInterval || p.cfg.Expires != DefaultExpires {
		t.Errorf("from the environment, with the defaults: %v", err)
	}
	if p, err := New(Config{After: 2 * time.Second}); err != nil || p.cfg.Interval != 2*time.Second {
		t.Errorf("After 2s: %v; want Interval 2s", err)
	}
	_, err := New(Config{After: -time.Second, Interval: -time.Second, Expires: 90 * time.Second})
	for _, want := range []string{"After -1s is negative", "Interval -1s is negative", "Expires 1m30s: want whole minutes from 1m to 48h"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid Config: %v, want it to say %q", err, want)
		}
	}
}

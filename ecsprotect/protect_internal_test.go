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
	status  int           // the status of a refusal, if not 400
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
		refusal, lose, status := a.refusal, a.lose, a.status
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
			if status == 0 {
				status = http.StatusBadRequest
			}
			if strings.Contains(refusal, "failure") {
				status = http.StatusOK // the agent answers ECS's failures with 200
			}
			w.WriteHeader(status)
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

// A job that has run for After protects the task for Expires, though a
// younger job runs too, renewed once half of it has passed and not
// before; once it ends, the protection is removed, though the younger job
// runs; idle again, nothing is asked. At the start, idle, a protection an
// earlier process may have left is removed.
func TestProtectedWhileALongJobRuns(t *testing.T) {
	a := newAgent(t)
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Expires: 10 * time.Minute, Logger: quiet(&logs)})
	ctx := context.Background()

	p.poll(ctx) // idle at the start: removed
	p.poll(ctx) // idle: nothing asked
	endLong := job(p)
	c.add(DefaultAfter - time.Millisecond)
	p.poll(ctx) // not yet After: nothing asked
	endShort := job(p)
	if got := protections(a.requests()); !equal(got, false) {
		t.Fatalf("requests %v before the job ran for After, want off (at the start)", strs(got))
	}
	c.add(time.Millisecond)
	p.poll(ctx) // the oldest job ran for After: protected
	endShort()
	c.add(4 * time.Minute)
	p.poll(ctx) // within the first half: no renewal
	if got := a.requests(); len(got) != 2 || !got[1].ProtectionEnabled || got[1].ExpiresInMinutes != 10 || !p.Protected() {
		t.Fatalf("long job: requests %+v, protected %v; want one protection for 10 minutes", got, p.Protected())
	}
	c.add(time.Minute)
	p.poll(ctx) // half of Expires passed: renewed
	defer job(p)()
	endLong()
	p.poll(ctx)
	p.poll(ctx)
	if got := protections(a.requests()); !equal(got, false, true, true, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want off (at the start), on, on (renewed), off", strs(got), p.Protected())
	}
	if got := a.requests()[3]; got.ExpiresInMinutes != 0 {
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
	if got := protections(a.requests()); !equal(got, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want only the removal at the start", strs(got), p.Protected())
	}
}

// A task protected for MaxProtected without a pause is unprotected, and
// not protected again until it has had no long job: a deployment or a
// scale-in is not held off for ever by a backlog of long jobs, or a
// handler that never returns.
func TestMaxProtected(t *testing.T) {
	a := newAgent(t)
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Expires: 10 * time.Minute, MaxProtected: time.Hour, Logger: quiet(&logs)})
	ctx := context.Background()
	end := job(p)
	c.add(DefaultAfter)
	for range 12 { // an hour, in steps of 5 minutes
		p.poll(ctx)
		c.add(5 * time.Minute)
	}
	p.poll(ctx) // an hour protected: removed
	c.add(5 * time.Minute)
	p.poll(ctx) // still busy: not again
	if got := protections(a.requests()); len(got) != 13 || got[11] != true || got[12] != false || p.Protected() {
		t.Fatalf("requests %v, protected %v: want on and 11 renewals over an hour, then off", strs(got), p.Protected())
	}
	if !strings.Contains(logs.String(), "protected from scale-in for MaxProtected") {
		t.Errorf("logs:\n%s", logs.String())
	}
	end()
	p.poll(ctx) // idle: may be protected again
	defer job(p)()
	c.add(DefaultAfter)
	p.poll(ctx)
	if got := protections(a.requests()); len(got) != 14 || !got[13] || !p.Protected() {
		t.Errorf("requests %v, protected %v: want on again for a new long job after a pause", strs(got), p.Protected())
	}
}

// Capped, a removal the agent refuses is asked once and warned of once, as
// any refused removal: the cap is not asked again at every turn.
func TestMaxProtectedRefusedRemovalAskedOnce(t *testing.T) {
	a := newAgent(t)
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Expires: 10 * time.Minute, MaxProtected: time.Hour, Logger: quiet(&logs)})
	ctx := context.Background()
	defer job(p)()
	c.add(DefaultAfter)
	p.poll(ctx) // protected
	a.refuse(`{"error":{"Code":"AccessDeniedException","Message":"not authorized"}}`)
	c.add(time.Hour)
	for range 20 { // the cap, then ten minutes
		p.poll(ctx)
		c.add(30 * time.Second)
	}
	if got := protections(a.requests()); !equal(got, true, false) {
		t.Errorf("requests %v: want on, then one removal at the cap", strs(got))
	}
	if n := strings.Count(logs.String(), "for MaxProtected"); n != 1 {
		t.Errorf("%d warnings of the cap; logs:\n%s", n, logs.String())
	}
}

// A refusal of the agent (the task role without the permission) is
// logged once, naming the fix, and asked again after Interval, then after
// twice as long each time; the worker runs on unprotected. Once the agent
// accepts, that is logged.
func TestRefusalLoggedOnceAndRetried(t *testing.T) {
	a := newAgent(t)
	a.refuse(`{"error":{"Arn":"arn:aws:ecs:us-east-1:000000000000:task/c/abc","Code":"AccessDeniedException","Message":"User is not authorized to perform: ecs:UpdateTaskProtection"}}`)
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Logger: quiet(&logs)})
	defer job(p)()
	c.add(DefaultAfter)
	ctx := context.Background()
	for range 8 { // 40s in steps of 5s: asked at 0, 5s, 15s and 35s
		p.poll(ctx)
		c.add(DefaultInterval)
	}
	if p.Protected() || len(a.requests()) != 4 {
		t.Fatalf("refused: protected %v after %d requests, want not protected, asked 4 times", p.Protected(), len(a.requests()))
	}
	if n := strings.Count(logs.String(), "could not change"); n != 1 || !strings.Contains(logs.String(), "grant the task role ecs:UpdateTaskProtection on the cluster's tasks") {
		t.Errorf("%d warnings; logs:\n%s", n, logs.String())
	}
	a.refuse("")
	c.add(time.Minute)
	p.poll(ctx)
	if !p.Protected() || !strings.Contains(logs.String(), "changes the task's scale-in protection again") {
		t.Errorf("accepted: protected %v; logs:\n%s", p.Protected(), logs.String())
	}
}

// An idle task whose removal the agent refuses (no permission, or a
// standalone task) is not asked again and again; a removal throttled by
// the ECS API is asked again, less and less often.
func TestIdleRefusalsStop(t *testing.T) {
	for refusal, want := range map[string]int{
		`{"error":{"Code":"AccessDeniedException","Message":"not authorized"}}`: 1,
		`{"failure":{"Reason":"TASK_NOT_VALID","Detail":null}}`:                 1,
		`{"error":{"Code":"ThrottlingException","Message":"Rate exceeded"}}`:    6, // at 0, 5s, 15s, 35s, 75s, 135s
	} {
		a := newAgent(t)
		a.refuse(refusal)
		p, c := newProtector(t, a, Config{Logger: quiet(io.Discard)})
		for range 30 { // 150s
			p.poll(context.Background())
			c.add(DefaultInterval)
		}
		if n := len(a.requests()); n != want {
			t.Errorf("%s: %d requests while idle, want %d", refusal, n, want)
		}
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

	a.refuse("")
	a.mu.Lock()
	a.status = http.StatusForbidden
	a.mu.Unlock()
	a.refuse(`{"error":{"Code":"","Message":"no task IAM role credentials available for task"}}`)
	if err := p.put(context.Background(), true); err == nil || !strings.Contains(err.Error(), "(give the task definition a task role") {
		t.Errorf("no task role: %v", err)
	}

	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	p, _ = newProtector(t, a, Config{AgentURI: closed.URL})
	if err := p.put(context.Background(), true); err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), "the ECS agent refuses connections") {
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
	p.maybe = false // not protected at the start
	end := job(p)
	c.add(DefaultAfter)
	ctx := context.Background()
	p.poll(ctx) // applied, its answer lost
	end()
	a.mu.Lock()
	a.lose = 0
	a.mu.Unlock()
	c.add(DefaultInterval) // the wait after a failure
	p.poll(ctx)
	p.poll(ctx)
	if got := protections(a.requests()); !equal(got, true, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want on (answer lost), then off", strs(got), p.Protected())
	}
}

// A call cut short by the Protector's stop (SIGTERM during a request) is
// no failure to log: the removal at the end is asked all the same.
func TestStopDuringACallLogsNothing(t *testing.T) {
	a := newAgent(t)
	a.lose = time.Minute
	var logs strings.Builder
	p, c := newProtector(t, a, Config{Interval: 10 * time.Millisecond, Logger: quiet(&logs)})
	runUntilProtected(t, p, c, func() bool {
		if len(a.requests()) == 0 {
			return false
		}
		a.mu.Lock()
		a.lose = 0 // the next answers come at once
		a.mu.Unlock()
		return true
	})
	if got := protections(a.requests()); !equal(got, true, false) {
		t.Errorf("requests %v: want on (cut short), off at the end", strs(got))
	}
	if logs.Len() != 0 {
		t.Errorf("logs:\n%s", logs.String())
	}
}

func TestNewChecksItsConfig(t *testing.T) {
	t.Setenv(AgentURIEnv, "")
	if _, err := New(Config{}); !errors.Is(err, ErrNotOnECS) {
		t.Errorf("no agent: %v, want ErrNotOnECS", err)
	}
	t.Setenv(AgentURIEnv, "http://169.254.170.2/api/abc")
	if p, err := New(Config{}); err != nil || p.url != "http://169.254.170.2/api/abc/task-protection/v1/state" ||
		p.cfg.After != DefaultAfter || p.cfg.Interval != DefaultInterval || p.cfg.Expires != DefaultExpires || p.cfg.MaxProtected != DefaultMaxProtected {
		t.Errorf("from the environment, with the defaults: %v", err)
	}
	if p, err := New(Config{After: 2 * time.Second}); err != nil || p.cfg.Interval != 2*time.Second {
		t.Errorf("After 2s: %v; want Interval 2s", err)
	}
	if p, err := New(Config{After: 100 * time.Millisecond}); err != nil || p.cfg.Interval != time.Second {
		t.Errorf("After 100ms: %v; want Interval 1s", err)
	}
	_, err := New(Config{After: -time.Second, Interval: -time.Second, Expires: 90 * time.Second, MaxProtected: 49 * time.Hour})
	for _, want := range []string{"After -1s is negative", "Interval -1s is negative", "Expires 1m30s: want whole minutes from 1m to 48h", "MaxProtected 49h0m0s: want up to 48h"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid Config: %v, want it to say %q", err, want)
		}
	}
}

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
)

// agent is the ECS agent's task protection endpoint as a test double on
// loopback: it records each request's body, and answers with the
// protection asked for, or with refusal when set.
type agent struct {
	mu      sync.Mutex
	bodies  []state
	refusal string // an answer's body with an error or failure, and a status of 400
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
		refusal := a.refusal
		a.mu.Unlock()
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

// Busy, the task is protected for Expires, renewed once half of it has
// passed and not before; idle, the protection is removed at once; idle
// again, nothing is asked.
func TestProtectedWhileBusy(t *testing.T) {
	a := newAgent(t)
	var busy atomic.Bool
	var logs strings.Builder
	p, err := New(Config{Busy: busy.Load, AgentURI: a.srv.URL + "/v3/abc/", Expires: 10 * time.Minute, Logger: quiet(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	c := newClock()
	p.now = c.now
	ctx := context.Background()

	p.poll(ctx) // idle: nothing asked
	busy.Store(true)
	p.poll(ctx)
	c.add(4 * time.Minute)
	p.poll(ctx) // within the first half: no renewal
	if got := a.requests(); len(got) != 1 || !got[0].ProtectionEnabled || got[0].ExpiresInMinutes != 10 || !p.Protected() {
		t.Fatalf("busy: requests %+v, protected %v; want one protection for 10 minutes", got, p.Protected())
	}
	c.add(time.Minute)
	p.poll(ctx) // half of Expires passed: renewed
	busy.Store(false)
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

// A refusal of the agent (the task role without the permission) is
// logged once, naming the fix, and asked again at the next poll; the
// worker runs on unprotected. Once the agent accepts, that is logged.
func TestRefusalLoggedOnceAndRetried(t *testing.T) {
	a := newAgent(t)
	a.refuse(`{"error":{"Arn":"arn:aws:ecs:us-east-1:000000000000:task/c/abc","Code":"AccessDeniedException","Message":"User is not authorized to perform: ecs:UpdateTaskProtection"}}`)
	var logs strings.Builder
	p, err := New(Config{Busy: func() bool { return true }, AgentURI: a.srv.URL + "/v3/abc", Logger: quiet(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p.poll(ctx)
	p.poll(ctx)
	if p.Protected() || len(a.requests()) != 2 {
		t.Fatalf("refused: protected %v after %d requests, want not protected, asked twice", p.Protected(), len(a.requests()))
	}
	if n := strings.Count(logs.String(), "refused"); n != 1 || !strings.Contains(logs.String(), "grant the task role ecs:GetTaskProtection and ecs:UpdateTaskProtection") {
		t.Errorf("%d warnings; logs:\n%s", n, logs.String())
	}
	a.refuse("")
	p.poll(ctx)
	if !p.Protected() || !strings.Contains(logs.String(), "changes the task's scale-in protection again") {
		t.Errorf("accepted: protected %v; logs:\n%s", p.Protected(), logs.String())
	}
}

// The agent's other refusals, each an error that says what it is.
func TestAgentErrors(t *testing.T) {
	a := newAgent(t)
	p, err := New(Config{Busy: func() bool { return true }, AgentURI: a.srv.URL + "/v3/abc"})
	if err != nil {
		t.Fatal(err)
	}
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
	// An agent that does not answer in time: the request is bounded.
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer stall.Close()
	p, err = New(Config{Busy: func() bool { return true }, AgentURI: stall.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := p.put(ctx, true); err == nil {
		t.Error("a stalled agent answered")
	}
}

// Run protects the task while busy, and removes the protection when its
// context ends (the worker stopping), though the context has ended.
func TestRunRemovesItsProtectionAtTheEnd(t *testing.T) {
	a := newAgent(t)
	p, err := New(Config{Busy: func() bool { return true }, AgentURI: a.srv.URL + "/v3/abc", Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	deadline := time.Now().Add(time.Minute)
	for !p.Protected() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := protections(a.requests()); !equal(got, true, false) || p.Protected() {
		t.Errorf("requests %v, protected %v: want on, then off at the end", strs(got), p.Protected())
	}
}

func TestNewChecksItsConfig(t *testing.T) {
	t.Setenv(AgentURIEnv, "")
	if _, err := New(Config{Busy: func() bool { return false }}); !errors.Is(err, ErrNotOnECS) {
		t.Errorf("no agent: %v, want ErrNotOnECS", err)
	}
	t.Setenv(AgentURIEnv, "http://169.254.170.2/api/abc")
	if p, err := New(Config{Busy: func() bool { return false }}); err != nil || p.url != "http://169.254.170.2/api/abc/task-protection/v1/state" {
		t.Errorf("from the environment: %v", err)
	}
	_, err := New(Config{Interval: -time.Second, Expires: 90 * time.Second})
	for _, want := range []string{"Busy is required", "Interval -1s is negative", "Expires 1m30s: want whole minutes from 1m to 48h"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid Config: %v, want it to say %q", err, want)
		}
	}
}

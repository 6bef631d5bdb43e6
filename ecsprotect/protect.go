package ecsprotect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// AgentURIEnv is the variable the ECS agent sets in a task's containers to
// the base URI of its endpoints.
const AgentURIEnv = "ECS_AGENT_URI"

// ErrNotOnECS is New's error when no agent URI is known: the process does
// not run in an ECS task (or its agent is older than 1.65.0).
var ErrNotOnECS = errors.New("ecsprotect: no ECS agent: $" + AgentURIEnv + " is not set (not an ECS task, or an agent older than 1.65.0)")

// Defaults of Config.
const (
	DefaultInterval = 5 * time.Second
	DefaultExpires  = time.Hour
	// MaxExpires is the longest protection the agent sets, 48 hours.
	MaxExpires = 48 * time.Hour
)

// callTimeout bounds each request to the agent.
const callTimeout = 5 * time.Second

// Config configures a Protector. Busy is required; the zero value of every
// other field means its documented default.
type Config struct {
	// Busy reports whether the task runs jobs now: for a worker,
	// func() bool { return w.Stats().InFlight > 0 }. Required.
	Busy func() bool
	// AgentURI is the ECS agent's base URI. Default $ECS_AGENT_URI.
	AgentURI string
	// Interval is how often Busy is polled, and so how long a task stays
	// protected, at most, after its last job ended (and unprotected
	// before its first job started). Default 5s.
	Interval time.Duration
	// Expires is how long each protection lasts (the agent's
	// ExpiresInMinutes, whole minutes from 1 minute to 48 hours): a
	// Protector renews it while busy once half of it has passed. Should
	// the process hang, the task is protected this long at most. Default
	// 1 hour.
	Expires time.Duration
	// Client makes the requests to the agent. Default an http.Client
	// without proxy; each request is bounded to 5s.
	Client *http.Client
	// Logger receives the agent's refusals (the first of a run of them at
	// warning level) and the changes of protection (debug). Default
	// slog.Default().
	Logger *slog.Logger
}

// Protector keeps a task protected from scale-in while it is busy. Make
// one with New, and call Run once.
type Protector struct {
	cfg Config
	url string
	now func() time.Time

	protected atomic.Bool // as last set with success
	// Run's own:
	renewAt time.Time // when a protection set must be renewed, while busy
	failing bool      // the last request failed: its failure was logged
}

// New validates cfg and returns a Protector. It returns ErrNotOnECS when
// no agent URI is known.
func New(cfg Config) (*Protector, error) {
	var errs []error
	if cfg.Busy == nil {
		errs = append(errs, errors.New("Busy is required"))
	}
	if cfg.Interval < 0 {
		errs = append(errs, fmt.Errorf("Interval %s is negative", cfg.Interval))
	}
	if e := cfg.Expires; e != 0 && (e < time.Minute || e > MaxExpires || e%time.Minute != 0) {
		errs = append(errs, fmt.Errorf("Expires %s: want whole minutes from 1m to 48h", e))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("ecsprotect: invalid Config: %w", errors.Join(errs...))
	}
	if cfg.AgentURI == "" {
		cfg.AgentURI = os.Getenv(AgentURIEnv)
	}
	if cfg.AgentURI == "" {
		return nil, ErrNotOnECS
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Expires == 0 {
		cfg.Expires = DefaultExpires
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{Proxy: nil}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Protector{cfg: cfg, url: strings.TrimSuffix(cfg.AgentURI, "/") + "/task-protection/v1/state", now: time.Now}, nil
}

// Run keeps the task protected while Config.Busy says so, until ctx ends.
// It then removes the protection it set (within 5s), and returns nil.
func (p *Protector) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		p.poll(ctx)
		select {
		case <-ctx.Done():
			if p.protected.Load() {
				p.set(context.WithoutCancel(ctx), false)
			}
			return nil
		case <-t.C:
		}
	}
}

// poll makes one turn of Run: it protects the task if Busy and it is not
// protected, or its protection is due for renewal; it removes the
// protection if not Busy and it was set.
func (p *Protector) poll(ctx context.Context) {
	protected := p.protected.Load()
	switch busy := p.cfg.Busy(); {
	case busy && (!protected || !p.now().Before(p.renewAt)):
		p.set(ctx, true)
	case !busy && protected:
		p.set(ctx, false)
	}
}

// Protected reports whether the task is protected, as the agent last
// answered.
func (p *Protector) Protected() bool { return p.protected.Load() }

// state is the agent's request body.
type state struct {
	ProtectionEnabled bool
	ExpiresInMinutes  int `json:",omitempty"`
}

// answer is the agent's response body: the task's protection, or an error
// (the agent's own, or the ECS API's refusal), or a failure (ECS's, such
// as TASK_NOT_VALID).
type answer struct {
	Protection *struct {
		ProtectionEnabled bool
	} `json:"protection"`
	Error *struct {
		Code, Message string
	} `json:"error"`
	Failure *struct {
		Reason, Detail string
	} `json:"failure"`
}

// set asks the agent to protect the task (on) or not.
func (p *Protector) set(ctx context.Context, on bool) {
	err := p.put(ctx, on)
	if err != nil {
		if !p.failing {
			p.cfg.Logger.Warn("ecsprotect: the ECS agent refused to change the task's scale-in protection; the task runs on as it was: scale-in may stop it with jobs running",
				"protect", on, "error", err)
		}
		p.failing = true
		return
	}
	if p.failing {
		p.cfg.Logger.Info("ecsprotect: the ECS agent changes the task's scale-in protection again", "protect", on)
	}
	p.failing = false
	p.protected.Store(on)
	if on {
		p.renewAt = p.now().Add(p.cfg.Expires / 2)
	}
	p.cfg.Logger.Debug("ecsprotect: task scale-in protection set", "protected", on)
}

// put sends one request to the agent, and returns its refusal.
func (p *Protector) put(ctx context.Context, on bool) error {
	s := state{ProtectionEnabled: on}
	if on {
		s.ExpiresInMinutes = int(p.cfg.Expires / time.Minute)
	}
	body, _ := json.Marshal(s)
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, p.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("ecsprotect: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("ecsprotect: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("ecsprotect: reading the agent's answer: %w", err)
	}
	var a answer
	_ = json.Unmarshal(raw, &a) // an answer that is not JSON is judged by its status
	switch {
	case a.Error != nil:
		return &AgentError{Status: resp.StatusCode, Code: a.Error.Code, Message: a.Error.Message}
	case a.Failure != nil:
		return &AgentError{Status: resp.StatusCode, Code: a.Failure.Reason, Message: a.Failure.Detail}
	case resp.StatusCode/100 != 2:
		return &AgentError{Status: resp.StatusCode, Message: strings.TrimSpace(string(raw))}
	case a.Protection == nil || a.Protection.ProtectionEnabled != on:
		return &AgentError{Status: resp.StatusCode, Message: "the answer does not show the protection asked for: " + strings.TrimSpace(string(raw))}
	}
	return nil
}

// AgentError is a refusal of the ECS agent, or of the ECS API behind it.
type AgentError struct {
	// Status is the HTTP status of the agent's answer.
	Status int
	// Code is the error code (AccessDeniedException) or failure reason
	// (TASK_NOT_VALID), if the answer gives one.
	Code string
	// Message is the answer's message or detail.
	Message string
}

func (e *AgentError) Error() string {
	msg := fmt.Sprintf("ecsprotect: the ECS agent answered %d", e.Status)
	if e.Code != "" {
		msg += " " + e.Code
	}
	if e.Message != "" {
		msg += ": " + e.Message
	}
	switch {
	case strings.Contains(e.Code, "AccessDenied"):
		msg += " (grant the task role ecs:GetTaskProtection and ecs:UpdateTaskProtection)"
	case e.Code == "TASK_NOT_VALID":
		msg += " (only the tasks of an ECS service can be protected)"
	}
	return msg
}

package ecsprotect

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sqsworker/sqsworker"
)

// AgentURIEnv is the variable the ECS agent sets in a task's containers to
// the base URI of its endpoints.
const AgentURIEnv = "ECS_AGENT_URI"

// ErrNotOnECS is New's error when no agent URI is known: the process does
// not run in an ECS task (or its agent is older than 1.65.0).
var ErrNotOnECS = errors.New("ecsprotect: no ECS agent: $" + AgentURIEnv + " is not set (not an ECS task, or an agent older than 1.65.0)")

// Defaults and limits of Config.
const (
	DefaultAfter        = 10 * time.Second
	DefaultInterval     = 5 * time.Second
	DefaultExpires      = time.Hour
	DefaultMaxProtected = 2 * time.Hour
	// MaxExpires is the longest protection the agent sets, 48 hours, and
	// the longest MaxProtected.
	MaxExpires = 48 * time.Hour
	// MinInterval is the shortest default Interval.
	MinInterval = time.Second
)

// callTimeout bounds each request to the agent; maxRetryWait bounds the
// wait between requests while they fail.
const (
	callTimeout  = 5 * time.Second
	maxRetryWait = time.Minute
)

// Config configures a Protector. The zero value of every field means its
// documented default.
type Config struct {
	// After is how long a job runs before the task is protected for it.
	// A job shorter than the worker's shutdown timeout finishes within
	// its graceful stop and needs no protection; protecting the task for
	// every job would keep a task that is never idle from being scaled
	// in at all. A scale-in that picks the task within a job's first
	// After cuts it, at the cost of one receive and of that work. Keep
	// After + Interval within the worker's shutdown timeout: a job
	// between the two is neither protected nor finished. Default 10s.
	After time.Duration
	// AgentURI is the ECS agent's base URI. Default $ECS_AGENT_URI.
	AgentURI string
	// Interval is how often the running jobs are looked at: a task is
	// protected within After + Interval of its job's start, and the
	// protection removed within Interval of the job's end. Default 5s, or
	// After when that is shorter, but at least 1s.
	Interval time.Duration
	// Expires is how long each protection lasts (the agent's
	// ExpiresInMinutes, whole minutes from 1 minute to 48 hours): a
	// Protector renews it while busy once half of it has passed. Should
	// the process hang, the task is protected this long at most. Default
	// 1 hour.
	Expires time.Duration
	// MaxProtected is the longest a task stays protected without a pause:
	// once it has been protected that long, the protection is removed and
	// not set again until no job has run for After. A deployment waits
	// for protected tasks (and CloudFormation gives a service's update 3
	// hours), and so does a scale-in: a task that always has a long job,
	// under a backlog, or a handler that never returns, would hold them
	// off for ever. Up to 48 hours. Default 2 hours.
	MaxProtected time.Duration
	// Client makes the requests to the agent. Default an http.Client
	// without proxy; each request is bounded to 5s.
	Client *http.Client
	// Logger receives the agent's refusals (the first of a run of them at
	// warning level) and the changes of protection (debug). Default
	// slog.Default().
	Logger *slog.Logger
}

// Protector keeps a task protected from scale-in while one of its jobs has
// run for Config.After. Make one with New, add its Middleware to the
// worker's handler, and call Run once.
type Protector struct {
	cfg         Config
	url         string
	now         func() time.Time
	callTimeout time.Duration

	mu   sync.Mutex
	jobs list.List // of time.Time: the start of each running job, oldest first

	protected atomic.Bool // as last set with success
	// Run's own:
	maybe     bool          // the task may be protected: as set, asked for with no answer, or as an earlier process left it
	since     time.Time     // when the protection now set was first set
	renewAt   time.Time     // when the protection now set must be renewed, while busy
	capped    bool          // MaxProtected was reached: no protection until idle
	failing   bool          // the last request failed: its failure was logged
	retryAt   time.Time     // while failing, no request before then
	retryWait time.Duration // while failing, the wait after the last failure
}

// New validates cfg and returns a Protector. It returns ErrNotOnECS when
// no agent URI is known.
func New(cfg Config) (*Protector, error) {
	var errs []error
	// The messages start with the name of the field.
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if cfg.After < 0 {
		bad("After %s is negative", cfg.After)
	}
	if cfg.Interval < 0 {
		bad("Interval %s is negative", cfg.Interval)
	}
	if e := cfg.Expires; e != 0 && (e < time.Minute || e > MaxExpires || e%time.Minute != 0) {
		bad("Expires %s: want whole minutes from 1m to 48h", e)
	}
	if m := cfg.MaxProtected; m < 0 || m > MaxExpires {
		bad("MaxProtected %s: want up to 48h", m)
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
	if cfg.After == 0 {
		cfg.After = DefaultAfter
	}
	if cfg.Interval == 0 {
		cfg.Interval = min(DefaultInterval, max(cfg.After, MinInterval))
	}
	if cfg.Expires == 0 {
		cfg.Expires = DefaultExpires
	}
	if cfg.MaxProtected == 0 {
		cfg.MaxProtected = DefaultMaxProtected
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{Proxy: nil}}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Protector{
		cfg: cfg, url: strings.TrimSuffix(cfg.AgentURI, "/") + "/task-protection/v1/state", now: time.Now, callTimeout: callTimeout,
		maybe: true, // an earlier process in the task may have left it protected
	}, nil
}

// Middleware returns the middleware that tells the Protector which jobs
// run: add it to the worker's handler (sqsworker.Chain(h,
// p.Middleware())).
func (p *Protector) Middleware() sqsworker.Middleware {
	return func(next sqsworker.Handler) sqsworker.Handler {
		return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			p.mu.Lock()
			e := p.jobs.PushBack(p.now())
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				p.jobs.Remove(e)
				p.mu.Unlock()
			}()
			return next.HandleMessage(ctx, m)
		})
	}
}

// busy reports whether a running job started After ago or earlier.
func (p *Protector) busy() bool {
	p.mu.Lock()
	oldest := p.jobs.Front()
	p.mu.Unlock()
	return oldest != nil && p.now().Sub(oldest.Value.(time.Time)) >= p.cfg.After
}

// Run keeps the task protected while a job has run for Config.After, until
// ctx ends. It first removes a protection an earlier process of the task
// may have left, and at the end the protection it set (within 5s). It
// returns nil.
func (p *Protector) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		if ctx.Err() == nil {
			p.poll(ctx)
		}
		select {
		case <-ctx.Done():
			if p.maybe {
				p.set(context.WithoutCancel(ctx), false)
			}
			return nil
		case <-t.C:
		}
	}
}

// poll makes one turn of Run: it protects the task if busy and it is not
// protected, or its protection is due for renewal; it removes the
// protection if not busy and the task may be protected, or once the task
// has been protected for MaxProtected. While requests fail, it waits
// longer between them, up to a minute.
func (p *Protector) poll(ctx context.Context) {
	now := p.now()
	if p.failing && now.Before(p.retryAt) {
		return
	}
	busy := p.busy()
	if !busy {
		p.capped = false
	}
	protected := p.protected.Load()
	switch {
	case busy && !p.capped && protected && !now.Before(p.since.Add(p.cfg.MaxProtected)):
		p.capped = true
		p.cfg.Logger.Warn("ecsprotect: the task has been protected from scale-in for MaxProtected, its jobs running on: the protection is removed until it has no long job, so that deployments and scale-in may proceed",
			"max_protected", p.cfg.MaxProtected)
		p.set(ctx, false)
	case busy && !p.capped && (!protected || !now.Before(p.renewAt)):
		p.set(ctx, true)
	case (!busy || p.capped) && p.maybe:
		p.set(ctx, false)
	}
}

// Interval returns Config.Interval, its default applied.
func (p *Protector) Interval() time.Duration { return p.cfg.Interval }

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
	maybe := p.maybe
	if on {
		p.maybe = true // the agent may apply it though its answer is lost
	}
	err := p.put(ctx, on)
	if err != nil {
		if ctx.Err() != nil {
			return // the Protector stopping: Run's end asks again
		}
		if refused(err) {
			// Not applied. A refused protection leaves the task as it
			// was; a refused removal cannot be made, and is not asked
			// for again (a protection left there expires by itself).
			p.maybe = on && maybe
		}
		if !p.failing {
			p.cfg.Logger.Warn("ecsprotect: could not change the task's scale-in protection through the ECS agent; asking again, less often while it fails; meanwhile scale-in may stop the task with jobs running, or wait for it while idle",
				"protect", on, "error", err)
			p.retryWait = p.cfg.Interval
		} else {
			p.retryWait = min(2*p.retryWait, max(maxRetryWait, p.cfg.Interval))
		}
		p.failing = true
		p.retryAt = p.now().Add(p.retryWait)
		return
	}
	if p.failing {
		p.cfg.Logger.Info("ecsprotect: the ECS agent changes the task's scale-in protection again", "protect", on)
	}
	p.failing = false
	if on && !p.protected.Load() {
		p.since = p.now()
	}
	p.protected.Store(on)
	p.maybe = on
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
	ctx, cancel := context.WithTimeout(ctx, p.callTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, p.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("ecsprotect: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.cfg.Client.Do(req)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("ecsprotect: the ECS agent refuses connections (is $%s, or Config.AgentURI, the agent's?): %w", AgentURIEnv, err)
	}
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

// refused reports whether err is a refusal, which the agent did not apply
// and would refuse again: an answer below 500 other than throttling.
func refused(err error) bool {
	var ae *AgentError
	return errors.As(err, &ae) && ae.Status < 500 && !strings.Contains(ae.Code, "Throttl")
}

// AgentError is an answer of the ECS agent other than the protection asked
// for: its refusal, or that of the ECS API behind it. One with a Status
// below 500 was not applied; one of 500 or more may have been.
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
		msg += " (grant the task role ecs:UpdateTaskProtection on the cluster's tasks)"
	case e.Status == http.StatusForbidden && strings.Contains(strings.ToLower(e.Message), "credentials"):
		msg += " (give the task definition a task role, allowed ecs:UpdateTaskProtection on the cluster's tasks)"
	case e.Code == "TASK_NOT_VALID":
		msg += " (only the tasks of an ECS service can be protected)"
	}
	return msg
}

package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/ecsprotect"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// On the local SQS, with a stand-in for the ECS agent on loopback: a
// command that runs for longer than --scale-in-protection-after protects
// the task, and its end removes the protection; the message is deleted.
// Not parallel: it sets $ECS_AGENT_URI.
func TestRunScaleInProtection(t *testing.T) {
	var mu sync.Mutex
	var asked []bool
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s struct{ ProtectionEnabled bool }
		if r.Method != http.MethodPut || r.URL.Path != "/v3/task/task-protection/v1/state" || json.NewDecoder(r.Body).Decode(&s) != nil {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		mu.Lock()
		asked = append(asked, s.ProtectionEnabled)
		mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"protection": map[string]any{"ProtectionEnabled": s.ProtectionEnabled}})
	}))
	defer agent.Close()
	t.Setenv(ecsprotect.AgentURIEnv, agent.URL+"/v3/task")

	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 3})
	localtest.Send(t, c, q.URL, "", "quick", "long")
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--scale-in-protection", "--scale-in-protection-after", "1s",
		"--", "sh", "-c", `if [ "$(cat)" = long ]; then sleep 3; fi`)
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", p.stderr.String())
		}
	}()
	localtest.Eventually(t, 60*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		mu.Lock()
		defer mu.Unlock()
		return v+f+d == 0 && len(asked) == 3
	}, "the messages not handled, or the protection not set and removed")
	interrupt()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d, want 0; stderr:\n%s", code, p.stderr.String())
	}
	mu.Lock()
	defer mu.Unlock()
	// The stand-in counts a request when it comes in: the interrupt may
	// cut the removal's request before its answer is read, and the
	// Protector, not knowing whether it was applied, asks for the removal
	// once more as it stops (ecsprotect's Run). Any request after the
	// third is such a removal.
	if len(asked) < 3 || asked[0] || !asked[1] || slices.Contains(asked[2:], true) || len(asked) > 4 {
		t.Errorf("the agent was asked %v, want not to protect the task (at the start), to protect it, then not (asked again as it stops, at most once)", asked)
	}
	if s := p.stderr.String(); strings.Contains(s, "level=WARN") {
		t.Errorf("warnings:\n%s", s)
	}
}

// Outside an ECS task, --scale-in-protection is a mistake in the command
// line that says so, before any message is received.
func TestRunScaleInProtectionOutsideECS(t *testing.T) {
	t.Setenv(ecsprotect.AgentURIEnv, "")
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, q.URL, "", "job")
	_, stderr, code := runCLI(t, "", "run", q.URL, "--scale-in-protection", "--", "true")
	if code != 2 || !strings.Contains(stderr, "--scale-in-protection: $ECS_AGENT_URI is not set: run sqsworker in a task of an ECS service, or leave the flag out") {
		t.Errorf("exit %d, want 2 and the fix; stderr:\n%s", code, stderr)
	}
	if v, _, _ := localtest.Depth(t, c, q.URL); v != 1 {
		t.Errorf("%d messages visible, want the one sent, untouched", v)
	}
	_, stderr, code = runCLI(t, "", "run", q.URL, "--scale-in-protection-after", "0s", "--", "true")
	if code != 2 || !strings.Contains(stderr, "--scale-in-protection-after 0s: want a positive duration") {
		t.Errorf("exit %d; stderr:\n%s", code, stderr)
	}
	// Checked before any call: with no SQS to reach, the mistake is still
	// the one reported.
	_, stderr, code = runCLI(t, "", "run", "http://127.0.0.1:1/000000000000/nowhere", "--scale-in-protection", "--", "true")
	if code != 2 || !strings.Contains(stderr, "$ECS_AGENT_URI is not set") {
		t.Errorf("no SQS: exit %d; stderr:\n%s", code, stderr)
	}
}

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// With --metrics emf, run writes CloudWatch EMF records to stdout, which the
// awslogs driver ships and CloudWatch turns into the dashboard's metrics.
func TestRunMetricsEMF(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, q.URL, "", "a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--metrics", "emf", "--handler-name", "jobs", "--", "sh", "-c", "cat >/dev/null")
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, f, _ := localtest.Depth(t, c, q.URL)
		return v+f == 0
	}, "messages not handled")
	cancel()
	p.wait(t)
	out := p.stdout.String()
	succeeded := 0.0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["_aws"] == nil {
			t.Fatalf("not an EMF record: %s", line)
		}
		if n, ok := rec["messages_succeeded"].(float64); ok && rec["handler"] == "jobs" {
			succeeded += n
		}
	}
	if succeeded != 2 {
		t.Errorf("EMF records count %v successes, want 2:\n%s", succeeded, out)
	}
	_, stderr, code := runCLI(t, "", "run", q.URL, "--metrics", "statsd", "--", "true")
	if code != 2 || !strings.Contains(stderr, `--metrics "statsd"`) {
		t.Errorf("bad --metrics: code %d, %s", code, stderr)
	}
}

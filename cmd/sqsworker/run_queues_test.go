package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

func TestParseQueueSpec(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want queueSpec
	}{
		{"jobs", queueSpec{name: "jobs"}},
		{"critical:3", queueSpec{name: "critical", priority: 3}},
		{"critical:3:4", queueSpec{name: "critical", priority: 3, reserved: 4}},
		{"bulk::2", queueSpec{name: "bulk", reserved: 2}},
		{"http://127.0.0.1:4566/000000000000/critical:2:1", queueSpec{name: "http://127.0.0.1:4566/000000000000/critical", priority: 2, reserved: 1}},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo", queueSpec{name: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo"}},
		{"arn:aws:sqs:eu-west-1:123456789012:critical:3:4", queueSpec{name: "arn:aws:sqs:eu-west-1:123456789012:critical", priority: 3, reserved: 4}},
		{"arn:aws:sqs:eu-west-1:123456789012:jobs", queueSpec{name: "arn:aws:sqs:eu-west-1:123456789012:jobs"}},
	} {
		got, err := parseQueueSpec(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("parseQueueSpec(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for in, want := range map[string]string{
		"":               "no queue name",
		":3":             "no queue name",
		"critical:high":  `priority "high" is not a whole number`,
		"critical:1:-2":  `reserved "-2" is not a whole number`,
		"critical:1:2:3": "too many fields",
	} {
		if _, err := parseQueueSpec(in); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "NAME[:PRIORITY[:RESERVED]]") {
			t.Errorf("parseQueueSpec(%q) = %v, want an error saying %q and the form", in, err, want)
		}
	}
}

func TestRunQueuesErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--queue", "a", "b", "--", "cat"}, "either as QUEUE or with --queue, not both"},
		{[]string{"run", "--queue", "a", "b"}, "either as QUEUE or with --queue, not both"},
		{[]string{"run", "--queue", "a"}, "no command after -- and no --http URL"},
		{[]string{"run", "--queue", "a", "--"}, "no command after --"},
		{[]string{"run", "--queue", "a:x", "--", "cat"}, `priority "x"`},
		{[]string{"run", "--queue", "a", "--queue", "a:2", "--", "cat"}, "--queue a is given twice"},
		{[]string{"run", "--queue", "a", "--rate-limit", "-1", "--", "cat"}, "--rate-limit -1"},
	} {
		_, stderr, code := runCLI(t, "", tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	// Every bad --queue is named at once.
	_, stderr, _ := runCLI(t, "", "run", "--queue", "a:x", "--queue", "b:1:y", "--", "cat")
	if !strings.Contains(stderr, `priority "x"`) || !strings.Contains(stderr, `reserved "y"`) {
		t.Errorf("stderr %q does not name both bad --queue", stderr)
	}
}

// Two priority queues in one run: the command sees each message's queue in
// SQS_QUEUE_URL, both queues are drained, and too many reserved slots are
// refused with the fix.
func TestRunPriorityQueues(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	crit := localtest.NewQueue(t, c, localtest.QueueOptions{})
	low := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, crit.URL, "", "c1", "c2", "c3")
	localtest.Send(t, c, low.URL, "", "l1", "l2", "l3", "l4")
	done := filepath.Join(t.TempDir(), "done")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", "--wait", "1s", "--concurrency", "3", "--queue", crit.URL+":1:1", "--queue", low.URL,
		"--rate-limit", "100", "--", "sh", "-c", `printf '%s %s\n' "$(cat)" "$SQS_QUEUE_URL" >> `+done)
	localtest.Eventually(t, 60*time.Second, func() bool { return len(fileLines(t, done)) == 7 },
		"commands done: %q; stderr:\n%s", fileLines(t, done), p.stderr.String())
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel; stderr:\n%s", code, p.stderr.String())
	}
	got := fileLines(t, done)
	slices.Sort(got)
	want := []string{"c1 " + crit.URL, "c2 " + crit.URL, "c3 " + crit.URL, "l1 " + low.URL, "l2 " + low.URL, "l3 " + low.URL, "l4 " + low.URL}
	if !slices.Equal(got, want) {
		t.Errorf("done:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !strings.Contains(p.stderr.String(), "consuming priority queues") || !strings.Contains(p.stderr.String(), "succeeded=7") {
		t.Errorf("stderr lacks the start or the totals:\n%s", p.stderr.String())
	}

	_, stderr, code := runCLI(t, "", "run", "--concurrency", "2", "--queue", crit.URL+":1:2", "--queue", low.URL, "--", "cat")
	if code != 2 || !strings.Contains(stderr, "would never run") {
		t.Errorf("a pool all reserved: exit %d, stderr %q", code, stderr)
	}
}

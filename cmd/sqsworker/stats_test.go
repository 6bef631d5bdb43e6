package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// statsQueues makes a queue with a dead-letter queue, holding two visible
// messages, one in flight and one delayed, and two in its dead-letter
// queue; and an empty FIFO queue without one.
func statsQueues(t *testing.T, c *sqs.Client) (q, fifo localtest.Queue) {
	t.Helper()
	q = localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 5})
	fifo = localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, VisibilityTimeout: 90 * time.Second})
	localtest.Send(t, c, q.URL, "", "a", "b", "c")
	_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("later"), DelaySeconds: 900})
	if err != nil {
		t.Fatal(err)
	}
	localtest.Send(t, c, q.DLQURL, "", "dead 1", "dead 2")
	localtest.Eventually(t, 30*time.Second, func() bool {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 1, VisibilityTimeout: 600, WaitTimeSeconds: 1})
		return err == nil && len(out.Messages) == 1
	}, "no message received")
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		dv, _, _ := localtest.Depth(t, c, q.DLQURL)
		return v == 2 && f == 1 && d == 1 && dv == 2
	}, "queue figures not settled")
	return q, fifo
}

// normalizeStats makes the output of stats independent of the random part
// of the queue names and of the endpoint.
func normalizeStats(out string, queues ...localtest.Queue) string {
	for _, q := range queues {
		for _, u := range []string{q.URL, q.DLQURL} {
			if u == "" {
				continue
			}
			i := strings.LastIndexByte(u, '/')
			name := strings.TrimSuffix(u[i+1:], ".fifo")
			out = strings.ReplaceAll(out, u[:i+1], "https://sqs.example/000000000000/")
			out = strings.ReplaceAll(out, name[len(name)-8:], "XXXXXXXX") // the random suffix
		}
	}
	return out
}

func TestStatsGolden(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q, fifo := statsQueues(t, c)
	name := q.URL[strings.LastIndexByte(q.URL, '/')+1:]

	stdout, stderr, code := runCLI(t, "", "stats", name, fifo.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "stats.golden", normalizeStats(stdout, q, fifo))

	stdout, stderr, code = runCLI(t, "", "stats", "-o", "json", name, fifo.URL)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rows []statsRow
	if err := json.Unmarshal([]byte(stdout), &rows); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if len(rows) != 2 || rows[0].URL != q.URL || rows[0].DeadLetterQueue == nil || rows[0].DeadLetterQueue.URL != q.DLQURL {
		t.Errorf("rows %+v", rows)
	}
	golden(t, "stats.json.golden", normalizeStats(stdout, q, fifo))
}

// A redrive policy whose dead-letter queue is gone is shown, not an error.
func TestStatsMissingDLQ(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	if _, err := c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &q.DLQURL}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr string
	var code int
	localtest.Eventually(t, 90*time.Second, func() bool { // SQS takes a while to forget a deleted queue
		stdout, stderr, code = runCLI(t, "", "stats", q.URL)
		return code != 0 || strings.Contains(stdout, "(missing)")
	}, "the deleted dead-letter queue is not shown missing:\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestStatsWatch(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := startCLI(t, ctx, "", "stats", q.URL, "--watch", "--interval", "100ms")
	localtest.Eventually(t, 60*time.Second, func() bool {
		return strings.Count(r.stdout.String(), "QUEUE ") >= 3
	}, "fewer than 3 snapshots:\n%s", r.stdout.String())
	localtest.Send(t, c, q.URL, "", "new")
	localtest.Eventually(t, 60*time.Second, func() bool {
		snaps := strings.Split(r.stdout.String(), "\n\n")
		return len(snaps) > 1 && strings.Contains(snaps[len(snaps)-2], " 1 ")
	}, "the new message is not shown:\n%s", r.stdout.String())
	cancel()
	if code := r.wait(t); code != 0 {
		t.Errorf("exit %d after cancel: %s", code, r.stderr.String())
	}
	out := r.stdout.String()
	if strings.Contains(out, "\x1b") {
		t.Errorf("escape sequences written to a non-terminal:\n%q", out)
	}
	for i, snap := range strings.Split(strings.TrimSuffix(out, "\n"), "\n\n") {
		lines := strings.Split(snap, "\n")
		if len(lines) != 2 || !strings.HasPrefix(lines[0], "QUEUE ") {
			t.Errorf("snapshot %d is not a table of one queue:\n%s", i, snap)
		}
	}
}

func TestStatsErrors(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	missing := localtest.UniqueName(t, false)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"stats", q.URL, missing}, 1, "queue " + missing + " does not exist"},
		{[]string{"stats", q.URL + "-gone"}, 1, "queue " + q.URL + "-gone does not exist"},
		{[]string{"stats"}, 2, "stats takes one or more QUEUE"},
		{[]string{"stats", q.URL, "--watch", "--interval", "0s"}, 2, "--interval 0s: want a positive duration"},
		{[]string{"stats", q.URL, "--interval", "1s"}, 2, "--interval is for --watch"},
		{[]string{"stats", q.URL, "--bogus"}, 2, "unknown flag: --bogus"},
	} {
		stdout, stderr, code := runCLI(t, "", tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
		if stdout != "" {
			t.Errorf("%q: output %q", tt.args, stdout)
		}
	}
}

func TestStatsHelp(t *testing.T) {
	stdout, _, code := runCLI(t, "", "stats", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Examples:", "--watch", "--interval", "ApproximateAgeOfOldestMessage"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// deleteQueuesOnCleanup deletes the named queues, if they exist, when the
// test ends.
func deleteQueuesOnCleanup(t *testing.T, c *sqs.Client, names ...string) {
	t.Cleanup(func() {
		for _, n := range names {
			out, err := c.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(n)})
			if err == nil {
				_, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
			}
		}
	})
}

// queueAttrs reads every attribute of a queue by name.
func queueAttrs(t *testing.T, c *sqs.Client, name string) map[string]string {
	t.Helper()
	u, err := c.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		t.Fatalf("queue %s: %v", name, err)
	}
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: u.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes
}

// queue create makes the queue, its dead-letter queue and the redrive
// policy that joins them, without the AWS CLI's escaped JSON; queue ls shows
// them with their figures.
func TestQueueCreateAndList(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	name := localtest.UniqueName(t, false)
	dlq := name + "-dlq"
	deleteQueuesOnCleanup(t, c, name, dlq)

	stdout, stderr, code := runCLI(t, "", "queue", "create", name, "--dlq", dlq, "--max-receives", "3", "--visibility", "45s")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "created  "+dlq) || !strings.HasPrefix(lines[1], "created  "+name+" ") ||
		!strings.Contains(lines[1], "dead-letter queue "+dlq+" after 3 receives, visibility timeout 45s") {
		t.Errorf("output:\n%s", stdout)
	}
	attrs, dlqAttrs := queueAttrs(t, c, name), queueAttrs(t, c, dlq)
	var policy struct {
		Target string `json:"deadLetterTargetArn"`
		Max    any    `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(attrs["RedrivePolicy"]), &policy); err != nil || policy.Target != dlqAttrs["QueueArn"] || fmt.Sprint(policy.Max) != "3" {
		t.Errorf("redrive policy %s (dead-letter queue %s)", attrs["RedrivePolicy"], dlqAttrs["QueueArn"])
	}
	if attrs["VisibilityTimeout"] != "45" {
		t.Errorf("visibility timeout %s", attrs["VisibilityTimeout"])
	}
	// The dead-letter queue outlives the queue's retention: SQS keeps a
	// standard message's first send time when it moves it there.
	if dlqAttrs["MessageRetentionPeriod"] != "1209600" {
		t.Errorf("the dead-letter queue keeps messages %ss, want 14 days", dlqAttrs["MessageRetentionPeriod"])
	}
	if strings.Contains(stderr, "warning") {
		t.Errorf("warnings for a sound queue:\n%s", stderr)
	}

	// Again: nothing changes, and it says so.
	stdout, _, code = runCLI(t, "", "queue", "create", name, "--dlq", dlq, "--max-receives", "3", "--visibility", "45s")
	if code != 0 || !strings.HasPrefix(stdout, "exists  "+dlq) || !strings.Contains(stdout, "\nexists  "+name+" ") {
		t.Errorf("exit %d, output:\n%s", code, stdout)
	}

	if _, stderr, code := runCLI(t, "", "send", name, "a", "b"); code != 0 {
		t.Fatalf("send: exit %d: %s", code, stderr)
	}
	stdout, stderr, code = runCLI(t, "", "queue", "ls", name)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	want := "QUEUE" + strings.Repeat(" ", len(dlq)-3) + "VISIBLE  IN FLIGHT  DELAYED  DLQ" + strings.Repeat(" ", len(dlq)-1) + "DLQ DEPTH\n" +
		name + strings.Repeat(" ", len(dlq)-len(name)+2) + "2        0          0        " + dlq + "  0\n" +
		dlq + "  0        0          0        (dlq of 1)" + strings.Repeat(" ", len(dlq)-8) + "-\n"
	if stdout != want {
		t.Errorf("queue ls:\n%s\nwant:\n%s", stdout, want)
	}
	stdout, _, code = runCLI(t, "", "queue", "ls", name, "-o", "json")
	var rows []queueListed
	if err := json.Unmarshal([]byte(stdout), &rows); code != 0 || err != nil || len(rows) != 2 {
		t.Fatalf("exit %d, %v:\n%s", code, err, stdout)
	}
	if r := rows[0]; r.Queue != name || r.Visible != 2 || r.DeadLetterQueue != dlq || r.MaxReceiveCount != 3 || r.DLQDepth == nil || *r.DLQDepth != 0 {
		t.Errorf("row %+v", r)
	}
	if r := rows[1]; r.Queue != dlq || r.Sources != 1 || r.DeadLetterQueue != "" {
		t.Errorf("row %+v", r)
	}
	_, stderr, code = runCLI(t, "", "queue", "ls", name+"-none")
	if code != 0 || !strings.Contains(stderr, "has a name starting with") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

func TestQueueCreateFIFO(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	name := localtest.UniqueName(t, true)
	dlq := strings.TrimSuffix(name, ".fifo") + "-dlq.fifo"
	deleteQueuesOnCleanup(t, c, name, dlq)
	if _, stderr, code := runCLI(t, "", "queue", "create", name, "--dlq", dlq, "--content-dedup"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	attrs, dlqAttrs := queueAttrs(t, c, name), queueAttrs(t, c, dlq)
	if attrs["FifoQueue"] != "true" || attrs["ContentBasedDeduplication"] != "true" || dlqAttrs["FifoQueue"] != "true" {
		t.Errorf("queue %v, dead-letter queue %v", attrs, dlqAttrs)
	}
	// Content-based deduplication: no ID needed.
	if _, stderr, code := runCLI(t, "", "send", name, "x", "--group", "g"); code != 0 {
		t.Errorf("send: exit %d: %s", code, stderr)
	}
}

func TestQueueErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "create"}, "queue create takes a queue NAME"},
		{[]string{"queue", "create", "jobs", "--fifo"}, `a FIFO queue's name ends in .fifo: jobs.fifo`},
		{[]string{"queue", "create", "jobs.fifo", "--dlq", "jobs-dlq"}, `--dlq "jobs-dlq": a FIFO queue's name ends in .fifo`},
		{[]string{"queue", "create", "jobs", "--dlq", "jobs-dlq.fifo"}, "the name of a standard queue cannot end in .fifo"},
		{[]string{"queue", "create", "jobs", "--max-receives", "3"}, "give --dlq NAME too"},
		{[]string{"queue", "create", "jobs", "--dlq", "d", "--max-receives", "0"}, "--max-receives 0: want 1 to 1000"},
		{[]string{"queue", "create", "jobs", "--visibility", "1.5s"}, "--visibility 1.5s"},
		{[]string{"queue", "create", "jobs", "--content-dedup"}, "--content-dedup is for FIFO queues"},
		{[]string{"queue", "create", "bad name"}, "a queue name is 1 to 80 letters"},
		{[]string{"queue", "create", "jobs", "--dlq", "jobs"}, "cannot be its own dead-letter queue"},
		{[]string{"queue", "lst"}, `unknown command "lst" for "sqsworker queue"; did you mean ls?`},
		{[]string{"queue", "ls", "a", "b"}, "at most one PREFIX"},
	} {
		_, stderr, code := runCLI(t, "", tt.args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// Settings that put healthy jobs in the dead-letter queue, or lose them
// there, are refused or warned of: a visibility timeout of 0, fewer than 3
// receives, an existing dead-letter queue that keeps its messages less
// than 14 days.
func TestQueueCreateWarnsOfRiskySettings(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	name := localtest.UniqueName(t, false)
	dlq := name + "-dlq"
	deleteQueuesOnCleanup(t, c, name, dlq)
	if _, stderr, code := runCLI(t, "", "queue", "create", name, "--visibility", "0s"); code != 2 || !strings.Contains(stderr, "--visibility 0s: want whole seconds from 1s to 12h") {
		t.Errorf("--visibility 0s: exit %d, stderr:\n%s", code, stderr)
	}
	if _, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(dlq)}); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "", "queue", "create", name, "--dlq", dlq, "--max-receives", "1")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	for _, want := range []string{
		"warning: --max-receives 1: a job is dead-lettered after 1 receive(s)",
		"warning: the dead-letter queue " + dlq + " keeps messages 96h0m0s",
		"MessageRetentionPeriod=1209600",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
}

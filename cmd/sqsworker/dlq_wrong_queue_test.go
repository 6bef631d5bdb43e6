package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// newSecondSource creates another source queue of dlqARN, deleted when the
// test ends, and returns its URL.
func newSecondSource(t *testing.T, c *sqs.Client, dlqARN string) string {
	t.Helper()
	name := localtest.UniqueName(t, false)
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, dlqARN),
	}})
	if err != nil {
		t.Fatal(err)
	}
	u := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)}) })
	return u
}

// Purging a dead-letter queue that several source queues share asks with
// every source named: all of them lose their dead letters.
func TestDlqSharedDLQPurgeNamesEverySource(t *testing.T) {
	t.Parallel()
	c, orders, _ := newDLQ(t, localtest.QueueOptions{})
	payments := newSecondSource(t, c, orders.DLQARN)
	sendDeadLettered(t, c, orders.DLQURL, "order", sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: orders.URL, MessageID: "o-1", FailedAt: time.Now().UTC()}, nil)
	waitVisible(t, c, orders.DLQURL, 1)
	_, stderr, code := runCLI(t, "no\n", "dlq", "purge", queueName(orders.DLQURL), "--audit", filepath.Join(t.TempDir(), "audit.jsonl"))
	want := "the dead letters of all 2 of its source queues ("
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, queueName(orders.URL)) || !strings.Contains(stderr, queueName(payments)) ||
		!strings.Contains(stderr, "not purged") {
		t.Errorf("purge of a shared dead-letter queue: exit %d\n%s", code, stderr)
	}
	waitVisible(t, c, orders.DLQURL, 1)
}

// A dead-letter queue shared by two sources, replayed with --to one of
// them: only that source's dead letters go there; the other's stay, each
// listed with where it belongs, and the command fails naming the fix. A
// replay without --to then sends them back to their own source.
func TestDlqSharedDLQReplayToOneSource(t *testing.T) {
	t.Parallel()
	c, orders, _ := newDLQ(t, localtest.QueueOptions{})
	payments := newSecondSource(t, c, orders.DLQARN)
	fail := func(src, id string) sqsworker.Failure {
		return sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: src, MessageID: id, FailedAt: time.Now().UTC()}
	}
	sendDeadLettered(t, c, orders.DLQURL, "order", fail(orders.URL, "o-1"), nil)
	sendDeadLettered(t, c, orders.DLQURL, "payment", fail(payments, "p-1"), nil)
	waitVisible(t, c, orders.DLQURL, 2)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")

	stdout, stderr, code := runCLI(t, "", "dlq", "replay", queueName(orders.DLQURL), "--to", queueName(orders.URL), "--yes", "--audit", audit)
	want := fmt.Sprintf("it failed in %s, which sends its dead letters to %s too, not in %s (the destination)",
		queueName(payments), queueName(orders.DLQURL), queueName(orders.URL))
	if code != 1 || !strings.Contains(stderr, want) ||
		!strings.Contains(stderr, "1 matching message(s) stay in "+queueName(orders.DLQURL)+": they failed in another of its source queues than --to") ||
		!strings.Contains(stderr, "replay them without --to") {
		t.Errorf("replay --to %s: exit %d\nstdout: %s\nstderr: %s", queueName(orders.URL), code, stdout, stderr)
	}
	if got := bodies(drain(t, c, orders.URL, time.Second)); fmt.Sprint(got) != "[order]" {
		t.Errorf("%s received %v, want only its own job", queueName(orders.URL), got)
	}
	waitVisible(t, c, orders.DLQURL, 1)
	if n := len(readMoves(t, audit)); n != 1 {
		t.Errorf("%d audit line(s), want 1", n)
	}

	if _, stderr, code := runCLI(t, "", "dlq", "replay", queueName(orders.DLQURL), "--yes", "--audit", audit); code != 0 {
		t.Fatalf("replay: exit %d\n%s", code, stderr)
	}
	if got := bodies(drain(t, c, payments, time.Second)); fmt.Sprint(got) != "[payment]" {
		t.Errorf("%s received %v", queueName(payments), got)
	}
}

// A dead-letter message of SQS's largest size, 1 MiB with its attributes,
// is replayed without the replay count its copy has no room for (the
// output says so), instead of stopping the replay with SQS's refusal and
// staying in the dead-letter queue for ever.
func TestDlqReplayFullSizeMessage(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: q.URL, MessageID: "m-1", FailedAt: time.Now().UTC()}
	attrs, _ := f.AddTo(map[string]sqsworker.MessageAttribute{})
	body := strings.Repeat("x", sqsworker.MaxMessageSize-sqsworker.MessageSize("", attrs))
	sendDeadLettered(t, c, q.DLQURL, body, f, nil)
	waitVisible(t, c, q.DLQURL, 1)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	stdout, stderr, code := runCLI(t, "", "dlq", "replay", queueName(q.DLQURL), "--yes", "--audit", audit)
	if code != 0 || !strings.Contains(stderr, "moved 1 message(s)") {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	got := drainAtLeast(t, c, q.URL, 1)
	if len(got) != 1 || got[0].body != body || got[0].failure.MessageID != "m-1" {
		t.Fatalf("the source queue received %d message(s)", len(got))
	}
	if _, ok := got[0].attrs["sqsworker.replays"]; ok {
		t.Errorf("the copy has a replay count: %v", got[0].attrs["sqsworker.replays"])
	}
	if lines := readMoves(t, audit); len(lines) != 1 || lines[0].Replays != 0 || !strings.Contains(lines[0].Note, "sqsworker.replays left out: SQS refused the copy with it") {
		t.Errorf("audit: %+v", lines)
	}
	waitVisible(t, c, q.DLQURL, 0)
}

// A message larger than its source queue's MaximumMessageSize (the limit
// was lowered after it failed, or its failure metadata took it over)
// stays, listed with the reason and the fix, and the replay moves the
// others; the command exits 1. Before, the replay stopped at it.
func TestDlqReplayRefusedCopyStays(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: q.URL, MessageID: "m-1", FailedAt: time.Now().UTC()}
	sendDeadLettered(t, c, q.DLQURL, strings.Repeat("x", 1000), f, nil)
	f.MessageID = "m-2"
	sendDeadLettered(t, c, q.DLQURL, "small", f, nil)
	waitVisible(t, c, q.DLQURL, 2)
	if _, err := c.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(q.URL),
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	stdout, stderr, code := runCLI(t, "", "dlq", "replay", queueName(q.DLQURL), "--yes", "--audit", audit)
	if code != 1 || !strings.Contains(stderr, "(original m-1): SQS refused its copy to "+queueName(q.URL)) ||
		!strings.Contains(stderr, "raise the MaximumMessageSize of "+queueName(q.URL)) ||
		!strings.Contains(stderr, "1 matching message(s) stay in "+queueName(q.DLQURL)+": SQS refused their copies") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if got := bodies(drain(t, c, q.URL, time.Second)); fmt.Sprint(got) != "[small]" {
		t.Errorf("the source queue received %v", got)
	}
	if got := drain(t, c, q.DLQURL, time.Second); len(got) != 1 || got[0].failure.MessageID != "m-1" {
		t.Errorf("the dead-letter queue holds %d message(s)", len(got))
	}
	failed := 0
	for _, r := range readAudit(t, audit) {
		if r.Action == dlq.ActionReplayFailed && r.OriginalMessageID == "m-1" && strings.Contains(r.Note, "not copied: SQS refused it: ") {
			failed++
		}
	}
	if moves := readMoves(t, audit); len(moves) != 1 || moves[0].OriginalMessageID != "m-2" || failed != 1 {
		t.Errorf("audit: %+v", readAudit(t, audit))
	}
}

// A source queue given for its dead-letter queue (purge orders instead of
// orders-dlq): refused before anything is received or purged, and the
// error names the dead-letter queue that was most likely meant, not only
// --force, which would purge the live queue.
func TestDlqSourceQueueGivenForItsDLQ(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.URL, "", "live 1", "live 2")
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	want := fmt.Sprintf("did you mean its dead-letter queue, %s? (give --force to act on %s itself anyway)", queueName(q.DLQURL), queueName(q.URL))
	for _, args := range [][]string{
		{"dlq", "purge", queueName(q.URL)},
		{"dlq", "purge", q.URL, "--yes", "--audit", audit},
		{"dlq", "replay", queueName(q.URL), "--yes", "--audit", audit},
		{"dlq", "redrive", queueName(q.URL), "--yes", "--audit", audit},
		{"dlq", "ls", queueName(q.URL)},
	} {
		stdout, stderr, code := runCLI(t, queueName(q.URL)+"\n", args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, "it has a redrive policy of its own") || !strings.Contains(stderr, want) {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
	waitVisible(t, c, q.URL, 2)
	if lines := readAudit(t, audit); len(lines) != 0 {
		t.Errorf("audit: %+v", lines)
	}
}

// --to another pipeline's dead-letter queue (billing-dlq typed for
// billing): refused before anything moves, naming the queue meant; the
// messages would sit there, not run. --force sends them all the same.
func TestDlqReplayToADeadLetterQueue(t *testing.T) {
	t.Parallel()
	c, orders, _ := newDLQ(t, localtest.QueueOptions{})
	billing := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: orders.URL, MessageID: "m-1", FailedAt: time.Now().UTC()}
	sendDeadLettered(t, c, orders.DLQURL, "job", f, nil)
	waitVisible(t, c, orders.DLQURL, 1)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	want := fmt.Sprintf("--to: destination %s is a dead-letter queue (%s sends its dead letters there): messages sent to it would not run; give its source queue, %s, instead",
		queueName(billing.DLQURL), queueName(billing.URL), queueName(billing.URL))
	for _, args := range [][]string{
		{"dlq", "replay", queueName(orders.DLQURL), "--to", queueName(billing.DLQURL), "--yes", "--audit", audit},
		{"dlq", "replay", queueName(orders.DLQURL), "--to", billing.DLQURL},
		{"dlq", "redrive", queueName(orders.DLQURL), "--to", queueName(billing.DLQURL)},
	} {
		stdout, stderr, code := runCLI(t, "", args...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, want) || !strings.Contains(stderr, "give --force to send them there anyway") {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
	waitVisible(t, c, orders.DLQURL, 1)
	if lines := readAudit(t, audit); len(lines) != 0 {
		t.Errorf("audit: %+v", lines)
	}
	if _, stderr, code := runCLI(t, "", "dlq", "replay", queueName(orders.DLQURL), "--to", queueName(billing.DLQURL), "--force", "--yes", "--audit", audit); code != 0 {
		t.Fatalf("--force: exit %d\n%s", code, stderr)
	}
	waitVisible(t, c, billing.DLQURL, 1)
}

// queue create with --dlq naming a live source queue (orders, for
// orders-dlq): refused before the new queue is created, naming the
// queue's own dead-letter queue. Before, the new queue's failed jobs went
// to the live queue, to run again under its handler, never dead-lettered.
func TestQueueCreateRefusesASourceQueueAsDLQ(t *testing.T) {
	t.Parallel()
	c, orders, _ := newDLQ(t, localtest.QueueOptions{})
	name := localtest.UniqueName(t, false)
	deleteQueuesOnCleanup(t, c, name)
	stdout, stderr, code := runCLI(t, "", "queue", "create", name, "--dlq", queueName(orders.URL))
	want := fmt.Sprintf("--dlq %s is not a dead-letter queue: it has a redrive policy of its own (its messages go to %s after 2 receives)",
		queueName(orders.URL), queueName(orders.DLQURL))
	if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "the failed jobs of "+name+" would run there again") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	if _, err := c.GetQueueUrl(context.Background(), &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); err == nil {
		t.Errorf("queue %s was created", name)
	}
	// Its dead-letter queue is taken, as a shared one.
	if _, stderr, code := runCLI(t, "", "queue", "create", name, "--dlq", queueName(orders.DLQURL)); code != 0 {
		t.Errorf("--dlq %s: exit %d\n%s", queueName(orders.DLQURL), code, stderr)
	}
}

// Queue URLs given with a trailing slash (pasted from a console) are the
// same queues: the errors name them, not an empty name.
func TestDlqQueueURLWithTrailingSlash(t *testing.T) {
	t.Parallel()
	_, q, _ := newDLQ(t, localtest.QueueOptions{})
	stdout, stderr, code := runCLI(t, "", "dlq", "replay", q.DLQURL+"/", "--to", q.DLQURL+"/")
	if code != 1 || !strings.Contains(stderr, "--to: destination "+queueName(q.DLQURL)+" is the dead-letter queue itself") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	stdout, stderr, code = runCLI(t, "", "dlq", "purge", q.URL+"/", "--yes", "--audit", filepath.Join(t.TempDir(), "audit.jsonl"))
	if code != 1 || !strings.Contains(stderr, queueName(q.URL)+" is not a dead-letter queue") {
		t.Errorf("purge: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
}

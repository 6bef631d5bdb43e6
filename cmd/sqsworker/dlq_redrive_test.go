package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// redrive --fresh moves the messages the way replay does, on an endpoint
// without message move tasks too: a job that waited as a copy for a long
// backoff (sqsworker.prior-attempts) comes back without its earlier
// attempts; the dry run moves nothing. --fresh with the move task's own
// flags is a usage error.
func TestDlqRedriveFresh(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	dlqName := queueName(q.DLQURL)
	sendDeadLettered(t, c, q.DLQURL, "waited", sqsworker.Failure{ErrorClass: "timeout", SourceQueue: q.URL}, map[string]sqsworker.MessageAttribute{
		sqsworker.AttrPriorAttempts: {DataType: "Number", StringValue: "9"},
	})
	waitVisible(t, c, q.DLQURL, 1)

	if _, stderr, code := runCLI(t, "", "dlq", "redrive", dlqName, "--fresh", "--keep-attempts"); code != 2 || !strings.Contains(stderr, "--fresh moves every message") {
		t.Errorf("--fresh --keep-attempts: exit %d, %s", code, stderr)
	}
	stdout, stderr, code := runCLI(t, "", "dlq", "redrive", dlqName, "--fresh")
	if code != 0 || !strings.Contains(stdout, "timeout") || !strings.Contains(stderr, "dry run: nothing moved, use --yes to move the 1 matching message(s)") {
		t.Fatalf("dry run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, q.DLQURL, 1)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	stdout, stderr, code = runCLI(t, "", "dlq", "redrive", dlqName, "--fresh", "--yes", "--audit", audit)
	if code != 0 || !strings.Contains(stderr, "moved 1 message(s)") {
		t.Fatalf("--fresh --yes: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	got := localtest.ReceiveAll(t, c, q.URL, 2*time.Second, time.Minute)
	if len(got) != 1 || aws.ToString(got[0].Body) != "waited" {
		t.Fatalf("source queue after --fresh: %+v", got)
	}
	if _, ok := got[0].MessageAttributes[sqsworker.AttrPriorAttempts]; ok {
		t.Errorf("the redriven job carries %s: it would count its earlier attempts", sqsworker.AttrPriorAttempts)
	}
	if lines := readMoves(t, audit); len(lines) != 1 {
		t.Errorf("%d audit line(s), want 1", len(lines))
	}
}

// A dry run whose sample found jobs with earlier attempts does not point to
// --yes alone, which would refuse; the refusal names the flags, not the
// library's fields, once.
func TestDlqRedrivePriorAttemptsWording(t *testing.T) {
	t.Parallel()
	var out, errb strings.Builder
	d := &dlqCmd{a: &app{out: &out, err: &errb, output: "table"}}
	q := &dlq.Queue{Name: "orders-dlq"}
	p := &dlq.RedrivePlan{Approximate: 7, Sampled: 5, PriorAttempts: 2}
	if err := d.printRedrive(q, p, false); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, "--fresh --yes") || !strings.Contains(s, "--keep-attempts --yes") {
		t.Errorf("dry run with prior attempts: %q", s)
	}
	msg := redriveError("orders-dlq", &dlq.PriorAttemptsError{Queue: "orders-dlq", Sampled: 5, Carrying: 2}).Error()
	if strings.Contains(msg, "KeepAttempts") || strings.Count(msg, "--fresh") != 1 || !strings.Contains(msg, "--keep-attempts") {
		t.Errorf("refusal: %q", msg)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/internal/testenv"
)

// The dead-letter queue as ls and show print it, in table and JSON form,
// from messages the real worker dead-lettered one after the other (so their
// order, by failure time, is known).
func TestDlqListAndShowGolden(t *testing.T) {
	t.Parallel()
	c := testenv.NewSQS(t)
	q := testenv.NewQueue(t, c, testenv.QueueOptions{MaxReceiveCount: 2})
	d := startDeadLetterer(t, c, q)
	jobs := []job{
		{body: `{"order":1,"customer":"c-1"}`, attrs: map[string]string{"job-id": "order-1", "tenant": "acme"},
			fail: classError{"invalid-order", "order 1: no delivery address"}, permanent: true},
		{body: `{"order":2,"customer":"c-2"}`, attrs: map[string]string{"job-id": "order-2", "tenant": "globex"},
			fail: classError{"upstream-unavailable", "payments: 503 service unavailable"}},
		{body: "plain text job", attrs: map[string]string{"job-id": "note-3"},
			fail: errors.New("line 1 of the error\nline 2 of the error"), permanent: true},
	}
	for i, j := range jobs {
		d.send(j)
		d.waitDeadLettered(i + 1)
	}
	d.stop()
	waitVisible(t, c, q.DLQURL, len(jobs))
	dlq := queueName(q.DLQURL)

	stdout, stderr, code := runCLI(t, "", "dlq", "ls", dlq, "--body")
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, stderr)
	}
	golden(t, "dlq_ls.txt", normalize(stdout, q, true))
	if !strings.Contains(stderr, "3 message(s) in "+dlq+", read with a 30s visibility timeout and released at once") {
		t.Errorf("ls stderr: %q", stderr)
	}
	// Released at once: all visible again, none in flight.
	waitVisible(t, c, q.DLQURL, len(jobs))

	stdout, _, code = runCLI(t, "", "-o", "json", "dlq", "ls", dlq, "--body")
	if code != 0 {
		t.Fatalf("ls -o json: exit %d", code)
	}
	golden(t, "dlq_ls.json", normalize(stdout, q, false))
	var listed []messageJSON
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil || len(listed) != 3 {
		t.Fatalf("ls -o json: %v, %d messages", err, len(listed))
	}
	for i, m := range listed {
		if m.OriginalMessageID != d.ids[jobs[i].body] || m.Failure == nil || m.Failure.SourceQueue != q.URL {
			t.Errorf("message %d: %+v", i, m)
		}
	}

	// Bodies only with --body.
	for _, args := range [][]string{{"dlq", "ls", dlq}, {"-o", "json", "dlq", "ls", dlq}} {
		stdout, _, _ := runCLI(t, "", args...)
		for _, j := range jobs {
			if strings.Contains(stdout, j.body) || strings.Contains(stdout, `"body"`) {
				t.Errorf("%v prints a body without --body:\n%s", args, stdout)
			}
		}
	}

	// show, by the dead-letter ID and by the original ID.
	second := listed[1]
	stdout, stderr, code = runCLI(t, "", "dlq", "show", dlq, second.MessageID, "--body")
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	golden(t, "dlq_show.txt", normalize(stdout, q, false))
	stdout, _, code = runCLI(t, "", "-o", "json", "dlq", "show", dlq, second.OriginalMessageID)
	if code != 0 {
		t.Fatalf("show -o json: exit %d", code)
	}
	golden(t, "dlq_show.json", normalize(stdout, q, false))
	var shown messageJSON
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil || shown.MessageID != second.MessageID || shown.Body != nil {
		t.Errorf("show by original ID: %v, %+v", err, shown)
	}

	_, stderr, code = runCLI(t, "", "dlq", "show", dlq, "00000000-0000-0000-0000-000000000000")
	if code != 1 || !strings.Contains(stderr, "no message with ID 00000000-0000-0000-0000-000000000000 among the 3 message(s)") {
		t.Errorf("show of an unknown ID: exit %d, %q", code, stderr)
	}
	waitVisible(t, c, q.DLQURL, len(jobs))
}

// The emulator has no message move tasks: redrive, its status and cancel say
// so clearly, point to replay, and exit 1.
func TestDlqRedriveNotSupported(t *testing.T) {
	t.Parallel()
	c := testenv.NewSQS(t)
	q := testenv.NewQueue(t, c, testenv.QueueOptions{MaxReceiveCount: 2})
	dlq := queueName(q.DLQURL)
	for _, args := range [][]string{
		{"dlq", "redrive", dlq},
		{"dlq", "redrive", dlq, "--to", queueName(q.URL), "--rate", "10"},
		{"dlq", "redrive", "status", dlq},
		{"dlq", "redrive", "cancel", "made-up-task-handle"},
	} {
		stdout, stderr, code := runCLI(t, "", args...)
		if code != 1 || stdout != "" ||
			!strings.Contains(stderr, "this SQS endpoint does not support message move tasks") ||
			!strings.Contains(stderr, "answered InvalidAction") || !strings.Contains(stderr, "sqsworker dlq replay") {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
}

// The missing API is recognised by its error code, whatever the message;
// other errors pass through.
func TestDlqMoveTaskErrorClassification(t *testing.T) {
	for _, tc := range []struct {
		err         error
		unsupported bool
	}{
		{&smithy.GenericAPIError{Code: "InvalidAction", Message: "Unknown action: StartMessageMoveTask"}, true},
		{&smithy.OperationError{ServiceID: "SQS", OperationName: "StartMessageMoveTask",
			Err: &smithy.GenericAPIError{Code: "UnknownOperationException", Message: "whatever"}}, true},
		{&smithy.GenericAPIError{Code: "AWS.SimpleQueueService.UnsupportedOperation", Message: "Unknown action"}, false},
		{&smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "Unknown action"}, false},
		{errors.New("InvalidAction: Unknown action"), false},
	} {
		err := moveTaskError("StartMessageMoveTask", "dlq", tc.err)
		if got := errors.Is(err, errMoveTasksUnsupported); got != tc.unsupported {
			t.Errorf("%v: unsupported = %v, want %v (%v)", tc.err, got, tc.unsupported, err)
		}
		if !tc.unsupported && !errors.Is(err, tc.err) {
			t.Errorf("%v is not wrapped: %v", tc.err, err)
		}
	}
}

// purge refuses without --yes unless the queue's name is typed.
func TestDlqPurge(t *testing.T) {
	t.Parallel()
	c := testenv.NewSQS(t)
	q := testenv.NewQueue(t, c, testenv.QueueOptions{})
	name := queueName(q.URL)
	fill := func() {
		testenv.Send(t, c, q.URL, "", "a", "b", "c")
		waitVisible(t, c, q.URL, 3)
	}
	fill()
	for _, tc := range []struct{ stdin, want string }{
		{"", "not purged: no confirmation (give --yes"},
		{"wrong-name\n", `not purged: "wrong-name" is not the queue name`},
		{name + "-not\n", "is not the queue name"},
	} {
		stdout, stderr, code := runCLI(t, tc.stdin, "dlq", "purge", name)
		if code != 1 || stdout != "" || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "Type the queue name ("+name+") to confirm") {
			t.Errorf("stdin %q: exit %d\nstdout: %s\nstderr: %s", tc.stdin, code, stdout, stderr)
		}
		if v, f, _ := testenv.Depth(t, c, q.URL); v+f != 3 {
			t.Fatalf("stdin %q: the queue holds %d messages, want 3", tc.stdin, v+f)
		}
	}
	stdout, stderr, code := runCLI(t, name+"\n", "dlq", "purge", name)
	if code != 0 || !strings.Contains(stdout, "purged "+name) {
		t.Fatalf("typed name: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, q.URL, 0)
	fill()
	stdout, stderr, code = runCLI(t, "", "-o", "json", "dlq", "purge", q.URL, "--yes")
	if code != 0 || !strings.Contains(stdout, `"purged": true`) || strings.Contains(stderr, "confirm") {
		t.Fatalf("--yes: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, q.URL, 0)
}

// Mistakes are clear errors, with exit code 2 for the command line's and 1
// for the queues', and nothing moves.
func TestDlqErrors(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, testenv.QueueOptions{}, job{body: "x", fail: classError{"c", "boom"}, permanent: true})
	fifo := testenv.NewQueue(t, c, testenv.QueueOptions{FIFO: true})
	dlq := queueName(q.DLQURL)
	audit := t.TempDir() + "/audit.jsonl"
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq", "ls", "no-such-queue-dlq"}, 1, `queue "no-such-queue-dlq" does not exist`},
		{[]string{"dlq", "show", "no-such-queue-dlq", "id"}, 1, `queue "no-such-queue-dlq" does not exist`},
		{[]string{"dlq", "replay", "no-such-queue-dlq"}, 1, `queue "no-such-queue-dlq" does not exist`},
		{[]string{"dlq", "replay", dlq, "--to", "no-such-queue"}, 1, `--to: queue "no-such-queue" does not exist`},
		{[]string{"dlq", "purge", "no-such-queue-dlq", "--yes"}, 1, `queue "no-such-queue-dlq" does not exist`},
		{[]string{"dlq", "redrive", "no-such-queue-dlq"}, 1, `queue "no-such-queue-dlq" does not exist`},
		{[]string{"dlq", "replay", dlq, "--to", queueName(fifo.URL), "--yes", "--audit", audit}, 1,
			"is a FIFO queue but dead-letter queue " + dlq + " is a standard queue"},
		{[]string{"dlq", "replay", dlq, "--to", dlq, "--yes", "--audit", audit}, 1, "is the dead-letter queue itself"},
		{[]string{"dlq", "ls"}, 2, "sqsworker dlq ls takes DLQ"},
		{[]string{"dlq", "show", dlq}, 2, "takes DLQ MESSAGE_ID"},
		{[]string{"dlq", "nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"dlq", "ls", dlq, "--max", "0"}, 2, "--max 0"},
		{[]string{"dlq", "ls", dlq, "--visibility", "500ms"}, 2, "--visibility 500ms"},
		{[]string{"dlq", "replay", dlq, "--rate", "-1"}, 2, "--rate -1"},
		{[]string{"dlq", "replay", dlq, "--rate", "fast"}, 2, `invalid argument "fast" for "--rate"`},
		{[]string{"dlq", "replay", dlq, "--rate", "NaN"}, 2, "--rate NaN"},
		{[]string{"dlq", "replay", dlq, "--limit", "-3"}, 2, "--limit -3"},
		{[]string{"dlq", "replay", dlq, "--attr", "tenant"}, 2, `--attr "tenant": want name=value`},
		{[]string{"dlq", "replay", dlq, "--json-field", "order..id=1"}, 2, `--json-field "order..id=1"`},
		{[]string{"dlq", "replay", dlq, "--since", "yesterday"}, 2, `--since: "yesterday" is neither an RFC 3339 time`},
		{[]string{"dlq", "replay", dlq, "--since", "1h ago", "--until", "2h ago"}, 2, "is not before --until"},
		{[]string{"dlq", "replay", dlq, "--error-class", ""}, 2, "--error-class: empty class"},
		{[]string{"dlq", "replay", dlq, "--yes", "--audit", ""}, 2, "--audit: empty file name"},
		{[]string{"dlq", "redrive", dlq, "--rate", "1000"}, 2, "--rate 1000"},
	} {
		stdout, stderr, code := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, tc.code, tc.want, stdout, stderr)
		}
	}
	waitVisible(t, c, q.DLQURL, 1)
	if v, f, _ := testenv.Depth(t, c, fifo.URL); v+f != 0 {
		t.Errorf("the FIFO queue received %d messages", v+f)
	}
	if v, f, _ := testenv.Depth(t, c, q.URL); v+f != 0 {
		t.Errorf("the source queue received %d messages", v+f)
	}
}

// A replay whose source queue is gone stops before moving anything; --to
// sends the messages elsewhere.
func TestDlqReplaySourceQueueGone(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, testenv.QueueOptions{},
		job{body: "one", fail: classError{"c", "boom"}, permanent: true},
		job{body: "two", fail: classError{"c", "boom"}, permanent: true})
	if _, err := c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)}); err != nil {
		t.Fatal(err)
	}
	audit := t.TempDir() + "/audit.jsonl"
	dlq := queueName(q.DLQURL)
	for _, yes := range []string{"--yes=false", "--yes"} {
		_, stderr, code := runCLI(t, "", "dlq", "replay", dlq, yes, "--audit", audit)
		if code != 1 || !strings.Contains(stderr, "source queue: queue \""+q.URL+"\" does not exist") || !strings.Contains(stderr, "use --to") {
			t.Errorf("%s: exit %d, %q", yes, code, stderr)
		}
		waitVisible(t, c, q.DLQURL, 2)
	}
	other := testenv.NewQueue(t, c, testenv.QueueOptions{})
	res, _ := replayJSON(t, dlq, "--to", other.URL, "--yes", "--audit", audit)
	if res.Moved != 2 {
		t.Errorf("moved %d, want 2", res.Moved)
	}
	if got := bodies(drain(t, c, other.URL, time.Second)); strings.Join(got, ",") != "one,two" {
		t.Errorf("--to queue holds %v", got)
	}
	waitVisible(t, c, q.DLQURL, 0)
}

// Every command explains itself, with examples.
func TestDlqHelp(t *testing.T) {
	for _, args := range [][]string{
		{"dlq"}, {"dlq", "ls"}, {"dlq", "show"}, {"dlq", "replay"}, {"dlq", "redrive"},
		{"dlq", "redrive", "status"}, {"dlq", "redrive", "cancel"}, {"dlq", "purge"},
	} {
		stdout, stderr, code := runCLI(t, "", append(args, "--help")...)
		if code != 0 || !strings.Contains(stdout, "Examples:") || !strings.Contains(stdout, "sqsworker "+strings.Join(args, " ")) {
			t.Errorf("%v --help: exit %d, %q\n%s", args, code, stderr, stdout)
		}
	}
	for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "show"}, {"dlq", "replay"}} {
		stdout, _, _ := runCLI(t, "", append(args, "--help")...)
		if !strings.Contains(stdout, "ChangeMessageVisibilityBatch") && !strings.Contains(stdout, "visible again at once") {
			t.Errorf("%v --help does not say how messages are released:\n%s", args, stdout)
		}
	}
}

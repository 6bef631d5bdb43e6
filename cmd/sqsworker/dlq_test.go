package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The dead-letter queue as ls and show print it, in table and JSON form,
// from messages the real worker dead-lettered one after the other (so their
// order, by failure time, is known).
func TestDlqListAndShowGolden(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
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
	dlqName := queueName(q.DLQURL)

	stdout, stderr, code := runCLI(t, "", "dlq", "ls", dlqName, "--body")
	if code != 0 {
		t.Fatalf("ls: exit %d: %s", code, stderr)
	}
	golden(t, "dlq_ls.txt", normalize(stdout, q, true))
	if !strings.Contains(stderr, "3 message(s) in "+dlqName+", read with a 30s visibility timeout and released at once") {
		t.Errorf("ls stderr: %q", stderr)
	}
	// Released at once: all visible again, none in flight.
	waitVisible(t, c, q.DLQURL, len(jobs))

	stdout, _, code = runCLI(t, "", "-o", "json", "dlq", "ls", dlqName, "--body")
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
	for _, args := range [][]string{{"dlq", "ls", dlqName}, {"-o", "json", "dlq", "ls", dlqName}} {
		stdout, _, _ := runCLI(t, "", args...)
		for _, j := range jobs {
			if strings.Contains(stdout, j.body) || strings.Contains(stdout, `"body"`) {
				t.Errorf("%v prints a body without --body:\n%s", args, stdout)
			}
		}
	}

	// show, by the dead-letter ID and by the original ID.
	second := listed[1]
	stdout, stderr, code = runCLI(t, "", "dlq", "show", dlqName, second.MessageID, "--body")
	if code != 0 {
		t.Fatalf("show: exit %d: %s", code, stderr)
	}
	golden(t, "dlq_show.txt", normalize(stdout, q, false))
	stdout, _, code = runCLI(t, "", "-o", "json", "dlq", "show", dlqName, second.OriginalMessageID)
	if code != 0 {
		t.Fatalf("show -o json: exit %d", code)
	}
	golden(t, "dlq_show.json", normalize(stdout, q, false))
	var shown messageJSON
	if err := json.Unmarshal([]byte(stdout), &shown); err != nil || shown.MessageID != second.MessageID || shown.Body != nil {
		t.Errorf("show by original ID: %v, %+v", err, shown)
	}

	// --summary counts the messages per error class and source queue.
	stdout, stderr, code = runCLI(t, "", "-o", "json", "dlq", "ls", dlqName, "--summary")
	if code != 0 {
		t.Fatalf("ls --summary: exit %d: %s", code, stderr)
	}
	var summary []classCount
	if err := json.Unmarshal([]byte(stdout), &summary); err != nil || len(summary) != 3 {
		t.Fatalf("ls --summary -o json: %v, %s", err, stdout)
	}
	classes := map[string]int{}
	for _, c := range summary {
		classes[c.ErrorClass] += c.Messages
		if c.SourceQueue != queueName(q.URL) {
			t.Errorf("summary row %+v: source %q, want %q", c, c.SourceQueue, queueName(q.URL))
		}
	}
	if classes["invalid-order"] != 1 || classes["upstream-unavailable"] != 1 || len(classes) != 3 {
		t.Errorf("summary by class %v", classes)
	}
	waitVisible(t, c, q.DLQURL, len(jobs))

	_, stderr, code = runCLI(t, "", "dlq", "show", dlqName, "00000000-0000-0000-0000-000000000000")
	if code != 1 || !strings.Contains(stderr, "no message with ID 00000000-0000-0000-0000-000000000000 among the 3 message(s)") {
		t.Errorf("show of an unknown ID: exit %d, %q", code, stderr)
	}
	waitVisible(t, c, q.DLQURL, len(jobs))
}

// The emulator has no message move tasks: redrive (its dry run and --yes),
// its status and cancel say so clearly, point to replay, exit 1, and
// record nothing.
func TestDlqRedriveNotSupported(t *testing.T) {
	t.Parallel()
	_, q, _ := newDLQ(t, localtest.QueueOptions{})
	dlqName := queueName(q.DLQURL)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, args := range [][]string{
		{"dlq", "redrive", dlqName},
		{"dlq", "redrive", dlqName, "--yes", "--audit", audit},
		{"dlq", "redrive", dlqName, "--to", queueName(q.URL), "--rate", "10", "--yes", "--audit", audit},
		{"dlq", "redrive", "status", dlqName},
		{"dlq", "redrive", "cancel", "made-up-task-handle", "--audit", audit},
	} {
		stdout, stderr, code := runCLI(t, "", args...)
		if code != 1 || stdout != "" ||
			!strings.Contains(stderr, "this SQS endpoint does not support message move tasks") ||
			!strings.Contains(stderr, "answered InvalidAction") || !strings.Contains(stderr, "sqsworker dlq replay") {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
		}
	}
	if b, _ := os.ReadFile(audit); len(b) != 0 {
		t.Errorf("audit log of redrives that did not start:\n%s", b)
	}
	// A source queue is no dead-letter queue to redrive from.
	if _, stderr, code := runCLI(t, "", "dlq", "redrive", queueName(q.URL)); code != 1 || !strings.Contains(stderr, "is not a dead-letter queue") {
		t.Errorf("redrive of a source queue: exit %d, %s", code, stderr)
	}
}

// purge refuses without --yes unless the queue's name is typed; every
// purge is recorded, before it is sent, with the caller.
func TestDlqPurge(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	name := queueName(q.DLQURL)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	fill := func() {
		localtest.Send(t, c, q.DLQURL, "", "a", "b", "c")
		waitVisible(t, c, q.DLQURL, 3)
	}
	fill()
	for _, tc := range []struct{ stdin, want string }{
		{"", "not purged: no confirmation (give --yes"},
		{"wrong-name\n", `not purged: "wrong-name" is not the queue name`},
		{name + "-not\n", "is not the queue name"},
	} {
		stdout, stderr, code := runCLI(t, tc.stdin, "dlq", "purge", name, "--audit", audit)
		// The account and region are said before the name is asked for.
		if code != 1 || stdout != "" || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "The queue is in account 000000000000, region us-east-1.\nType the queue name ("+name+") to confirm") {
			t.Errorf("stdin %q: exit %d\nstdout: %s\nstderr: %s", tc.stdin, code, stdout, stderr)
		}
		if v, f, _ := localtest.Depth(t, c, q.DLQURL); v+f != 3 {
			t.Fatalf("stdin %q: the queue holds %d messages, want 3", tc.stdin, v+f)
		}
	}
	if lines := readAudit(t, audit); len(lines) != 0 {
		t.Errorf("refused purges recorded: %+v", lines)
	}
	stdout, stderr, code := runCLI(t, name+"\n", "dlq", "purge", name, "--audit", audit)
	if code != 0 || !strings.Contains(stdout, "purged "+name) {
		t.Fatalf("typed name: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, q.DLQURL, 0)
	fill()
	// SQS allows one purge a minute (the emulator has no such rule): wait
	// for the next one.
	localtest.Eventually(t, 90*time.Second, func() bool {
		stdout, stderr, code = runCLI(t, "", "-o", "json", "dlq", "purge", q.DLQURL, "--yes", "--audit", audit)
		return code == 0 || !strings.Contains(stderr, "purged less than 60 seconds ago")
	}, "purge: %s", stderr)
	if code != 0 || !strings.Contains(stdout, `"purged": true`) || strings.Contains(stderr, "confirm") {
		t.Fatalf("--yes: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, q.DLQURL, 0)
	var purges []auditRecord
	for _, l := range readAudit(t, audit) {
		if l.Action == dlq.ActionPurge {
			purges = append(purges, l)
		}
	}
	if len(purges) != 2 {
		t.Fatalf("audit: %+v", readAudit(t, audit))
	}
	for _, l := range purges {
		if l.DLQ != q.DLQURL || l.ApproximateMessages != 3 || l.Caller != dlq.UnknownCaller || !strings.Contains(l.CallerNote, "no STS in the local stack") {
			t.Errorf("audit line %+v", l)
		}
	}
}

// The dlq commands refuse a live queue, before receiving anything from it:
// one with a redrive policy of its own, or one that no queue names as its
// dead-letter queue; --force overrides it.
func TestDlqRefusesALiveQueue(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	jobs := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	plain := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, jobs.URL, "", "live 1", "live 2")
	localtest.Send(t, c, plain.URL, "", "live 3")
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, tc := range []struct {
		q    string
		want string
	}{
		{queueName(jobs.URL), "is not a dead-letter queue: it has a redrive policy of its own (its messages go to " + queueName(jobs.DLQURL) + " after 3 receives): it is a source queue"},
		{plain.URL, "is not a dead-letter queue: no queue names it as its dead-letter queue"},
	} {
		for _, args := range [][]string{
			{"dlq", "ls", tc.q},
			{"dlq", "show", tc.q, "some-id"},
			{"dlq", "replay", tc.q},
			{"dlq", "replay", tc.q, "--yes", "--audit", audit},
			{"dlq", "purge", tc.q, "--yes", "--audit", audit},
			{"dlq", "redrive", tc.q, "--yes", "--audit", audit},
		} {
			stdout, stderr, code := runCLI(t, "", args...)
			if code != 1 || stdout != "" || !strings.Contains(stderr, tc.want) || !strings.Contains(stderr, "--force") {
				t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, stdout, stderr)
			}
		}
	}
	// Nothing was received (nothing in flight), nothing purged, nothing
	// recorded.
	for q, n := range map[string]int{jobs.URL: 2, plain.URL: 1} {
		if v, f, _ := localtest.Depth(t, c, q); v != n || f != 0 {
			t.Errorf("%s: %d visible, %d in flight", queueName(q), v, f)
		}
		for _, m := range localtest.ReceiveAll(t, c, q, time.Second, 30*time.Second) {
			if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
				t.Errorf("%s: a message was received %s times", queueName(q), n)
			}
		}
	}
	if b, _ := os.ReadFile(audit); len(b) != 0 {
		t.Errorf("audit log:\n%s", b)
	}
	// --force reads it all the same, and says so.
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, other.URL, "", "live 4")
	stdout, stderr, code := runCLI(t, "", "dlq", "ls", other.URL, "--force")
	if code != 0 || !strings.Contains(stdout, "MESSAGE ID") || !strings.Contains(stderr, "warning: opened with force although no queue names it") ||
		!strings.Contains(stderr, "1 message(s) in") {
		t.Errorf("--force: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, other.URL, 1)
}

// Failure metadata naming a queue that does not send its dead letters to
// this one is marked unverified by ls and show, and replay leaves that
// message in place, saying why, unless --to.
func TestDlqUnverifiedMetadata(t *testing.T) {
	t.Parallel()
	c, orders, _ := newDLQ(t, localtest.QueueOptions{}, job{body: "real", fail: classError{"c", "boom"}, permanent: true})
	billing := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	attrs, _ := sqsworker.Failure{ErrorClass: "c", Error: "forged", SourceQueue: billing.URL, MessageID: "forged-1", FailedAt: time.Now()}.AddTo(nil)
	in := &sqs.SendMessageInput{QueueUrl: aws.String(orders.DLQURL), MessageBody: aws.String("forged"), MessageAttributes: map[string]types.MessageAttributeValue{}}
	for k, v := range attrs {
		in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
	}
	forgedID, err := c.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	waitVisible(t, c, orders.DLQURL, 2)
	dlqName := queueName(orders.DLQURL)
	stdout, stderr, code := runCLI(t, "", "-o", "json", "dlq", "ls", dlqName)
	var ms []messageJSON
	if code != 0 || json.Unmarshal([]byte(stdout), &ms) != nil || len(ms) != 2 {
		t.Fatalf("ls: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, m := range ms {
		forged := m.MessageID == aws.ToString(forgedID.MessageId)
		if forged != (m.Metadata == "unverified") || (m.Metadata != "unverified") != (m.Metadata == "verified") ||
			forged != strings.Contains(m.Unverified, "source queue "+queueName(billing.URL)+" does not send its dead letters to "+dlqName) {
			t.Errorf("%+v", m)
		}
	}
	if !strings.Contains(stderr, "1 message(s) carry failure metadata that could not be verified") {
		t.Errorf("ls stderr: %s", stderr)
	}
	stdout, _, code = runCLI(t, "", "dlq", "show", dlqName, "forged-1")
	if code != 0 || !strings.Contains(stdout, "Metadata:        UNVERIFIED: source queue "+queueName(billing.URL)+" does not send its dead letters") {
		t.Errorf("show: exit %d\n%s", code, stdout)
	}
	stdout, _, _ = runCLI(t, "", "dlq", "ls", dlqName)
	if !strings.Contains(stdout, " unverified ") || !strings.Contains(stdout, " verified ") {
		t.Errorf("ls table:\n%s", stdout)
	}
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	for _, yes := range []string{"--yes=false", "--yes"} {
		stdout, stderr, code := runCLI(t, "", "-o", "json", "dlq", "replay", dlqName, yes, "--audit", audit)
		var res replayResult
		if code != 1 || json.Unmarshal([]byte(stdout), &res) != nil || res.Refused != 1 || res.Matched != 1 ||
			!strings.Contains(stderr, "stays: message "+aws.ToString(forgedID.MessageId)+" (original forged-1): source queue "+queueName(billing.URL)+" does not send its dead letters to "+dlqName) ||
			!strings.Contains(stderr, "1 matching message(s) stay in "+dlqName+": their source queue does not send its dead letters there") {
			t.Errorf("%s: exit %d\n%s\n%s", yes, code, stdout, stderr)
		}
	}
	if v, f, d := localtest.Depth(t, c, billing.URL); v+f+d != 0 {
		t.Errorf("billing received %d message(s)", v+f+d)
	}
	if got := bodies(drain(t, c, orders.URL, time.Second)); strings.Join(got, ",") != "real" {
		t.Errorf("orders received %v", got)
	}
	waitVisible(t, c, orders.DLQURL, 1)
	res, _ := replayJSON(t, dlqName, "--to", billing.URL, "--yes", "--audit", audit)
	if res.Moved != 1 {
		t.Errorf("--to billing: %+v", res)
	}
	if got := bodies(drain(t, c, billing.URL, time.Second)); strings.Join(got, ",") != "forged" {
		t.Errorf("billing received %v", got)
	}
}

// Mistakes are clear errors, with exit code 2 for the command line's and 1
// for the queues', and nothing moves.
func TestDlqErrors(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{}, job{body: "x", fail: classError{"c", "boom"}, permanent: true})
	fifo := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true})
	dlqName := queueName(q.DLQURL)
	audit := t.TempDir() + "/audit.jsonl"
	link := t.TempDir() + "/link.jsonl"
	if err := os.Symlink(audit, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"dlq", "ls", "no-such-queue-dlq"}, 1, "queue no-such-queue-dlq does not exist in us-east-1 at " + localtest.Endpoint() + ": check the name and the region"},
		{[]string{"dlq", "show", "no-such-queue-dlq", "id"}, 1, "queue no-such-queue-dlq does not exist in us-east-1 at " + localtest.Endpoint() + ": check the name and the region"},
		{[]string{"dlq", "replay", "no-such-queue-dlq"}, 1, "queue no-such-queue-dlq does not exist in us-east-1 at " + localtest.Endpoint() + ": check the name and the region"},
		{[]string{"dlq", "replay", dlqName, "--to", "no-such-queue"}, 1, `--to: queue "no-such-queue" does not exist`},
		{[]string{"dlq", "purge", "no-such-queue-dlq", "--yes", "--audit", audit}, 1, "queue no-such-queue-dlq does not exist in us-east-1 at " + localtest.Endpoint() + ": check the name and the region"},
		{[]string{"dlq", "redrive", "no-such-queue-dlq"}, 1, "queue no-such-queue-dlq does not exist in us-east-1 at " + localtest.Endpoint() + ": check the name and the region"},
		{[]string{"dlq", "replay", dlqName, "--to", queueName(fifo.URL), "--yes", "--audit", audit}, 1,
			"is a FIFO queue but dead-letter queue " + dlqName + " is a standard queue"},
		{[]string{"dlq", "replay", dlqName, "--to", dlqName, "--yes", "--audit", audit}, 1, "is the dead-letter queue itself"},
		{[]string{"dlq", "replay", dlqName, "--yes", "--audit", link}, 1, "audit log " + link + " is a symbolic link: not followed"},
		{[]string{"dlq", "purge", dlqName, "--yes", "--audit", link}, 1, "not purged: dlq: audit log " + link + " is a symbolic link"},
		{[]string{"dlq", "ls"}, 2, "sqsworker dlq ls takes DLQ"},
		{[]string{"dlq", "show", dlqName}, 2, "takes DLQ MESSAGE_ID"},
		{[]string{"dlq", "nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"dlq", "ls", dlqName, "--max", "0"}, 2, "--max 0"},
		{[]string{"dlq", "ls", dlqName, "--visibility", "500ms"}, 2, "--visibility 500ms"},
		{[]string{"dlq", "ls", dlqName, "--since", "later"}, 2, `--since: "later" is neither`},
		{[]string{"dlq", "replay", dlqName, "--rate", "-1"}, 2, "--rate -1"},
		{[]string{"dlq", "replay", dlqName, "--rate", "fast"}, 2, `invalid argument "fast" for "--rate"`},
		{[]string{"dlq", "replay", dlqName, "--rate", "NaN"}, 2, "--rate NaN"},
		// Each message would wait 50 s for its turn, past its 30 s hide.
		{[]string{"dlq", "replay", dlqName, "--rate", "0.02"}, 2, "give a visibility timeout of 1m40s or more"},
		{[]string{"dlq", "replay", dlqName, "--limit", "-3"}, 2, "--limit -3"},
		{[]string{"dlq", "replay", dlqName, "--attr", "tenant"}, 2, `--attr "tenant": want name=value`},
		{[]string{"dlq", "replay", dlqName, "--json-field", "order..id=1"}, 2, `--json-field "order..id=1"`},
		{[]string{"dlq", "replay", dlqName, "--since", "yesterday"}, 2, `--since: "yesterday" is neither an RFC 3339 time`},
		{[]string{"dlq", "replay", dlqName, "--since", "1h ago", "--until", "2h ago"}, 2, "is not before --until"},
		{[]string{"dlq", "replay", dlqName, "--error-class", ""}, 2, "--error-class: empty class"},
		{[]string{"dlq", "replay", dlqName, "--yes", "--audit", ""}, 2, "--audit: empty file name"},
		{[]string{"dlq", "redrive", dlqName, "--rate", "1000"}, 2, "--rate 1000"},
	} {
		stdout, stderr, code := runCLI(t, "", tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, want %d with %q\nstdout: %s\nstderr: %s", tc.args, code, tc.code, tc.want, stdout, stderr)
		}
	}
	waitVisible(t, c, q.DLQURL, 1)
	if v, f, _ := localtest.Depth(t, c, fifo.URL); v+f != 0 {
		t.Errorf("the FIFO queue received %d messages", v+f)
	}
	if v, f, _ := localtest.Depth(t, c, q.URL); v+f != 0 {
		t.Errorf("the source queue received %d messages", v+f)
	}
	if _, err := os.Stat(audit); !os.IsNotExist(err) {
		t.Errorf("the audit log behind the link was created: %v", err)
	}
}

// A dead-letter queue whose source queue is gone is no longer named by any
// queue: refused without --force; with it, a replay leaves its messages in
// place, saying why, and --to sends them elsewhere.
func TestDlqReplaySourceQueueGone(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{},
		job{body: "one", fail: classError{"c", "boom"}, permanent: true},
		job{body: "two", fail: classError{"c", "boom"}, permanent: true})
	if _, err := c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(q.URL)}); err != nil {
		t.Fatal(err)
	}
	audit := t.TempDir() + "/audit.jsonl"
	dlqName := queueName(q.DLQURL)
	if _, stderr, code := runCLI(t, "", "dlq", "replay", dlqName); code != 1 || !strings.Contains(stderr, "no queue names it as its dead-letter queue") {
		t.Errorf("without --force: exit %d, %q", code, stderr)
	}
	for _, yes := range []string{"--yes=false", "--yes"} {
		_, stderr, code := runCLI(t, "", "dlq", "replay", dlqName, yes, "--force", "--audit", audit)
		if code != 1 || !strings.Contains(stderr, "source queue "+q.URL+" does not exist") || !strings.Contains(stderr, "give --to") {
			t.Errorf("%s: exit %d, %q", yes, code, stderr)
		}
		waitVisible(t, c, q.DLQURL, 2)
	}
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	res, _ := replayJSON(t, dlqName, "--force", "--to", other.URL, "--yes", "--audit", audit)
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

// A replay --to a queue that does not send its dead letters to the
// dead-letter queue (a slip: orders-v2 for orders) warns before the dry
// run's plan and before the replay, as the web UI does; --to the source
// queue itself does not.
func TestDlqReplayWarnsOfAForeignDestination(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{}, job{body: "x", fail: classError{"c", "boom"}, permanent: true})
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	dlqName, otherName := queueName(q.DLQURL), queueName(other.URL)
	_, stderr, code := runCLI(t, "", "dlq", "replay", dlqName, "--to", otherName)
	if code != 0 || !strings.Contains(stderr, "warning: --to "+otherName+": "+otherName+" does not send its dead letters to "+dlqName+": the messages would go to a queue they did not fail in") {
		t.Errorf("dry run --to %s: exit %d\n%s", otherName, code, stderr)
	}
	_, stderr, code = runCLI(t, "", "dlq", "replay", dlqName, "--to", queueName(q.URL))
	if code != 0 || strings.Contains(stderr, "warning: --to") {
		t.Errorf("dry run --to its source: exit %d\n%s", code, stderr)
	}
	// A redrive's move task would send every message there, from every
	// source, with no filter: it warns too, before its plan (which the
	// local SQS, lacking move tasks, then refuses). It did not warn.
	_, stderr, _ = runCLI(t, "", "dlq", "redrive", dlqName, "--to", otherName)
	if !strings.Contains(stderr, "warning: --to "+otherName+": "+otherName+" does not send its dead letters to "+dlqName) {
		t.Errorf("redrive dry run --to %s: no warning\n%s", otherName, stderr)
	}
	_, stderr, _ = runCLI(t, "", "dlq", "redrive", dlqName, "--to", queueName(q.URL))
	if strings.Contains(stderr, "warning: --to") {
		t.Errorf("redrive dry run --to its source warned\n%s", stderr)
	}
}

// When the check of --to's redrive policy fails (throttled, say), the
// command says so and goes on: the check only warns.
func TestDlqReplayGoesOnWhenTheDestinationCheckFails(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{}, job{body: "x", fail: classError{"c", "boom"}, permanent: true})
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	// Opening the dead-letter queue reads the policy first, to list its
	// sources; the check after it fails.
	var reads atomic.Int32
	failCheck := func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("failRedriveCheck",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if ga, ok := in.Parameters.(*sqs.GetQueueAttributesInput); ok && aws.ToString(ga.QueueUrl) == other.URL &&
						len(ga.AttributeNames) == 1 && ga.AttributeNames[0] == types.QueueAttributeNameRedrivePolicy && reads.Add(1) > 1 {
						return middleware.InitializeOutput{}, middleware.Metadata{}, errors.New("throttled")
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := startCLIWith(t, ctx, strings.NewReader(""), []rootOption{withSQSOptions(failCheck)},
		"dlq", "replay", queueName(q.DLQURL), "--to", queueName(other.URL))
	code := cli.wait(t)
	if stderr := cli.stderr.String(); code != 0 || !strings.Contains(stderr, "warning: --to "+queueName(other.URL)+": could not check that it sends its dead letters to "+queueName(q.DLQURL)) ||
		!strings.Contains(stderr, "throttled") {
		t.Errorf("exit %d\n%s", code, stderr)
	}
}

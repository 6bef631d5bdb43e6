package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Two copies of one job in a dead-letter queue on the emulator (a
// dead-letter send whose reply was lost, sent again by the SDK), beside
// another job alike but for its original message ID: dlq ls shows the
// second copy as a duplicate of the first, the replay's dry run says it
// would drop it, and the replay moves the job once, deletes the other
// copy, records it in the audit log and leaves the dead-letter queue
// empty.
func TestDlqDuplicateCopiesListedAndReplayedOnce(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	at := time.Now().UTC().Truncate(time.Millisecond)
	f := sqsworker.Failure{ErrorClass: "invalid-order", Error: "boom", Attempts: 2, SourceQueue: q.URL, MessageID: "orig-1", FailedAt: at}
	other := f
	other.MessageID = "orig-2"
	attrs := func() map[string]sqsworker.MessageAttribute {
		return map[string]sqsworker.MessageAttribute{"idempotency-key": {DataType: "String", StringValue: "order-1"}}
	}
	sendDeadLettered(t, c, q.DLQURL, `{"order":1}`, f, attrs())
	sendDeadLettered(t, c, q.DLQURL, `{"order":1}`, f, attrs())
	sendDeadLettered(t, c, q.DLQURL, `{"order":1}`, other, attrs())
	waitVisible(t, c, q.DLQURL, 3)
	dlqName := queueName(q.DLQURL)

	stdout, stderr, code := runCLI(t, "", "dlq", "ls", dlqName)
	if code != 0 || !strings.Contains(stdout, "DUPLICATE OF") || !strings.Contains(stderr, "1 message(s) are duplicate copies of a job listed before them") {
		t.Errorf("dlq ls: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	stdout, _, code = runCLI(t, "", "-o", "json", "dlq", "ls", dlqName)
	var listed []messageJSON
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil || code != 0 {
		t.Fatalf("dlq ls -o json: exit %d, %v\n%s", code, err, stdout)
	}
	dups := 0
	for _, m := range listed {
		if m.DuplicateOf != "" {
			dups++
			if m.OriginalMessageID != "orig-1" {
				t.Errorf("%+v marked a duplicate", m)
			}
		}
	}
	if len(listed) != 3 || dups != 1 {
		t.Errorf("dlq ls -o json: %d messages, %d duplicates; want 3 and 1", len(listed), dups)
	}

	plan, stderr := replayJSON(t, dlqName)
	if !plan.DryRun || plan.Matched != 2 || plan.Duplicates != 1 || !strings.Contains(stderr, "would drop 1 duplicate copy(ies) of replayed jobs") {
		t.Errorf("dry run: %+v\n%s", plan, stderr)
	}
	waitVisible(t, c, q.DLQURL, 3)

	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	res, stderr := replayJSON(t, dlqName, "--yes", "--audit", audit)
	if res.Moved != 2 || res.Duplicates != 1 || len(res.Dropped) != 1 || res.Dropped[0].OriginalMessageID != "orig-1" ||
		!strings.Contains(stderr, "dropped 1 duplicate copy(ies) of replayed jobs") {
		t.Errorf("replay: %+v\n%s", res, stderr)
	}
	moved := drain(t, c, q.URL, 2*time.Second)
	originals := map[string]int{}
	for _, m := range moved {
		originals[m.failure.MessageID]++
	}
	if len(moved) != 2 || originals["orig-1"] != 1 || originals["orig-2"] != 1 {
		t.Errorf("the source queue holds %d messages (originals %v), want each job once", len(moved), originals)
	}
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("the dead-letter queue holds %d messages after the replay", v+fl+d)
	}
	drops := 0
	for _, l := range readAudit(t, audit) {
		if l.Action == dlq.ActionDropDuplicate {
			drops++
			if !l.Deleted || l.OriginalMessageID != "orig-1" || l.DLQMessageID != res.Dropped[0].MessageID {
				t.Errorf("audit line %+v", l)
			}
		}
	}
	if drops != 1 {
		t.Errorf("%d audit lines of dropped duplicates, want 1", drops)
	}
}

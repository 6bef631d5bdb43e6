package ui

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/sqsworker/sqsworker/dlq"
)

// TestReadAuditPairsReplayStarts checks that the audit page leaves out the
// replay-start record of each message a replay moved or failed to copy,
// and shows the one of a replay stopped half-way (killed between its send
// and its delete).
func TestReadAuditPairsReplayStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var lines []byte
	for _, r := range []dlq.AuditRecord{
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "a"},
		{Action: dlq.ActionReplay, DLQ: "q", DLQMessageID: "a", NewMessageID: "a2", Deleted: true},
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "b"},
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "b"},
		{Action: dlq.ActionReplay, DLQ: "q", DLQMessageID: "b", NewMessageID: "b2", Deleted: true},
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "c"},
		{Action: dlq.ActionReplayFailed, DLQ: "q", DLQMessageID: "c", Note: "not copied"},
		{Action: dlq.ActionRedriveStart, DLQ: "q"},
		{Action: dlq.ActionRedrive, DLQ: "q", TaskHandle: "h"},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(path, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	recs, skipped, err := readAudit(path, 10)
	if err != nil || skipped != 0 || len(recs) != 5 {
		t.Fatalf("%v, %d skipped, %+v", err, skipped, recs)
	}
	for i, want := range []struct{ action, id string }{
		{dlq.ActionRedrive, ""}, {dlq.ActionReplayFailed, "c"}, {dlq.ActionReplay, "b"}, {dlq.ActionReplayStart, "b"}, {dlq.ActionReplay, "a"},
	} {
		if recs[i].Action != want.action || recs[i].DLQMessageID != want.id {
			t.Errorf("record %d: %+v, want %s of %s", i, recs[i], want.action, want.id)
		}
	}
}

// A duplicate a replay dropped is recorded as a replay-start before its
// delete and a drop-duplicate after (or replay-failed when the delete
// failed): the page shows the outcome only, as for a moved message.
func TestReadAuditPairsDropStarts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	var lines []byte
	for _, r := range []dlq.AuditRecord{
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "a"},
		{Action: dlq.ActionReplay, DLQ: "q", DLQMessageID: "a", NewMessageID: "a2", Deleted: true},
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "b", Note: "to be deleted"},
		{Action: dlq.ActionDropDuplicate, DLQ: "q", DLQMessageID: "b", Deleted: true},
		{Action: dlq.ActionReplayStart, DLQ: "q", DLQMessageID: "c", Note: "to be deleted"},
	} {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(append(lines, b...), '\n')
	}
	if err := os.WriteFile(path, lines, 0o600); err != nil {
		t.Fatal(err)
	}
	recs, _, err := readAudit(path, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("%v, %+v; want 3 records", err, recs)
	}
	for i, want := range []struct{ action, id string }{
		{dlq.ActionReplayStart, "c"}, {dlq.ActionDropDuplicate, "b"}, {dlq.ActionReplay, "a"},
	} {
		if recs[i].Action != want.action || recs[i].DLQMessageID != want.id {
			t.Errorf("record %d: %+v, want %s of %s", i, recs[i], want.action, want.id)
		}
	}
}

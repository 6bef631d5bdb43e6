package ui

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// TestActionsOnLocalStack goes through the actions' API as the page does,
// against the local stack: a dry run of one chosen message, its replay
// (once: the same dry run cannot be confirmed twice), a purge refused
// without the queue's name and done with it; the audit log and its
// endpoint have both.
func TestActionsOnLocalStack(t *testing.T) {
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	ids := localtest.Send(t, c, q.DLQURL, "", "dead 1", "dead 2", "dead 3")
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	auditLog, err := dlq.OpenAuditLog(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = auditLog.Close() })
	_, base := newTestServer(t, Config{
		SQS: c, Stats: statsOf(c, q), AllowActions: true, AuditFile: auditPath,
		Audit:  dlq.Audit{Record: auditLog.Record, Caller: "actions-test"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	token := csrfOf(t, base)
	hdr := map[string]string{"X-CSRF-Token": token, "Origin": base}
	dlqName := name(q.DLQURL)

	// The dry run moves nothing and says where the message would go.
	code, body := post(t, base+"/api/dlq/plan", `{"queue":"`+dlqName+`","ids":["`+ids[1]+`"],"to":"`+name(other.URL)+`"}`, hdr)
	if code != http.StatusOK {
		t.Fatalf("plan: %d %s", code, body)
	}
	var plan planResponse
	if err := json.Unmarshal([]byte(body), &plan); err != nil {
		t.Fatal(err)
	}
	if len(plan.Result.Messages) != 1 || plan.Result.Messages[0].MessageID != ids[1] || plan.Result.Messages[0].Destination != other.URL || !plan.Result.DryRun {
		t.Fatalf("plan: %s", body)
	}
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, f, _ := localtest.Depth(t, c, q.DLQURL)
		return v == 3 && f == 0
	}, "the dry run did not leave the dead-letter queue as it was")

	// The replay moves it.
	code, body = post(t, base+"/api/dlq/replay", `{"planId":"`+plan.PlanID+`"}`, hdr)
	if code != http.StatusAccepted {
		t.Fatalf("replay: %d %s", code, body)
	}
	var started struct{ JobID string }
	if err := json.Unmarshal([]byte(body), &started); err != nil {
		t.Fatal(err)
	}
	var j struct {
		Done   bool
		Error  string
		Result *dlq.ReplayResult
	}
	localtest.Eventually(t, 60*time.Second, func() bool {
		code, body := get(t, base+"/api/jobs/"+started.JobID, nil)
		if code != http.StatusOK {
			t.Fatalf("job: %d %s", code, body)
		}
		if err := json.Unmarshal([]byte(body), &j); err != nil {
			t.Fatal(err)
		}
		return j.Done
	}, "the replay did not end")
	if j.Error != "" || j.Result == nil || j.Result.Moved != 1 {
		t.Fatalf("replay: %+v", j)
	}
	got := localtest.ReceiveAll(t, c, other.URL, 2*time.Second, 60*time.Second)
	if len(got) != 1 || *got[0].Body != "dead 2" {
		t.Errorf("the other queue holds %d messages", len(got))
	}
	// A dry run is confirmed once.
	if code, body := post(t, base+"/api/dlq/replay", `{"planId":"`+plan.PlanID+`"}`, hdr); code != http.StatusBadRequest || !strings.Contains(body, "dry run") {
		t.Errorf("second confirm: %d %s", code, body)
	}

	// Purge: the queue's name, typed.
	if code, body := post(t, base+"/api/dlq/purge", `{"queue":"`+dlqName+`","confirm":"yes"}`, hdr); code != http.StatusBadRequest || !strings.Contains(body, "type the queue name") {
		t.Errorf("purge without the name: %d %s", code, body)
	}
	if v, f, _ := localtest.Depth(t, c, q.DLQURL); v+f != 2 {
		t.Errorf("after a refused purge the dead-letter queue holds %d messages, want 2", v+f)
	}
	if code, body := post(t, base+"/api/dlq/purge", `{"queue":"`+dlqName+`","confirm":"`+dlqName+`"}`, hdr); code != http.StatusOK {
		t.Fatalf("purge: %d %s", code, body)
	}
	localtest.Eventually(t, 90*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.DLQURL)
		return v+f+d == 0
	}, "the purge did not empty the dead-letter queue")

	// The audit log has the replay and the purge, newest first.
	code, body = get(t, base+"/api/audit", nil)
	var audit struct {
		File    string
		Records []dlq.AuditRecord
	}
	if err := json.Unmarshal([]byte(body), &audit); code != http.StatusOK || err != nil {
		t.Fatalf("audit: %d %v %s", code, err, body)
	}
	if audit.File != "audit.jsonl" || len(audit.Records) != 2 {
		t.Fatalf("audit: %s", body)
	}
	p, r := audit.Records[0], audit.Records[1]
	if p.Action != dlq.ActionPurge || p.DLQ != q.DLQURL || p.Caller != "actions-test" || !strings.Contains(p.CallerNote, "sqsworker ui") {
		t.Errorf("purge record %+v", p)
	}
	if r.Action != dlq.ActionReplay || r.DLQMessageID != ids[1] || r.Destination != other.URL || !r.Deleted {
		t.Errorf("replay record %+v", r)
	}
}

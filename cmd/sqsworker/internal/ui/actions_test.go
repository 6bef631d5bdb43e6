package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// TestActionsOnLocalStack goes through the actions' API as the page does,
// against the local stack: a dry run of one chosen message, its replay
// (once: the same dry run cannot be confirmed twice), a purge refused
// without the queue's name and done with it; the audit log and its
// endpoint have both.
func TestActionsOnLocalStack(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	ids := localtest.Send(t, c, q.DLQURL, "", "dead 1", "dead 2", "dead 3")
	auditPath, recorder := newAuditLog(t, "actions-test")
	_, base := newTestServer(t, Config{
		SQS: c, Stats: statsOf(c, q), AllowActions: true, AuditFile: auditPath,
		Audit:  recorder,
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

// TestTruncatedScanOnLocalStack checks the scan limit against the local
// stack: a listing of a dead-letter queue of 12 messages with ScanMax 5
// says it shows 5 of about 12 and how to see more; a replay of 2 messages
// chosen from it moves exactly those; a dry run of the whole queue stops
// at 5 and says that only those move, and its replay moves exactly them.
// The other queue receives those 7 bodies and no other, the audit log has
// the 7, and a listing with a higher max finds the 5 left.
func TestTruncatedScanOnLocalStack(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	var bodies []string
	for i := range 12 {
		bodies = append(bodies, fmt.Sprint("dead ", i))
	}
	ids := localtest.Send(t, c, q.DLQURL, "", bodies...)
	bodyOf := map[string]string{}
	for i, id := range ids {
		bodyOf[id] = bodies[i]
	}
	localtest.Eventually(t, 30*time.Second, func() bool { v, _, _ := localtest.Depth(t, c, q.DLQURL); return v == 12 }, "the dead-letter queue does not show 12 messages")
	auditPath, recorder := newAuditLog(t, "truncation-test")
	_, base := newTestServer(t, Config{
		SQS: c, Stats: statsOf(c, q), AllowActions: true, AuditFile: auditPath, ScanMax: 5,
		Audit: recorder,
	})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base), "Origin": base}
	dlqName := name(q.DLQURL)

	code, l, body := list(t, base, "queue="+dlqName)
	if code != http.StatusOK || !l.Truncated || l.Scanned != 5 || len(l.Messages) != 5 || l.Approximate != 12 ||
		!strings.Contains(l.Notice, "Shown 5 of about 12 messages in "+dlqName) || !strings.Contains(l.Notice, "sqsworker dlq ls "+dlqName+" --max N") {
		t.Fatalf("listing of 12 with ScanMax 5: %d %s", code, body)
	}
	want := map[string]bool{} // bodies that must reach the other queue
	chosen := []string{l.Messages[0].ID, l.Messages[3].ID}
	for _, id := range chosen {
		want[bodyOf[id]] = true
	}
	r := planAndReplay(t, base, hdr, `{"queue":"`+dlqName+`","ids":["`+strings.Join(chosen, `","`)+`"],"to":"`+name(other.URL)+`"}`)
	if r.job.Error != "" || r.job.Result.Moved != 2 || r.plan.Notice != "" || r.job.Notice != "" {
		t.Fatalf("replay of 2 chosen: %+v, plan notice %q", r.job, r.plan.Notice)
	}

	r = planAndReplay(t, base, hdr, `{"queue":"`+dlqName+`","to":"`+name(other.URL)+`"}`)
	if len(r.plan.Result.Messages) != 5 || !r.plan.Result.LimitHit || !strings.Contains(r.plan.Notice, "confirming moves only these 5") ||
		!strings.Contains(r.plan.Notice, "of about 10 messages in "+dlqName) {
		t.Fatalf("dry run of 10 with ScanMax 5: %d planned, limit %v, notice %q", len(r.plan.Result.Messages), r.plan.Result.LimitHit, r.plan.Notice)
	}
	if r.job.Error != "" || r.job.Result.Moved != 5 || !strings.Contains(r.job.Notice, "Only the 5 messages of the dry run were acted on") {
		t.Fatalf("replay of the truncated dry run: %+v", r.job)
	}
	for _, m := range r.plan.Result.Messages {
		want[bodyOf[m.MessageID]] = true
	}
	if len(want) != 7 {
		t.Fatalf("the two replays planned %d distinct messages, want 7", len(want))
	}

	got := localtest.ReceiveAll(t, c, other.URL, 2*time.Second, 60*time.Second)
	gotBodies := map[string]bool{}
	for _, m := range got {
		gotBodies[aws.ToString(m.Body)] = true
	}
	if len(got) != 7 || !maps.Equal(gotBodies, want) {
		t.Errorf("the other queue received %d messages %v, want exactly %v", len(got), gotBodies, want)
	}
	moved := map[string]bool{}
	for _, rec := range readAuditFile(t, auditPath) {
		if rec.Action == dlq.ActionReplay && rec.Deleted {
			moved[bodyOf[rec.DLQMessageID]] = true
		}
	}
	if !maps.Equal(moved, want) {
		t.Errorf("the audit log records %v moved, want %v", moved, want)
	}

	// The 5 left, read whole with a higher max.
	code, l, body = list(t, base, "queue="+dlqName+"&max=50")
	if code != http.StatusOK || l.Truncated || l.Notice != "" || len(l.Messages) != 5 {
		t.Fatalf("listing with max=50: %d %s", code, body)
	}
	for _, m := range l.Messages {
		if want[bodyOf[m.ID]] {
			t.Errorf("message %q listed in the dead-letter queue after its replay", bodyOf[m.ID])
		}
	}
}

// newSharingSource creates a source queue whose dead letters go to the
// dead-letter queue dlqARN too (deleted when the test ends), and returns
// its URL.
func newSharingSource(t *testing.T, c *sqs.Client, dlqARN string) string {
	t.Helper()
	n := localtest.UniqueName(t, false)
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(n), Attributes: map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, dlqARN),
	}})
	if err != nil {
		t.Fatal(err)
	}
	u := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(u)}) })
	return u
}

// sharedPurgeWarning is what the purge panel must say of dlqURL holding
// visible messages, whose dead letters come from sources.
func sharedPurgeWarning(dlqURL string, visible int, sources ...string) string {
	names := make([]string, len(sources))
	for i, u := range sources {
		names[i] = name(u)
	}
	slices.Sort(names)
	return fmt.Sprintf("Purging deletes about %d visible and 0 in-flight message(s) of %s, the dead letters of all %d of its source queues (%s), for good.",
		visible, name(dlqURL), len(names), strings.Join(names, ", "))
}

// TestPurgeNamesEverySourceOnLocalStack lists a dead-letter queue that two
// source queues share, as the page does before it shows the purge panel:
// the listing carries the panel's warning, which names both sources (all
// of them lose their dead letters) and the queue's counts. A read-only
// server, which has no purge, sends none.
func TestPurgeNamesEverySourceOnLocalStack(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	payments := newSharingSource(t, c, orders.DLQARN)
	localtest.Send(t, c, orders.DLQURL, "", "dead 1", "dead 2")
	localtest.Eventually(t, 30*time.Second, func() bool { v, _, _ := localtest.Depth(t, c, orders.DLQURL); return v == 2 },
		"the dead-letter queue does not show its 2 messages")
	_, base := newTestServer(t, Config{SQS: c, AllowActions: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	code, body := get(t, base+"/api/dlq/messages?queue="+name(orders.DLQURL), nil)
	want := sharedPurgeWarning(orders.DLQURL, 2, orders.URL, payments)
	var l struct {
		PurgeWarning string `json:"purgeWarning"`
	}
	if err := json.Unmarshal([]byte(body), &l); code != http.StatusOK || err != nil || l.PurgeWarning != want {
		t.Errorf("listing of a shared dead-letter queue: %d %v\npurge warning %q\n         want %q\n%s", code, err, l.PurgeWarning, want, body)
	}

	_, roBase := newTestServer(t, Config{SQS: c, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if code, body := get(t, roBase+"/api/dlq/messages?queue="+name(orders.DLQURL), nil); code != http.StatusOK || strings.Contains(body, "purgeWarning") {
		t.Errorf("read-only listing: %d %s", code, body)
	}
}

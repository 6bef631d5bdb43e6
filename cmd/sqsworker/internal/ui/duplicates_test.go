package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The dry run of the page finds two copies of one job (a dead-letter send
// whose reply was lost, sent again): one to move, one to drop. The replay
// it confirms does both, as dlq replay does: the job once in the source
// queue, the dead-letter queue empty. Before, the replay took only the
// messages to move, and the duplicate stayed, to be replayed again later.
func TestReplayDropsPlannedDuplicates(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src, dlqURL := fakeDLQ(t, f, 1, func(int) string { return "c" })
	fail := sqsworker.Failure{Error: "no", ErrorClass: "c", Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: "orig-dup"}
	attrs, _ := fail.AddTo(nil)
	for range 2 {
		f.Send(dlqURL, `{"job":"dup"}`, withAttributes(attrs))
	}
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}
	r := planAndReplay(t, base, hdr, `{"queue":"jobs-dlq"}`)
	if r.plan.Result.Matched != 2 || r.plan.Result.Duplicates != 1 {
		t.Fatalf("plan: %+v", r.plan.Result)
	}
	res := r.job.Result
	if r.job.Error != "" || res == nil || res.Moved != 2 || res.Duplicates != 1 {
		t.Errorf("replay: %q, %+v; want 2 moved, 1 duplicate dropped", r.job.Error, res)
	}
	if v, fl, d := f.Depth(dlqURL); v+fl+d != 0 {
		t.Errorf("the dead-letter queue holds %d message(s) after the replay, want none", v+fl+d)
	}
	if v, fl, d := f.Depth(src); v+fl+d != 2 {
		t.Errorf("the source queue holds %s, want the two jobs once each", fmt.Sprint(v+fl+d))
	}
}

// The same on the emulator, with the audit log: the duplicate's records
// (replay-start, drop-duplicate) are paired on the audit page, which shows
// the drop.
func TestReplayDropsPlannedDuplicatesOnLocalStack(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	fail := sqsworker.Failure{Error: "no", ErrorClass: "c", Attempts: 3, FailedAt: time.Now(), SourceQueue: q.URL, MessageID: "orig-dup"}
	attrs, _ := fail.AddTo(nil)
	for range 2 {
		in := &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL), MessageBody: aws.String(`{"job":"dup"}`)}
		withAttributes(attrs)(in)
		if _, err := c.SendMessage(context.Background(), in); err != nil {
			t.Fatal(err)
		}
	}
	auditPath, recorder := newAuditLog(t, "duplicates-test")
	_, base := newTestServer(t, Config{SQS: c, Stats: statsOf(c, q), AllowActions: true, AuditFile: auditPath, Audit: recorder,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base), "Origin": base}
	r := planAndReplay(t, base, hdr, `{"queue":"`+name(q.DLQURL)+`"}`)
	if r.plan.Result.Matched != 1 || r.plan.Result.Duplicates != 1 {
		t.Fatalf("plan: %+v", r.plan.Result)
	}
	if res := r.job.Result; r.job.Error != "" || res == nil || res.Moved != 1 || res.Duplicates != 1 {
		t.Errorf("replay: %q, %+v; want 1 moved, 1 duplicate dropped", r.job.Error, res)
	}
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("the dead-letter queue holds %d message(s) after the replay, want none", v+fl+d)
	}
	if v, fl, d := localtest.Depth(t, c, q.URL); v+fl+d != 1 {
		t.Errorf("the source queue holds %d message(s), want the job once", v+fl+d)
	}
	code, body := get(t, base+"/api/audit", nil)
	var page struct{ Records []dlq.AuditRecord }
	if err := json.Unmarshal([]byte(body), &page); code != http.StatusOK || err != nil {
		t.Fatalf("audit: %d %s", code, body)
	}
	var actions []string
	for _, rec := range page.Records {
		actions = append(actions, rec.Action)
	}
	if len(actions) != 2 || actions[0] != dlq.ActionDropDuplicate || actions[1] != dlq.ActionReplay {
		t.Errorf("audit page: %v; want [%s %s] (newest first, the starts paired)", actions, dlq.ActionDropDuplicate, dlq.ActionReplay)
	}
}

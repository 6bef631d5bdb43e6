package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// holdingProxy forwards SQS calls to the local endpoint, but holds every
// DeleteMessage call, never forwarding it, and closes held at the first:
// a replay through it has sent its first copy and waits on the delete of
// the original.
func holdingProxy(t *testing.T) (url string, held <-chan struct{}) {
	t.Helper()
	h := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessage" {
			once.Do(func() { close(h) })
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		resp, err := passOn(r.Context(), r, body, false)
		answer(w, resp, err)
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv.URL, h
}

// A replay killed (SIGKILL) between the send of a copy and the delete of
// its original: the audit log says which message was being moved, where
// to, although the command never learnt whether it was; before, it had no
// line at all, and the copy in the source queue was in no record. A rerun
// sends the message again, under the same idempotency key (the handler's
// idempotency middleware runs the job once), and every copy in the source
// queue has its replay-start record.
func TestDlqReplayKilledBetweenSendAndDelete(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: q.URL, MessageID: "m-1", FailedAt: time.Now().UTC()}
	sendDeadLettered(t, c, q.DLQURL, "job", f, nil)
	waitVisible(t, c, q.DLQURL, 1)
	proxy, held := holdingProxy(t)
	audit, out := killReplay(t, q.DLQURL, proxy, held, "deleted nothing")

	recs := readAudit(t, audit)
	if len(recs) != 1 || recs[0].Action != dlq.ActionReplayStart || recs[0].DLQ != q.DLQURL || recs[0].Destination != q.URL ||
		recs[0].OriginalMessageID != "m-1" || recs[0].DLQMessageID == "" {
		t.Fatalf("after the kill, the audit log holds %+v; want the replay-start of m-1 to %s\n%s", recs, queueName(q.URL), out.String())
	}

	// The original comes back after its visibility timeout; a rerun moves it.
	time.Sleep(2500 * time.Millisecond)
	if _, stderr, code := runCLI(t, "", "dlq", "replay", q.DLQURL, "--yes", "--audit", audit); code != 0 {
		t.Fatalf("rerun: exit %d\n%s", code, stderr)
	}
	copies := drain(t, c, q.URL, time.Second)
	if len(copies) != 2 {
		t.Fatalf("%d copies in the source queue, want 2 (one per run)", len(copies))
	}
	for _, m := range copies {
		msg := &sqsworker.Message{ID: m.id, Body: m.body, MessageAttributes: m.attrs}
		if k := idempotency.DefaultKey(msg); k != "message-id:m-1" {
			t.Errorf("copy %s has the idempotency key %q, want the original's", m.id, k)
		}
	}
	starts, moves := 0, 0
	for _, r := range readAudit(t, audit) {
		switch {
		case r.Action == dlq.ActionReplayStart && r.DLQMessageID == recs[0].DLQMessageID:
			starts++
		case r.Action == dlq.ActionReplay && r.DLQMessageID == recs[0].DLQMessageID && r.Deleted:
			moves++
		default:
			t.Errorf("audit record %+v", r)
		}
	}
	if starts != len(copies) || moves != 1 {
		t.Errorf("%d replay-start and %d replay record(s) for %d copies", starts, moves, len(copies))
	}
	waitVisible(t, c, q.DLQURL, 0)
}

// killReplay runs `sqsworker dlq replay dlqURL --yes` through the proxy at
// proxy, and kills it (SIGKILL) once held is closed: the proxy holds the
// request it waits for. It returns the audit log's path and the command's
// output; the test fails, saying what the replay did not do, when held is
// not closed within a minute.
func killReplay(t *testing.T, dlqURL, proxy string, held <-chan struct{}, didNot string) (audit string, out *lockedBuffer) {
	t.Helper()
	audit = filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(buildCLI(t), "dlq", "replay", dlqURL, "--yes", "--visibility", "2s", "--audit", audit)
	cmd.Env = append(cliEnv(), "AWS_ENDPOINT_URL_SQS="+proxy)
	out = &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the replay %s:\n%s", didNot, out.String())
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	return audit, out
}

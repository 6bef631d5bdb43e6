package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// refusingProxy forwards SQS calls to the local endpoint but refuses every
// DeleteMessage after the first (400, not retried).
func refusingProxy(t *testing.T) string {
	t.Helper()
	var deletes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessage" && deletes.Add(1) > 1 {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#InvalidAddress","message":"refused by the test"}`)
			return
		}
		resp, err := passOn(r.Context(), r, body, false)
		answer(w, resp, err)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// A duplicate copy whose delete SQS refuses stays in the dead-letter
// queue: the replay says so, records it (replay-failed after its
// replay-start), and exits 1, as it does for an original it could not
// delete; a later replay would send the job again. Before, it exited 0.
func TestDlqReplayDuplicateNotDeletedExits1(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: q.URL, MessageID: "m-1", FailedAt: time.Now().UTC()}
	sendDeadLettered(t, c, q.DLQURL, "job", f, nil)
	sendDeadLettered(t, c, q.DLQURL, "job", f, nil)
	waitVisible(t, c, q.DLQURL, 2)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(buildCLI(t), "dlq", "replay", q.DLQURL, "--yes", "--audit", audit)
	cmd.Env = append(cliEnv(), "AWS_ENDPOINT_URL_SQS="+refusingProxy(t))
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(out.String(), "a copy of a replayed job, not deleted") ||
		!strings.Contains(out.String(), "1 duplicate copy(ies) of replayed jobs could not be deleted") {
		t.Errorf("exit %d, want 1 naming the duplicate not deleted:\n%s", code, out.String())
	}
	var actions []string
	for _, r := range readAudit(t, audit) {
		actions = append(actions, r.Action)
	}
	if strings.Join(actions, " ") != strings.Join([]string{dlq.ActionReplayStart, dlq.ActionReplay, dlq.ActionReplayStart, dlq.ActionReplayFailed}, " ") {
		t.Errorf("audit: %v", actions)
	}
	waitVisible(t, c, q.DLQURL, 1)
}

// A replay whose delete SQS refuses (the proxy refuses every DeleteMessage
// after the first) stops after that message, rather than copying every
// other one into both queues, and prints the message's note: three jobs,
// the first moved, the second copied but not deleted, the third left in the
// dead-letter queue. Before, every message was copied, each left in both
// queues, and the notes the error pointed to were not printed.
func TestDlqReplayStopsWhenDeletesAreRefused(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	for i := range 3 {
		f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: q.URL, MessageID: fmt.Sprint("m-", i), FailedAt: time.Now().UTC()}
		sendDeadLettered(t, c, q.DLQURL, fmt.Sprint("job-", i), f, nil)
	}
	waitVisible(t, c, q.DLQURL, 3)
	cmd := exec.Command(buildCLI(t), "dlq", "replay", q.DLQURL, "--yes", "--audit", filepath.Join(t.TempDir(), "audit.jsonl"))
	cmd.Env = append(cliEnv(), "AWS_ENDPOINT_URL_SQS="+refusingProxy(t))
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	if code != 1 || !strings.Contains(out.String(), "note: message ") || !strings.Contains(out.String(), "copied, but not deleted") ||
		!strings.Contains(out.String(), "stopped after message") {
		t.Errorf("exit %d, want 1, the note printed and the replay stopped:\n%s", code, out.String())
	}
	if got := drainAtLeast(t, c, q.URL, 2); len(got) != 2 {
		t.Errorf("the source queue holds %d copies, want 2 (the first moved, the second copied)", len(got))
	}
	waitVisible(t, c, q.DLQURL, 2)
}

package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// applyingProxy forwards SQS calls to the local endpoint; the nth
// DeleteMessage it forwards too, but never answers, and closes held once
// it was applied: a replay through it is stuck after that delete landed.
func applyingProxy(t *testing.T, nth int32) (url string, held <-chan struct{}) {
	t.Helper()
	h := make(chan struct{})
	release := make(chan struct{})
	var deletes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		hold := r.Header.Get("X-Amz-Target") == "AmazonSQS.DeleteMessage" && deletes.Add(1) == nth
		resp, err := passOn(r.Context(), r, body, false)
		if err == nil && hold {
			defer resp.Body.Close()
			close(h)
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		answer(w, resp, err)
	}))
	t.Cleanup(func() { close(release); srv.Close() })
	return srv.URL, h
}

// Two copies of a job; the replay moves one (its send, its delete), then
// deletes the other, and is killed (SIGKILL) once that delete landed,
// before it heard back. The audit log says so: the kept copy's replay
// line, and a replay-start of the deleted duplicate noting that it was to
// be deleted. Before, the deleted duplicate had no line at all.
func TestDlqReplayKilledAfterDroppingDuplicate(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	f := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: q.URL, MessageID: "m-1", FailedAt: time.Now().UTC()}
	sendDeadLettered(t, c, q.DLQURL, "job", f, nil)
	sendDeadLettered(t, c, q.DLQURL, "job", f, nil)
	waitVisible(t, c, q.DLQURL, 2)
	proxy, held := applyingProxy(t, 2)
	audit, out := killReplay(t, q.DLQURL, proxy, held, "did not delete twice")

	recs := readAudit(t, audit)
	var actions []string
	for _, r := range recs {
		actions = append(actions, r.Action)
	}
	if len(recs) != 3 || recs[0].Action != dlq.ActionReplayStart || recs[1].Action != dlq.ActionReplay || !recs[1].Deleted ||
		recs[2].Action != dlq.ActionReplayStart || recs[2].DLQMessageID == recs[1].DLQMessageID || !strings.Contains(recs[2].Note, "to be deleted") {
		t.Errorf("after the kill, the audit log holds %v (%+v); want the kept copy's replay-start and replay, then the duplicate's replay-start\n%s", actions, recs, out.String())
	}
	// Both deletes landed: the job is once in the source queue, and the
	// dead-letter queue is empty.
	waitVisible(t, c, q.DLQURL, 0)
	if copies := drain(t, c, q.URL, time.Second); len(copies) != 1 {
		t.Errorf("%d copies in the source queue, want 1", len(copies))
	}
}

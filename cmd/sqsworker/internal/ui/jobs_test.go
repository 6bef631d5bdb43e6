package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// fakeDLQ makes a source queue and its dead-letter queue on f, with n
// dead-lettered jobs whose error class is class(i); it returns their URLs.
func fakeDLQ(t *testing.T, f *sqstest.Fake, n int, class func(int) string) (src, dlqURL string) {
	t.Helper()
	src = f.CreateQueue("jobs", nil)
	dlqURL = f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	for i := range n {
		fail := sqsworker.Failure{Error: "no", ErrorClass: class(i), Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: fmt.Sprint("orig-", i)}
		attrs, _ := fail.AddTo(nil)
		f.Send(dlqURL, fmt.Sprintf(`{"job":%d}`, i), withAttributes(attrs))
	}
	return src, dlqURL
}

// replayed is a replay started through the API and its status at its end.
type replayed struct {
	plan    planResponse
	started map[string]string
	job     *job
}

// planAndReplay runs a dry run of planBody, confirms it and waits for the
// replay's end.
func planAndReplay(t *testing.T, base string, hdr map[string]string, planBody string) replayed {
	t.Helper()
	r := replayed{job: &job{}}
	code, body := post(t, base+"/api/dlq/plan", planBody, hdr)
	if err := json.Unmarshal([]byte(body), &r.plan); code != http.StatusOK || err != nil {
		t.Fatalf("plan: %d %s", code, body)
	}
	code, body = post(t, base+"/api/dlq/replay", `{"planId":"`+r.plan.PlanID+`"}`, hdr)
	if err := json.Unmarshal([]byte(body), &r.started); code != http.StatusAccepted || err != nil {
		t.Fatalf("replay: %d %s", code, body)
	}
	localtest.Eventually(t, 60*time.Second, func() bool {
		code, jb := get(t, base+"/api/jobs/"+r.started["jobId"], nil)
		if code != http.StatusOK {
			t.Fatalf("job: %d %s", code, jb)
		}
		return json.Unmarshal([]byte(jb), r.job) == nil && r.job.Done
	}, "the replay did not end")
	return r
}

// TestJobsArePruned checks the bookkeeping of the replays: a finished
// replay is forgotten once it finished more than the retention time ago,
// and beyond the cap the oldest finished go first; replays under way are
// kept however old and however many.
func TestJobsArePruned(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	js := newJobs(time.Hour, 3)
	running := func(started time.Time) *job {
		return &job{ID: js.newID(), Started: started}
	}
	finished := func(at time.Time) *job {
		return &job{ID: js.newID(), Started: at.Add(-time.Minute), Done: true, Finished: at}
	}
	old := running(now.Add(-5 * time.Hour)) // under way for 5 hours
	js.add(old, now)
	var done []*job
	for i := range 5 { // finished 50, 40, ... 10 minutes ago
		j := finished(now.Add(-time.Duration(5-i) * 10 * time.Minute))
		done = append(done, j)
		js.add(j, now)
	}
	stale := finished(now.Add(-61 * time.Minute))
	js.byID[stale.ID] = stale
	var under []*job
	for range 10 {
		j := running(now)
		under = append(under, j)
		js.add(j, now)
	}
	kept := func(j *job) bool { return js.get(j.ID, now) != nil }
	// The add of each running job pruned: the 3 newest finished are kept,
	// the stale one (put in without a prune) goes at the next access.
	if kept(stale) {
		t.Error("a replay that finished 61 minutes ago is kept (retention 1h)")
	}
	for i, j := range done {
		if want := i >= 2; kept(j) != want {
			t.Errorf("finished replay %d (of 5, newest last): kept %v, want %v (cap 3)", i, kept(j), want)
		}
	}
	if !kept(old) {
		t.Error("a replay under way for 5 hours was pruned")
	}
	for _, j := range under {
		if !kept(j) {
			t.Errorf("replay %s under way was pruned", j.ID)
		}
	}
	if n := len(js.byID); n != 1+3+10 {
		t.Errorf("%d replays kept, want 14 (11 under way, 3 finished)", n)
	}

	// Past the retention time of the newest finished one, only those under
	// way are left; one that finishes then is kept until its own time.
	now = now.Add(time.Hour)
	old.Done, old.Finished = true, now
	if js.get(done[4].ID, now) != nil || js.get(old.ID, now) == nil {
		t.Error("after an hour: the finished replays should be gone, the one just finished kept")
	}
	if n := len(js.byID); n != 11 {
		t.Errorf("%d replays kept, want 11", n)
	}
	now = now.Add(time.Hour + time.Second)
	if js.get(old.ID, now) != nil {
		t.Error("a replay finished an hour and a second ago is kept")
	}
}

// TestJobIDs checks that a server recognises the job IDs it made, and only
// those: a pruned job of its own is gone, any other ID unknown.
func TestJobIDs(t *testing.T) {
	a, b := newJobs(time.Hour, 1), newJobs(time.Hour, 1)
	id := a.newID()
	if !a.made(id) {
		t.Errorf("%s not recognised by the server that made it", id)
	}
	for _, other := range []string{b.newID(), "1-0000000000000000", "", "-", "x-" + id, id + "0", strings.ToUpper(id), "../1"} {
		if a.made(other) {
			t.Errorf("%q taken for a job ID of this server", other)
		}
	}
}

// TestPrunedJobAnswersGone checks the status of replays through the API,
// on a settable clock: one finished replay is kept (MaxFinishedJobs 1), so
// the older answers 410 Gone, naming the audit log, and the newer too once
// the retention time has passed; an ID this server did not make is 404.
// The audit records of both replays are all there.
func TestPrunedJobAnswersGone(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src, _ := fakeDLQ(t, f, 3, func(int) string { return "validation" })
	var mu sync.Mutex
	var records []dlq.AuditRecord
	audit := dlq.Audit{Caller: "test", Record: func(_ context.Context, r dlq.AuditRecord) error {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
		return nil
	}}
	s := newUnserved(t, Config{SQS: f, AllowActions: true, Audit: audit, AuditFile: "audit.jsonl", JobRetention: 10 * time.Minute, MaxFinishedJobs: 1})
	clock := sqstest.NewClock(time.Now())
	s.now = clock.Now
	base := serve(t, s)
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}

	// The messages one at a time: the IDs of the listing.
	code, body := get(t, base+"/api/dlq/messages?queue=jobs-dlq", nil)
	var l listing
	if err := json.Unmarshal([]byte(body), &l); code != http.StatusOK || err != nil || len(l.Messages) != 3 {
		t.Fatalf("listing: %d %s", code, body)
	}
	first := planAndReplay(t, base, hdr, `{"queue":"jobs-dlq","ids":["`+l.Messages[0].ID+`"]}`)
	clock.Advance(time.Second)
	second := planAndReplay(t, base, hdr, `{"queue":"jobs-dlq","ids":["`+l.Messages[1].ID+`"]}`)
	if first.job.Result.Moved != 1 || second.job.Result.Moved != 1 {
		t.Fatalf("replays: %+v, %+v", first.job.Result, second.job.Result)
	}

	gone := func(id string) {
		t.Helper()
		code, body := get(t, base+"/api/jobs/"+id, nil)
		var e map[string]string
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusGone || !strings.Contains(e["error"], "replay "+id+" finished and was pruned") ||
			!strings.Contains(e["error"], "10m") || !strings.Contains(e["error"], "newest 1") || !strings.Contains(e["error"], "audit log holds the record") {
			t.Errorf("status of pruned replay %s: %d %s", id, code, body)
		}
	}
	gone(first.started["jobId"])
	if code, body := get(t, base+"/api/jobs/"+second.started["jobId"], nil); code != http.StatusOK || !strings.Contains(body, `"done":true`) {
		t.Errorf("status of the newest finished replay: %d %s", code, body)
	}
	clock.Advance(10*time.Minute + time.Second)
	gone(second.started["jobId"])
	for _, id := range []string{"1-0123456789abcdef", "nope"} {
		if code, body := get(t, base+"/api/jobs/"+id, nil); code != http.StatusNotFound || !strings.Contains(body, "no such replay") {
			t.Errorf("status of unknown replay %q: %d %s", id, code, body)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	var moves []dlq.AuditRecord
	for _, r := range records {
		if r.Action == dlq.ActionReplay {
			moves = append(moves, r)
		}
	}
	if len(records) != 4 || len(moves) != 2 || moves[0].DLQMessageID != l.Messages[0].ID || moves[1].DLQMessageID != l.Messages[1].ID {
		t.Errorf("audit records: %+v", records)
	}
	if v, _, _ := f.Depth(src); v != 2 {
		t.Errorf("source queue holds %d, want the 2 replayed", v)
	}
}

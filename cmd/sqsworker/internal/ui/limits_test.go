package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/sqstest"
)

// list reads a listing through the API.
func list(t *testing.T, base, query string) (int, listing, string) {
	t.Helper()
	code, body := get(t, base+"/api/dlq/messages?"+query, nil)
	var l listing
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &l); err != nil {
			t.Fatalf("listing: %v %s", err, body)
		}
	}
	return code, l, body
}

// TestListingSaysWhenTruncated checks that a listing of a dead-letter
// queue larger than ScanMax says that it stopped there, how much of the
// queue it shows (of its approximate count) and how to see more; that a
// request's max reads more, up to MaxScanMax, and a clear error above.
func TestListingSaysWhenTruncated(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	_, dlqURL := fakeDLQ(t, f, 12, func(i int) string {
		if i%3 == 0 {
			return "timeout"
		}
		return "validation"
	})
	_, base := newTestServer(t, Config{SQS: f, ScanMax: 5})

	code, l, body := list(t, base, "queue=jobs-dlq")
	if code != http.StatusOK || !l.Truncated || l.Scanned != 5 || len(l.Messages) != 5 || l.Max != 5 || l.MaxScanMax != MaxScanMax || l.Approximate != 12 {
		t.Fatalf("listing of 12 with ScanMax 5: %d %s", code, body)
	}
	for _, want := range []string{"Shown 5 of about 12 messages in jobs-dlq", "stopped at its limit of 5 messages read",
		fmt.Sprintf("read more at once (max, up to %d)", MaxScanMax), "sqsworker dlq ls jobs-dlq --max N"} {
		if !strings.Contains(l.Notice, want) {
			t.Errorf("notice %q lacks %q", l.Notice, want)
		}
	}

	// Filtered: what matched among those read.
	code, l, body = list(t, base, "queue=jobs-dlq&class=validation")
	if code != http.StatusOK || !l.Truncated || l.Scanned != 5 {
		t.Fatalf("filtered listing: %d %s", code, body)
	}
	if want := fmt.Sprintf("Shown %d matching the filter among the first 5 read of about 12 messages", len(l.Messages)); len(l.Messages) < 5 && !strings.Contains(l.Notice, want) {
		t.Errorf("filtered notice %q lacks %q", l.Notice, want)
	}

	// A higher max reads the whole queue: no notice.
	code, l, body = list(t, base, "queue=jobs-dlq&max=50")
	if code != http.StatusOK || l.Truncated || l.Notice != "" || l.Scanned != 12 || len(l.Messages) != 12 || l.Max != 50 {
		t.Errorf("listing with max=50: %d %s", code, body)
	}

	// Above the bound, or not a number: refused, saying the bound and the
	// way past it. The messages are not read.
	for _, max := range []string{fmt.Sprint(MaxScanMax + 1), "0", "-1", "lots"} {
		code, _, body := list(t, base, "queue=jobs-dlq&max="+max)
		if code != http.StatusBadRequest || !strings.Contains(body, fmt.Sprintf("from 1 to %d", MaxScanMax)) || !strings.Contains(body, "sqsworker dlq ls") {
			t.Errorf("max=%s: %d %s", max, code, body)
		}
	}
	if code, body := get(t, base+"/api/dlq/message?queue=jobs-dlq&id=x&max=100000", nil); code != http.StatusBadRequest {
		t.Errorf("message lookup with max=100000: %d %s", code, body)
	}
	if v, fl, _ := f.Depth(dlqURL); v != 12 || fl != 0 {
		t.Errorf("after the listings the dead-letter queue has %d visible, %d in flight", v, fl)
	}

	if _, err := New(Config{SQS: f, Stats: noStats, ScanMax: MaxScanMax + 1}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("want 1 to %d", MaxScanMax)) {
		t.Errorf("New with ScanMax above MaxScanMax: %v", err)
	}
	// At the bound the way to more is a narrower filter or the CLI.
	if n := listNotice("q", 3, MaxScanMax, -1, MaxScanMax); !strings.Contains(n, "narrow the filter") || !strings.Contains(n, "an unknown number of messages") {
		t.Errorf("notice at the bound, count unknown: %q", n)
	}
}

// TestTruncatedPlanSaysOnlyItsMessagesMove checks that a dry run that
// stops at a request's max says, before the confirm, that only its
// messages would move; that the replay says so again; and that it moved
// exactly the planned messages.
func TestTruncatedPlanSaysOnlyItsMessagesMove(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src, dlqURL := fakeDLQ(t, f, 12, func(int) string { return "validation" })
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}

	if code, body := post(t, base+"/api/dlq/plan", fmt.Sprintf(`{"queue":"jobs-dlq","max":%d}`, MaxScanMax+1), hdr); code != http.StatusBadRequest || !strings.Contains(body, fmt.Sprintf("from 1 to %d", MaxScanMax)) {
		t.Errorf("plan with max above the bound: %d %s", code, body)
	}

	r := planAndReplay(t, base, hdr, `{"queue":"jobs-dlq","max":3}`)
	p := r.plan
	if len(p.Result.Messages) != 3 || !p.Result.LimitHit || p.Max != 3 {
		t.Fatalf("dry run with max 3: %+v", p)
	}
	for _, want := range []string{"stopped at its limit of 3 messages", "of about 12 messages in jobs-dlq", "confirming moves only these 3", "sqsworker dlq replay jobs-dlq"} {
		if !strings.Contains(p.Notice, want) {
			t.Errorf("plan notice %q lacks %q", p.Notice, want)
		}
	}
	for _, notice := range []string{r.started["notice"], r.job.Notice} {
		if !strings.Contains(notice, "Only the 3 messages of the dry run were acted on") {
			t.Errorf("replay notice %q", notice)
		}
	}
	var planned, moved []string
	for _, m := range p.Result.Messages {
		planned = append(planned, m.MessageID)
	}
	for _, m := range r.job.Result.Messages {
		moved = append(moved, m.MessageID)
	}
	slices.Sort(planned)
	slices.Sort(moved)
	if !slices.Equal(planned, moved) || r.job.Result.Moved != 3 {
		t.Errorf("planned %v, moved %v", planned, moved)
	}
	if v, _, _ := f.Depth(src); v != 3 {
		t.Errorf("source queue holds %d, want 3", v)
	}
	if v, fl, _ := f.Depth(dlqURL); v+fl != 9 {
		t.Errorf("dead-letter queue holds %d, want 9", v+fl)
	}

	// A dry run that planned every match says nothing of a limit.
	r = planAndReplay(t, base, hdr, `{"queue":"jobs-dlq"}`)
	if r.plan.Notice != "" || r.job.Notice != "" || r.started["notice"] != "" || r.job.Result.Moved != 9 {
		t.Errorf("whole dry run: notice %q, job notice %q, moved %d", r.plan.Notice, r.job.Notice, r.job.Result.Moved)
	}
}

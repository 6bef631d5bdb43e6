package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Each filter, alone and together, selects exactly the expected messages,
// and a dry run moves nothing.
func TestDlqReplayFilters(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	d := startDeadLetterer(t, c, q)
	perm := func(body, tenant, class string) job {
		j := job{body: body, fail: classError{class, class + " failure"}, permanent: true}
		if tenant != "" {
			j.attrs = map[string]string{"tenant": tenant}
		}
		return j
	}
	// Two waves, dead-lettered before and after the time between.
	d.send(
		perm(`{"order":{"id":1,"customer":"c-1"},"amount":10}`, "acme", "invalid-order"),            // a1
		perm(`{"order":{"id":2,"customer":"c-2"},"amount":20.0}`, "globex", "upstream-unavailable"), // a2
		job{body: "not json: upstream timeout", attrs: map[string]string{"tenant": "acme"}, // a3, retried
			fail: classError{"upstream-unavailable", "upstream-unavailable failure"}},
	)
	d.waitDeadLettered(3)
	time.Sleep(20 * time.Millisecond)
	between := time.Now().UTC().Format(time.RFC3339Nano)
	time.Sleep(20 * time.Millisecond)
	d.send(
		perm(`{"order":{"id":3,"customer":"c-1"},"amount":30}`, "acme", "upstream-unavailable"),       // b1
		perm(`{"order":{"id":4,"customer":"c-3"},"items":[{"sku":"X-1"}]}`, "globex", "rate-limited"), // b2
		perm(`{"order":{"id":5}}`, "", "invalid-order"),                                               // b3
	)
	d.waitDeadLettered(6)
	d.stop()
	waitVisible(t, c, q.DLQURL, 6)
	name := map[string]string{} // body -> short name
	for body, label := range map[string]string{
		`{"order":{"id":1,"customer":"c-1"},"amount":10}`:             "a1",
		`{"order":{"id":2,"customer":"c-2"},"amount":20.0}`:           "a2",
		"not json: upstream timeout":                                  "a3",
		`{"order":{"id":3,"customer":"c-1"},"amount":30}`:             "b1",
		`{"order":{"id":4,"customer":"c-3"},"items":[{"sku":"X-1"}]}`: "b2",
		`{"order":{"id":5}}`:                                          "b3",
	} {
		name[body] = label
	}
	ids := map[string]string{}
	for body, id := range d.ids {
		ids[name[body]] = id
	}
	dlqName := queueName(q.DLQURL)
	all := []string{"a1", "a2", "a3", "b1", "b2", "b3"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{nil, all},
		{[]string{"--error-class", "upstream-unavailable"}, []string{"a2", "a3", "b1"}},
		{[]string{"--error-class", "upstream-unavailable", "--error-class", "rate-limited"}, []string{"a2", "a3", "b1", "b2"}},
		{[]string{"--error-class", "no-such-class"}, []string{}},
		{[]string{"--attr", "tenant=acme"}, []string{"a1", "a3", "b1"}},
		{[]string{"--attr", "tenant=acme", "--error-class", "upstream-unavailable"}, []string{"a3", "b1"}},
		{[]string{"--attr", "sqsworker.error-class=rate-limited"}, []string{"b2"}},
		{[]string{"--since", between}, []string{"b1", "b2", "b3"}},
		{[]string{"--until", between}, []string{"a1", "a2", "a3"}},
		{[]string{"--since", "1h ago"}, all},
		{[]string{"--until", "1h ago"}, []string{}},
		{[]string{"--since", "2h ago", "--until", between, "--attr", "tenant=globex"}, []string{"a2"}},
		{[]string{"--body-contains", "upstream"}, []string{"a3"}},
		{[]string{"--body-contains", `"customer":"c-`}, []string{"a1", "a2", "b1", "b2"}},
		{[]string{"--json-field", "order.customer=c-1"}, []string{"a1", "b1"}},
		{[]string{"--json-field", "order.id=4"}, []string{"b2"}},
		{[]string{"--json-field", "items.0.sku=X-1"}, []string{"b2"}},
		{[]string{"--json-field", "amount=20"}, []string{"a2"}},
		{[]string{"--json-field", "order.customer=c-1", "--since", between}, []string{"b1"}},
	} {
		args := append([]string{dlqName, "--visibility", "2s"}, tc.args...)
		res, stderr := replayJSON(t, args...)
		want := make([]string, len(tc.want))
		for i, n := range tc.want {
			want[i] = ids[n]
		}
		var got []string
		for _, m := range res.Messages {
			got = append(got, m.OriginalMessageID)
			if m.Destination != q.URL || m.NewMessageID != "" || m.Replays != 1 {
				t.Errorf("%v: %+v", tc.args, m)
			}
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%v selects %v, want %v", tc.args, labels(got, ids), tc.want)
		}
		// A receive whose response breaks on the way (the SDK then warns
		// "failed to discard remaining HTTP response body ... use of closed
		// network connection") hid the messages SQS handed it: the read
		// waits for them, and still sees all 6.
		if !res.DryRun || res.Moved != 0 || res.Matched != len(tc.want) || res.Scanned != 6 ||
			res.Coverage.Seen != 6 || res.Coverage.Approximate != 6 || !res.Coverage.Complete || strings.Contains(stderr, "saw ") ||
			!strings.Contains(stderr, "dry run: nothing moved, use --yes") {
			t.Errorf("%v: %+v, stderr %q", tc.args, res, stderr)
		}
		if res.Coverage.LostReceives > 0 {
			t.Logf("%v: %d receive(s) lost their response, and the read waited for their messages", tc.args, res.Coverage.LostReceives)
		}
		// A filter that matches nothing says what it left out.
		const hint = "the 6 it left out, by error class: upstream-unavailable 3, invalid-order 2, rate-limited 1 (--error-class and --attr match exactly)"
		if got := strings.Contains(stderr, "no message matched the filter") && strings.Contains(stderr, hint); got != (len(tc.want) == 0) {
			t.Errorf("%v: the no-match hint %v, want %v; stderr %q", tc.args, got, len(tc.want) == 0, stderr)
		}
		// Nothing moved, nothing left invisible.
		if v, f, _ := localtest.Depth(t, c, q.DLQURL); v != 6 || f != 0 {
			t.Fatalf("%v: dead-letter queue holds %d visible, %d in flight after a dry run", tc.args, v, f)
		}
	}
	// --limit stops at N matching messages.
	res, stderr := replayJSON(t, dlqName, "--error-class", "upstream-unavailable", "--limit", "2")
	if len(res.Messages) != 2 || !res.LimitHit || !strings.Contains(stderr, "stopped at --limit 2") || !strings.Contains(res.Filter, "(limit 2)") {
		t.Errorf("--limit 2: %+v, %q", res, stderr)
	}
	for _, m := range res.Messages {
		if n := labels([]string{m.OriginalMessageID}, ids)[0]; n != "a2" && n != "a3" && n != "b1" {
			t.Errorf("--limit 2 selected %s", n)
		}
	}
	// The table form of a dry run.
	stdout, _, code := runCLI(t, "", "dlq", "replay", dlqName, "--json-field", "order.id=4")
	if code != 0 || !strings.Contains(stdout, "DESTINATION") || !strings.Contains(stdout, ids["b2"]) || !strings.Contains(stdout, queueName(q.URL)) {
		t.Errorf("dry run table: exit %d\n%s", code, stdout)
	}
	if v, f, _ := localtest.Depth(t, c, q.URL); v+f != 0 {
		t.Errorf("a dry run sent %d messages to the source queue", v+f)
	}
	waitVisible(t, c, q.DLQURL, 6)
}

func labels(ids []string, byName map[string]string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "?" + id
		for n, v := range byName {
			if v == id {
				out[i] = n
			}
		}
	}
	return out
}

// A replay moves exactly the selected messages back to their source queue:
// body and attributes kept, failure metadata kept as history,
// sqsworker.replays = 1, one audit line each; the others stay.
func TestDlqReplayMovesCopies(t *testing.T) {
	t.Parallel()
	var jobs []job
	for i := range 5 {
		class := "upstream-unavailable"
		if i%2 == 1 {
			class = "invalid-order"
		}
		jobs = append(jobs, job{
			body:  fmt.Sprintf(`{"job":%d}`, i),
			attrs: map[string]string{"job-id": fmt.Sprintf("job-%d", i), "idempotency-key": fmt.Sprintf("key-%d", i)},
			fail:  classError{class, "failed: " + class}, permanent: true,
		})
	}
	c, q, ids := newDLQ(t, localtest.QueueOptions{}, jobs...)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	res, stderr := replayJSON(t, queueName(q.DLQURL), "--error-class", "upstream-unavailable", "--yes", "--audit", audit)
	if res.DryRun || res.Moved != 3 || res.Matched != 3 || res.Scanned != 5 || len(res.Messages) != 3 ||
		!strings.Contains(stderr, "moved 3 message(s)") || !strings.Contains(stderr, "audit log: "+audit) ||
		!strings.Contains(stderr, `warning: the audit log records the caller as "unknown": sts:GetCallerIdentity failed: no STS in the local stack`) {
		t.Fatalf("replay: %+v\n%s", res, stderr)
	}
	copies := drain(t, c, q.URL, 2*time.Second)
	if got := bodies(copies); strings.Join(got, " ") != `{"job":0} {"job":2} {"job":4}` {
		t.Fatalf("source queue holds %v", got)
	}
	newIDs := map[string]bool{}
	for _, m := range copies {
		newIDs[m.id] = true
		var n int
		fmt.Sscanf(m.body, `{"job":%d}`, &n)
		f := m.failure
		if f.ErrorClass != "upstream-unavailable" || f.Error != "permanent: failed: upstream-unavailable" || f.Attempts != 1 ||
			f.SourceQueue != q.URL || f.MessageID != ids[m.body] || f.Host != "test-host" || f.FailedAt.IsZero() {
			t.Errorf("%s: failure metadata %+v", m.body, f)
		}
		if a := m.attrs[dlq.AttrReplays]; a.DataType != "Number" || a.StringValue != "1" {
			t.Errorf("%s: %s = %+v", m.body, dlq.AttrReplays, a)
		}
		if m.attrs["job-id"].StringValue != fmt.Sprintf("job-%d", n) || m.attrs["idempotency-key"].StringValue != fmt.Sprintf("key-%d", n) {
			t.Errorf("%s: attributes %v", m.body, m.attrs)
		}
		// 2 of its own and 8 of failure metadata left no room for the
		// count: the metadata is kept as one JSON attribute.
		if _, ok := m.attrs[sqsworker.AttrFailure]; !ok || len(m.attrs) != 4 {
			t.Errorf("%s: attributes %v, want job-id, idempotency-key, %s, %s", m.body, m.attrs, sqsworker.AttrFailure, dlq.AttrReplays)
		}
	}
	rest := drain(t, c, q.DLQURL, time.Second)
	if got := bodies(rest); strings.Join(got, " ") != `{"job":1} {"job":3}` {
		t.Errorf("dead-letter queue holds %v", got)
	}
	lines := readMoves(t, audit)
	if len(lines) != 3 {
		t.Fatalf("%d audit lines, want 3", len(lines))
	}
	for _, l := range lines {
		if l.Action != dlq.ActionReplay || l.Caller != dlq.UnknownCaller || l.CallerNote != "sts:GetCallerIdentity failed: no STS in the local stack" ||
			l.DLQ != q.DLQURL || l.Destination != q.URL || !newIDs[l.NewMessageID] || l.DLQMessageID == "" || l.Replays != 1 ||
			!l.Deleted || l.Filter != `error-class="upstream-unavailable"` || time.Since(l.Time) > time.Minute ||
			l.Note != "failure metadata kept as the one attribute sqsworker.failure, to make room for sqsworker.replays" {
			t.Errorf("audit line %+v", l)
		}
		found := false
		for _, id := range ids {
			found = found || id == l.OriginalMessageID
		}
		if !found {
			t.Errorf("audit line names original %s, not one sent", l.OriginalMessageID)
		}
	}
}

// readMoves returns the replay records of an audit log, after checking
// that each, and each replay-failed record, follows its replay-start
// record, and that every other record is a replay-start.
func readMoves(t *testing.T, path string) []auditRecord {
	t.Helper()
	var moves []auditRecord
	started := map[string]bool{}
	for _, r := range readAudit(t, path) {
		switch r.Action {
		case dlq.ActionReplayStart:
			started[r.DLQMessageID] = true
		case dlq.ActionReplayFailed:
			if !started[r.DLQMessageID] {
				t.Errorf("audit: replay-failed record without its replay-start: %+v", r)
			}
			delete(started, r.DLQMessageID)
		case dlq.ActionReplay:
			if !started[r.DLQMessageID] {
				t.Errorf("audit: replay record without its replay-start: %+v", r)
			}
			delete(started, r.DLQMessageID)
			moves = append(moves, r)
		default:
			t.Errorf("audit: record %+v", r)
		}
	}
	return moves
}

func readAudit(t *testing.T, path string) []auditRecord {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r auditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// A message replayed, failed again and replayed again counts 2 replays; a
// message with SQS's maximum of 10 attributes is replayed without the count,
// and the audit line says so.
func TestDlqReplayCountsReplays(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	d := startDeadLetterer(t, c, q) // keeps failing the replayed copies
	crowded := map[string]string{}
	for i := range 9 {
		crowded[fmt.Sprintf("a%d", i)] = "v"
	}
	d.send(
		job{body: "counted", attrs: map[string]string{"idempotency-key": "k-1"}, fail: classError{"c", "boom"}, permanent: true},
		job{body: "crowded", attrs: crowded, fail: classError{"c", "boom"}, permanent: true},
	)
	d.waitDeadLettered(2)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	dlqName := queueName(q.DLQURL)
	listReplays := func() map[string]messageJSON {
		t.Helper()
		stdout, stderr, code := runCLI(t, "", "-o", "json", "dlq", "ls", dlqName, "--body")
		var ms []messageJSON
		if code != 0 || json.Unmarshal([]byte(stdout), &ms) != nil {
			t.Fatalf("ls: exit %d, %s", code, stderr)
		}
		out := map[string]messageJSON{}
		for _, m := range ms {
			out[*m.Body] = m
		}
		return out
	}
	for round := 1; round <= 2; round++ {
		res, _ := replayJSON(t, dlqName, "--yes", "--audit", audit)
		if res.Moved != 2 {
			t.Fatalf("round %d: moved %d", round, res.Moved)
		}
		d.waitDeadLettered(2 + 2*round)
		waitVisible(t, c, q.DLQURL, 2)
		ms := listReplays()
		if m := ms["counted"]; m.Replays != round || m.Attributes[dlq.AttrReplays].Value != fmt.Sprint(round) ||
			m.Attributes["idempotency-key"].Value != "k-1" || m.Failure == nil || m.Failure.SourceQueue != q.URL {
			t.Errorf("round %d: counted = %+v", round, m)
		}
		if m := ms["crowded"]; m.Replays != 0 || len(m.Attributes) != 9 || m.Failure == nil {
			t.Errorf("round %d: crowded = %+v", round, m)
		}
	}
	d.stop()
	lines := readMoves(t, audit)
	if len(lines) != 4 {
		t.Fatalf("%d audit lines", len(lines))
	}
	for _, l := range lines {
		crowdedLine := strings.Contains(l.Note, "sqsworker.replays not added: the message already has SQS's maximum of 10 attributes")
		if crowdedLine == (l.Replays != 0) {
			t.Errorf("audit line %+v", l)
		}
	}
}

// A FIFO dead-letter queue is replayed group by group, in order; a group
// stops at its first message that stays, so that its order is kept.
func TestDlqReplayFIFOKeepsGroupOrder(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{FIFO: true})
	d := startDeadLetterer(t, c, q)
	var jobs []job
	for g, n := range map[string]int{"g1": 6, "g2": 4} {
		for i := range n {
			jobs = append(jobs, job{body: fmt.Sprintf("%s-%d", g, i), group: g, fail: classError{"invalid-order", "bad"}, permanent: true})
		}
	}
	// g3's first message fails otherwise: its second must not overtake it.
	jobs = append(jobs,
		job{body: "g3-0", group: "g3", fail: classError{"other", "bad"}, permanent: true},
		job{body: "g3-1", group: "g3", fail: classError{"invalid-order", "bad"}, permanent: true})
	slices.SortFunc(jobs, func(a, b job) int { return strings.Compare(a.body, b.body) }) // send each group in order
	d.send(jobs...)
	d.waitDeadLettered(len(jobs))
	d.stop()
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	res, _ := replayJSON(t, queueName(q.DLQURL), "--error-class", "invalid-order", "--yes", "--audit", audit)
	if res.Moved != 10 {
		t.Errorf("moved %d, want 10: %+v", res.Moved, res)
	}
	got := map[string][]string{}
	for _, m := range drain(t, c, q.URL, 2*time.Second) {
		got[m.group] = append(got[m.group], m.body)
		if m.attrs[dlq.AttrReplays].StringValue != "1" || m.failure.ErrorClass != "invalid-order" {
			t.Errorf("%s: attributes %v", m.body, m.attrs)
		}
	}
	want := map[string][]string{
		"g1": {"g1-0", "g1-1", "g1-2", "g1-3", "g1-4", "g1-5"},
		"g2": {"g2-0", "g2-1", "g2-2", "g2-3"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("source queue, by group in order:\n got %v\nwant %v", got, want)
	}
	if rest := drain(t, c, q.DLQURL, time.Second); fmt.Sprint(bodies(rest)) != "[g3-0 g3-1]" {
		t.Errorf("dead-letter queue holds %v, want g3-0 g3-1", bodies(rest))
	}
}

// cliEnv is the environment of the command run by buildCLI: the test's,
// with an STS endpoint that refuses connections at once (the local stack
// has none).
func cliEnv() []string {
	return append(os.Environ(), "AWS_ENDPOINT_URL_STS=http://127.0.0.1:1", runMainEnv+"=1")
}

// waitMoved waits until a replay running in the background has moved a
// message: its first replay record (not a replay-start).
func waitMoved(t *testing.T, audit string, out *lockedBuffer) {
	t.Helper()
	localtest.Eventually(t, 60*time.Second, func() bool {
		b, _ := os.ReadFile(audit)
		return strings.Contains(string(b), `"action":"replay",`)
	}, "the replay moved nothing:\n%s", out.String())
}

// buildCLI returns the command to run the command line in a process of its
// own: this test binary, which runs main instead of the tests when
// runMainEnv is set (see init). It is the code under test, compiled once,
// whatever else changes in the working tree meanwhile.
func buildCLI(t *testing.T) string {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// runMainEnv makes the test binary run the command line's main.
const runMainEnv = "SQSWORKER_TEST_RUN_MAIN"

func init() {
	if os.Getenv(runMainEnv) == "1" {
		os.Args = append([]string{"sqsworker"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
}

// originals returns the original message IDs of messages from their failure
// metadata, counted.
func originals(t *testing.T, ms []receivedMsg) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, m := range ms {
		if m.failure.MessageID == "" {
			t.Errorf("message %s has no failure metadata", m.id)
		}
		out[m.failure.MessageID]++
	}
	return out
}

// A replay killed half-way (SIGKILL) loses no message: each is still in the
// dead-letter queue or copied to the source queue, at worst both.
func TestDlqReplayKilledLosesNothing(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	var jobs []job
	for i := range 30 {
		jobs = append(jobs, job{body: fmt.Sprintf("job-%02d", i), fail: classError{"c", "boom"}, permanent: true})
	}
	c, q, ids := newDLQ(t, localtest.QueueOptions{}, jobs...)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(bin, "dlq", "replay", q.DLQURL, "--yes", "--rate", "5", "--visibility", "2s", "--audit", audit)
	cmd.Env = cliEnv()
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMoved(t, audit, &out)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The messages the replay held come back after their visibility
	// timeout, 2s (the emulator counts them in flight until a receive
	// looks at the queue).
	time.Sleep(2500 * time.Millisecond)
	inDLQ := originals(t, drain(t, c, q.DLQURL, 2*time.Second))
	copied := originals(t, drain(t, c, q.URL, 2*time.Second))
	dups := 0
	for _, id := range ids {
		switch {
		case inDLQ[id] == 0 && copied[id] == 0:
			t.Errorf("message %s is lost", id)
		case inDLQ[id] > 0 && copied[id] > 0:
			dups++
		}
		if inDLQ[id] > 1 || copied[id] > 1 {
			t.Errorf("message %s: %d in the DLQ, %d copies", id, inDLQ[id], copied[id])
		}
	}
	// Every copy has its replay-start record, even one whose replay was
	// killed before its delete.
	recs := readAudit(t, audit)
	started := map[string]bool{}
	for _, r := range recs {
		if r.Action == dlq.ActionReplayStart {
			started[r.OriginalMessageID] = true
		}
	}
	for id := range copied {
		if !started[id] {
			t.Errorf("message %s was copied, and the audit log does not say so", id)
		}
	}
	t.Logf("killed after 1s: %d copied, %d still in the DLQ, %d in both (duplicates); %d audit lines",
		len(copied), len(inDLQ), dups, len(recs))
	if len(copied) == 0 || len(copied) == len(ids) {
		t.Errorf("%d of %d copied: the replay was not killed half-way\n%s", len(copied), len(ids), out.String())
	}
}

// An interrupt (SIGINT) stops the replay between two messages: the held
// messages are released at once, nothing is lost or duplicated, every move
// is in the audit log; the exit code is 130.
func TestDlqReplayInterruptStopsCleanly(t *testing.T) {
	t.Parallel()
	bin := buildCLI(t)
	var jobs []job
	for i := range 20 {
		jobs = append(jobs, job{body: fmt.Sprintf("job-%02d", i), fail: classError{"c", "boom"}, permanent: true})
	}
	c, q, ids := newDLQ(t, localtest.QueueOptions{}, jobs...)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	cmd := exec.Command(bin, "dlq", "replay", queueName(q.DLQURL), "--yes", "--rate", "4", "--visibility", "2s", "--audit", audit)
	cmd.Env = cliEnv()
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitMoved(t, audit, &stderr)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 || !strings.Contains(stderr.String(), "interrupted: ") {
		t.Fatalf("exit %d (%v)\nstdout: %s\nstderr: %s", code, err, stdout.String(), stderr.String())
	}
	// Released at once: no message of the DLQ is left in flight, but those
	// that a receive whose response was lost hid (the read says so): they
	// come back after the visibility timeout.
	if strings.Contains(stderr.String(), "receive(s) lost their response") {
		t.Logf("a receive lost its response:\n%s", stderr.String())
		time.Sleep(2500 * time.Millisecond) // the emulator counts them in flight until a receive looks
	} else if v, f, _ := localtest.Depth(t, c, q.DLQURL); f != 0 || v == 0 {
		t.Errorf("dead-letter queue: %d visible, %d in flight after the interrupt\n%s", v, f, stderr.String())
	}
	inDLQ := originals(t, drain(t, c, q.DLQURL, time.Second))
	copied := originals(t, drain(t, c, q.URL, time.Second))
	for _, id := range ids {
		if inDLQ[id]+copied[id] != 1 {
			t.Errorf("message %s: %d in the DLQ, %d copies", id, inDLQ[id], copied[id])
		}
	}
	if n := len(readMoves(t, audit)); n != len(copied) || n == 0 || n == len(ids) {
		t.Errorf("%d audit lines, %d copies, of %d", n, len(copied), len(ids))
	}
	if !strings.Contains(stderr.String(), fmt.Sprintf("interrupted: %d message(s) moved", len(copied))) {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// A dry run gives the times it read its filter with, to pass with --yes:
// the replay reads the queue again, and "2h ago" and now again, so that
// jobs failing meanwhile (an outage under way) would match and move,
// unseen. Times given as RFC 3339 need nothing. Without a time bound or an
// error class, it suggests no --until, which would leave out the messages
// with no failure time (those SQS moved): it says why. Before, it told the
// operator to add one, and the replay left those messages behind.
func TestDlqReplayDryRunGivesItsTimes(t *testing.T) {
	t.Parallel()
	_, q, _ := newDLQ(t, localtest.QueueOptions{})
	name := queueName(q.DLQURL)
	rfc := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z` // to the nanosecond the filter read
	for _, tc := range []struct {
		args []string
		want string // a regular expression; "" for no such line
	}{
		{nil, `messages that fail from now on match too \(--until would leave out those with no failure time`},
		{[]string{"--error-class", "c"}, `give the times of this dry run: --until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z\n`}, // now, to the nanosecond
		{[]string{"--since", "2h ago"}, `give the times of this dry run: --since ` + rfc + ` --until ` + rfc + `\n`},
		{[]string{"--since", "2h ago", "--until", "2030-01-01T00:00:00Z"}, `give the times of this dry run: --since ` + rfc + `\n`},
		{[]string{"--since", "2020-01-01T00:00:00Z", "--until", "2030-01-01T00:00:00Z"}, ""},
	} {
		_, stderr, code := runCLI(t, "", append([]string{"dlq", "replay", name, "--to", queueName(q.URL)}, tc.args...)...)
		matched := regexp.MustCompile(tc.want).MatchString(stderr)
		if code != 0 || (tc.want != "" && !matched) || (tc.want == "" && strings.Contains(stderr, "give the times")) {
			t.Errorf("%v: exit %d; stderr:\n%s", tc.args, code, stderr)
		}
	}
}

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/schedule"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// receiveBodies receives from a queue until it has n messages (without
// deleting them), then for a second more, and returns them by body.
func receiveBodies(t *testing.T, c *sqs.Client, url string, n int) map[string]types.Message {
	t.Helper()
	got := map[string]types.Message{}
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages from %s", len(got), n, url)
		}
		for _, m := range localtest.ReceiveAll(t, c, url, time.Second, 5*time.Minute) {
			got[aws.ToString(m.Body)] = m
		}
	}
	for _, m := range localtest.ReceiveAll(t, c, url, time.Second, 5*time.Minute) {
		got[aws.ToString(m.Body)] = m
	}
	if len(got) != n {
		t.Errorf("received %d messages, want %d", len(got), n)
	}
	return got
}

func attr(m types.Message, name string) string {
	a, ok := m.MessageAttributes[name]
	if !ok {
		return "<none>"
	}
	if a.BinaryValue != nil {
		return aws.ToString(a.DataType) + ":" + fmt.Sprint(a.BinaryValue)
	}
	return aws.ToString(a.DataType) + ":" + aws.ToString(a.StringValue)
}

func TestSendBodies(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	name := q.URL[strings.LastIndexByte(q.URL, '/')+1:]

	stdout, stderr, code := runCLI(t, "", "send", name, "first", "second", "--attr", "tenant=acme", "--attr", "kind=test")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if stdout != "sent 2\n" {
		t.Errorf("output %q, want a summary", stdout)
	}
	stdout, stderr, code = runCLI(t, "", "send", name, "-o", "table", "fourth")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "INDEX") || !strings.Contains(lines[0], "MESSAGE ID") {
		t.Errorf("output:\n%s", stdout)
	}
	if stdout, stderr, code = runCLI(t, "", "send", name, "--quiet", "fifth"); code != 0 || stdout != "" || stderr != "" {
		t.Errorf("--quiet: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	stdout, stderr, code = runCLI(t, "", "send", q.URL, "-o", "json", "third", "--idempotency-key", "k-3")
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	var res []sendResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	if len(res) != 1 || res[0].Index != 1 || res[0].MessageID == "" || res[0].Error != "" {
		t.Errorf("results %+v", res)
	}

	got := receiveBodies(t, c, q.URL, 5)
	for _, body := range []string{"first", "second"} {
		m := got[body]
		if a, k := attr(m, "tenant"), attr(m, "kind"); a != "String:acme" || k != "String:test" {
			t.Errorf("%s: attributes tenant=%s kind=%s", body, a, k)
		}
	}
	if m := got["third"]; aws.ToString(m.MessageId) != res[0].MessageID || attr(m, "idempotency-key") != "String:k-3" {
		t.Errorf("third: ID %s (printed %s), idempotency-key %s", aws.ToString(m.MessageId), res[0].MessageID, attr(m, "idempotency-key"))
	}
}

// Lines take the flags as defaults, and each invalid line is reported, not
// sent, while the valid ones are.
func TestSendLines(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	big := strings.Repeat("x", 1<<20+1)
	stdin := strings.Join([]string{
		`{"body": "plain"}`,
		`{"body": "rich", "idempotencyKey": "key-1", "attributes": {"tenant": "globex", "priority": {"dataType": "Number", "stringValue": "3"}, "n": 7, "blob": {"dataType": "Binary", "binaryValue": "AAEC"}}}`,
		``,
		`{"body": "broken"`,
		`{"body": "` + big + `"}`,
		`{"body": "bad number", "attributes": {"priority": {"dataType": "Number", "stringValue": "three"}}}`,
		`{"bdy": "typo"}`,
		`{"body": "bad name", "attributes": {"a b": "v"}}`,
		`["not", "an", "object"]`,
		`{"body": "delayed", "delaySeconds": 1}`,
		`{"body": "too late", "delaySeconds": 31536001}`,
		`{"body": "empty attribute", "attributes": {"e": ""}}`,
		`{"body": "binary as string", "attributes": {"b": {"dataType": "Binary", "stringValue": "x"}}}`,
		`{"body": "a day late", "delaySeconds": 86400}`, // held back by the runtimes, as with --delay
	}, "\n")
	stdout, stderr, code := runCLI(t, stdin, "send", q.URL, "-o", "json", "--attr", "source=cli", "--attr", "tenant=acme")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	var res []sendResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, stdout)
	}
	wantErr := map[int]string{ // line -> part of its error
		4:  "invalid JSON",
		5:  "over SQS's limit of 1048576",
		6:  `attribute "priority" of type Number has the value "three"`,
		7:  `unknown field "bdy"`,
		8:  `attribute name "a b" has characters`,
		9:  "not a JSON object",
		11: "delaySeconds 31536001 is not in 0..31536000 (365 days)",
		12: `attribute "e" has an empty value`,
		13: `attribute "b": a Binary attribute takes a "binaryValue"`,
	}
	var lines []int
	for _, r := range res {
		lines = append(lines, r.Index)
		want, bad := wantErr[r.Index]
		switch {
		case bad && !strings.Contains(r.Error, want):
			t.Errorf("line %d: error %q, want one with %q", r.Index, r.Error, want)
		case bad && r.MessageID != "":
			t.Errorf("line %d was sent", r.Index)
		case !bad && (r.Error != "" || r.MessageID == ""):
			t.Errorf("line %d: %+v", r.Index, r)
		}
		if bad && !strings.Contains(stderr, fmt.Sprintf("line %d: ", r.Index)) {
			t.Errorf("stderr does not name line %d:\n%s", r.Index, stderr)
		}
	}
	if want := []int{1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}; !slices.Equal(lines, want) {
		t.Errorf("results for lines %v, want %v", lines, want)
	}
	if !strings.Contains(stderr, "9 of 13 messages not sent") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if strings.Contains(stderr, big[:100]) {
		t.Error("stderr holds the body of the big message")
	}

	got := receiveBodies(t, c, q.URL, 3)
	if m := got["plain"]; attr(m, "source") != "String:cli" || attr(m, "tenant") != "String:acme" {
		t.Errorf("plain: source=%s tenant=%s", attr(m, "source"), attr(m, "tenant"))
	}
	m := got["rich"]
	for name, want := range map[string]string{
		"source": "String:cli", "tenant": "String:globex", "priority": "Number:3", "n": "Number:7",
		"blob": "Binary:[0 1 2]", "idempotency-key": "String:key-1",
	} {
		if a := attr(m, name); a != want {
			t.Errorf("rich: attribute %s = %s, want %s", name, a, want)
		}
	}
	if _, ok := got["delayed"]; !ok {
		t.Error("the delayed message did not arrive")
	}
}

// A table with only failures is deterministic.
func TestSendInvalidLinesTable(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	stdin := "{\"body\": \"\"}\nnot json\n{\"body\": \"x\", \"delaySeconds\": -1}\n"
	stdout, stderr, code := runCLI(t, stdin, "send", q.URL, "-o", "table")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	golden(t, "send_invalid.golden", stdout)
	golden(t, "send_invalid_stderr.golden", stderr)
	if v, f, d := localtest.Depth(t, c, q.URL); v+f+d != 0 {
		t.Errorf("%d messages in the queue, want none", v+f+d)
	}
}

func TestSendFIFO(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true})

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"body"}, "is a FIFO queue: --group is required"},
		{[]string{"body", "--group", "g"}, "without content-based deduplication: --dedup-id is required"},
		{[]string{"body", "--group", "g", "--dedup-id", "d", "--delay", "5s"}, "takes no per-message --delay"},
		{[]string{"a", "b", "--group", "g", "--dedup-id", "d"}, "--dedup-id with 2 BODY arguments"},
	} {
		_, stderr, code := runCLI(t, "", append([]string{"send", q.URL}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("send %v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
	if v, f, d := localtest.Depth(t, c, q.URL); v+f+d != 0 {
		t.Fatalf("%d messages in the queue after refused sends", v+f+d)
	}

	stdin := `{"body": "no group", "deduplicationId": "d0"}
{"body": "one", "groupId": "g1", "deduplicationId": "d1"}
{"body": "two", "deduplicationId": "d2"}
{"body": "no dedup", "groupId": "g1"}
`
	_, stderr, code := runCLI(t, stdin, "send", q.URL, "-o", "json")
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	for _, want := range []string{
		`line 1: a FIFO queue needs a message group ID; set "groupId" or --group`,
		`line 4: the queue has no content-based deduplication: set "deduplicationId" on each line`,
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, "line 2") {
		t.Errorf("line 2 failed:\n%s", stderr)
	}
	_, stderr, code = runCLI(t, "", "send", q.URL, "three", "--group", "g2", "--dedup-id", "d3")
	if code != 0 {
		t.Errorf("exit %d: %s", code, stderr)
	}

	// One message per group at a time: receive each group's first.
	got := receiveBodies(t, c, q.URL, 2)
	if m, ok := got["one"]; !ok || m.Attributes["MessageGroupId"] != "g1" || m.Attributes["MessageDeduplicationId"] != "d1" {
		t.Errorf("one: %v", m.Attributes)
	}
	if m, ok := got["three"]; !ok || m.Attributes["MessageGroupId"] != "g2" {
		t.Errorf("three: %v", m.Attributes)
	}
}

// --group applies to the lines that have none.
func TestSendFIFOGroupFlagAsDefault(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, ContentDedup: true})
	stdin := "{\"body\": \"a\"}\n{\"body\": \"b\", \"groupId\": \"other\"}\n"
	_, stderr, code := runCLI(t, stdin, "send", q.URL, "--group", "default")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	got := receiveBodies(t, c, q.URL, 2)
	if g := got["a"].Attributes["MessageGroupId"]; g != "default" {
		t.Errorf("a in group %q", g)
	}
	if g := got["b"].Attributes["MessageGroupId"]; g != "other" {
		t.Errorf("b in group %q", g)
	}
}

// On the local SQS: --dedup-id and --idempotency-key name one message.
// Lines on stdin that would all take them fail but the first, saying so,
// rather than be sent under one deduplication ID (a FIFO queue keeps the
// first, and answers the others with its ID: lost, exit 0) or one key (the
// idempotency middleware runs the first only). A line with its own goes
// (on a FIFO queue, held behind the refused line of its group).
func TestSendFlagIDsNameOneLine(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	fifo := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true})
	stdin := "{\"body\": \"a\"}\n{\"body\": \"b\"}\n{\"body\": \"c\", \"deduplicationId\": \"own\"}\n"
	_, stderr, code := runCLI(t, stdin, "send", fifo.URL, "--group", "g", "--dedup-id", "d1")
	if code != 1 || !strings.Contains(stderr, `line 2: --dedup-id gives it the deduplication ID of line 1: a FIFO queue would keep only the first; set "deduplicationId" on each line`) {
		t.Errorf("FIFO: exit %d, want 1 and line 2 refused; stderr:\n%s", code, stderr)
	}
	// Line 3, of the same group, is held behind line 2, to keep the
	// group's order.
	if v, f, d := localtest.Depth(t, c, fifo.URL); v+f+d != 1 || !strings.Contains(stderr, `line 3: not sent: line 2 of its group "g" was not sent before it`) {
		t.Errorf("FIFO: %d messages, want a alone, c held; stderr:\n%s", v+f+d, stderr)
	}
	std := localtest.NewQueue(t, c, localtest.QueueOptions{})
	stdin = "{\"body\": \"a\"}\n{\"body\": \"b\"}\n{\"body\": \"c\", \"idempotencyKey\": \"own\"}\n"
	_, stderr, code = runCLI(t, stdin, "send", std.URL, "--idempotency-key", "k1")
	if code != 1 || !strings.Contains(stderr, `line 2: --idempotency-key gives it the key of line 1`) {
		t.Errorf("standard: exit %d, want 1 and line 2 refused; stderr:\n%s", code, stderr)
	}
	if got := receiveBodies(t, c, std.URL, 2); len(got) != 2 || got["a"].Body == nil || got["c"].Body == nil {
		t.Errorf("standard: %d messages, want a and c", len(got))
	}
}

// A file saved with a byte order mark sends its first line as the others:
// the mark is no part of the line. Before, the line was "not a JSON
// object", with a hint to use --raw, which would have sent the JSON itself.
func TestSendLinesAfterAByteOrderMark(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	_, stderr, code := runCLI(t, "\ufeff{\"body\": \"first\"}\n{\"body\": \"second\"}\n", "send", q.URL)
	if code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, stderr)
	}
	if got := receiveBodies(t, c, q.URL, 2); got["first"].Body == nil || got["second"].Body == nil {
		t.Errorf("received %d messages, want first and second", len(got))
	}
}

func TestSendErrors(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	missing := localtest.UniqueName(t, false)
	for _, tt := range []struct {
		args  []string
		stdin string
		code  int
		want  string
	}{
		{args: []string{"send", missing, "x"}, code: 1, want: "queue " + missing + " does not exist"},
		{args: []string{"send", q.URL + "-gone", "x"}, code: 1, want: "does not exist"},
		{args: []string{"send"}, code: 2, want: "send takes a QUEUE"},
		{args: []string{"send", q.URL, "x", "--attr", "novalue"}, code: 2, want: `--attr "novalue": want name=value`},
		{args: []string{"send", q.URL, "x", "--attr", "a=1", "--attr", "a=2"}, code: 2, want: `attribute "a" is given twice`},
		{args: []string{"send", q.URL, "x", "--attr", "bad name=1"}, code: 2, want: `attribute name "bad name"`},
		{args: []string{"send", q.URL, "x", "--delay", "9000h"}, code: 2, want: "delay 9000h0m0s"},
		{args: []string{"send", q.URL, "x", "--delay", "soon"}, code: 2, want: "invalid argument"},
		{args: []string{"send", q.URL, "x", "--no-such-flag"}, code: 2, want: "unknown flag"},
		{args: []string{"send", q.URL, "x", "--dedup-id", "d"}, code: 2, want: "--dedup-id is for FIFO queues"},
		{args: []string{"send", q.URL, "a", "b", "--idempotency-key", "k"}, code: 2, want: "--idempotency-key with 2 BODY arguments"},
		{args: []string{"send", q.URL, ""}, code: 1, want: "message 1: the body is empty"},
	} {
		_, stderr, code := runCLI(t, tt.stdin, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
	if v, f, d := localtest.Depth(t, c, q.URL); v+f+d != 0 {
		t.Errorf("%d messages in the queue, want none", v+f+d)
	}
}

func TestSendHelp(t *testing.T) {
	stdout, _, code := runCLI(t, "", "send", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{"Examples:", "--attr", "--delay", "--group", "--dedup-id", "--idempotency-key", "JSON lines"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

// readLine reads lines of any length up to its limit, with or without a
// final newline or a carriage return, and skips longer ones without holding
// them.
func TestSendReadLine(t *testing.T) {
	long := strings.Repeat("y", 100)
	in := "one\r\n" + long + "\n\nthree" // the reader's buffer (16 bytes) is smaller than the long line
	r := bufio.NewReaderSize(strings.NewReader(in), 16)
	type line struct {
		text    string
		tooLong bool
	}
	var got []line
	for {
		l, tooLong, err := readLine(r, 50)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, line{string(l), tooLong})
	}
	want := []line{{"one", false}, {"", true}, {"", false}, {"three", false}}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// startSendThrough starts the CLI with stdin and args, its SQS calls going
// through the proxy at URL proxy.
func startSendThrough(t *testing.T, ctx context.Context, proxy string, stdin io.Reader, args ...string) *cliProcess {
	t.Helper()
	return startCLIWith(t, ctx, stdin, []rootOption{withSQSOptions(func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy) })}, args...)
}

// wantInterrupted reports an error unless an interrupted send exited with
// exitInterrupted.
func wantInterrupted(t *testing.T, code int, stderr string) {
	t.Helper()
	if code != exitInterrupted {
		t.Errorf("exit %d, want %d; stderr:\n%s", code, exitInterrupted, stderr)
	}
}

// interruptingProxy is an HTTP proxy in front of the SQS emulator that, on
// the nth SendMessageBatch call, calls interrupt and then holds the call
// for a moment before passing it on, so that the interrupt comes while the
// call is under way (and reaches SQS after it).
func interruptingProxy(t *testing.T, n int32, interrupt func()) string {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch" && calls.Add(1) == n {
			interrupt()
			time.Sleep(500 * time.Millisecond)
		}
		// Passed on whether or not the client is still there.
		resp, err := passOn(context.Background(), r, body, true)
		answer(w, resp, err)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// jsonLines returns n JSON lines with the bodies line-1 to line-n.
func jsonLines(n int) string {
	var b strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "{\"body\": \"line-%d\"}\n", i)
	}
	return b.String()
}

// bodiesOf returns the bodies of messages received, sorted.
func bodiesOf(ms []types.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	slices.Sort(out)
	return out
}

// Ctrl-C during a long send lets the call under way finish, then stops
// reading, and says exactly which lines were sent: every line up to the
// one named, none after it.
func TestSendInterruptedSaysWhereToResume(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	proxy := interruptingProxy(t, 30, interrupt)
	p := startSendThrough(t, ctx, proxy, strings.NewReader(jsonLines(10000)), "send", q.URL, "-o", "json")
	code := p.wait(t)
	stderr := p.stderr.String()
	wantInterrupted(t, code, stderr)
	// The interrupt came during the 30th call, lines 291 to 300: it
	// finished, and nothing was read after it.
	const last = 300
	if want := fmt.Sprintf("interrupted after line %d; resume with `tail -n +%d`", last, last+1); !strings.Contains(stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr)
	}
	if strings.Contains(stderr, "not sent") {
		t.Errorf("stderr reports messages not sent:\n%s", stderr)
	}
	var res []sendResult
	if err := json.Unmarshal([]byte(p.stdout.String()), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, p.stdout.String())
	}
	if len(res) != last {
		t.Errorf("%d results, want one per line up to %d", len(res), last)
	}
	printed := map[string]bool{}
	for i, r := range res {
		if r.Index != i+1 || r.MessageID == "" || r.Error != "" {
			t.Errorf("result %d: %+v", i, r)
		}
		printed[r.MessageID] = true
	}
	got := localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 5*time.Minute)
	var want []string
	for i := 1; i <= last; i++ {
		want = append(want, fmt.Sprint("line-", i))
	}
	slices.Sort(want)
	if b := bodiesOf(got); !slices.Equal(b, want) {
		t.Errorf("the queue holds %d messages, want lines 1 to %d", len(b), last)
	}
	for _, m := range got {
		if !printed[aws.ToString(m.MessageId)] {
			t.Errorf("%s was sent as %s, which the output does not name", aws.ToString(m.Body), aws.ToString(m.MessageId))
		}
	}
}

// A second Ctrl-C cuts the call under way short: its lines are reported as
// possibly sent, never as not sent.
func TestSendSecondInterruptCutsTheCall(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	now := make(chan struct{})
	proxy := interruptingProxy(t, 5, func() { interrupt(); close(now) })
	p := startSendThrough(t, withStopNow(ctx, now), proxy, strings.NewReader(jsonLines(1000)), "send", q.URL, "-o", "json")
	code := p.wait(t)
	stderr := p.stderr.String()
	wantInterrupted(t, code, stderr)
	for _, want := range []string{
		"interrupted after line 50; resume with `tail -n +51`",
		"lines 41, 42, 43, 44, 45, 46, 47, 48, 49, 50 may have been sent",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	var res []sendResult
	if err := json.Unmarshal([]byte(p.stdout.String()), &res); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, p.stdout.String())
	}
	for _, r := range res {
		if cut := r.Index > 40; cut != r.MaybeSent || cut != (r.MessageID == "") {
			t.Errorf("line %d: %+v", r.Index, r)
		}
	}
	// The proxy passed the cut call on: SQS has lines 1 to 50.
	if n := len(localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 5*time.Minute)); n != 50 {
		t.Errorf("%d messages in the queue, want 50", n)
	}
}

// With --raw each line is a body as it is; without, a line that is not the
// JSON send expects fails with a hint.
func TestSendRawLines(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	stdin := "plain text\n{\"order\": 1}\n\n  spaced\t \r\nlast without newline"
	stdout, stderr, code := runCLI(t, stdin, "send", q.URL, "--raw", "--attr", "source=raw")
	if code != 0 || stdout != "sent 4\n" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, stdout, stderr)
	}
	got := receiveBodies(t, c, q.URL, 4)
	for _, body := range []string{"plain text", `{"order": 1}`, "  spaced\t ", "last without newline"} {
		m, ok := got[body]
		if !ok {
			t.Errorf("%q not sent; got %v", body, slices.Collect(maps.Keys(got)))
			continue
		}
		if a := attr(m, "source"); a != "String:raw" {
			t.Errorf("%q: source=%s", body, a)
		}
	}

	stdout, stderr, code = runCLI(t, "{\"order\": 2}\nplain\n", "send", q.URL)
	if code != 1 || stdout != "sent 0 of 2\n" {
		t.Errorf("exit %d, stdout %q", code, stdout)
	}
	for _, want := range []string{`line 1: invalid JSON: unknown field "order"`, "line 2: not a JSON object", "hint: each line is a JSON object", "use --raw"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if strings.Count(stderr, "hint:") != 1 {
		t.Errorf("the hint is not given once:\n%s", stderr)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--raw", "--dedup-id", "d"}, "--dedup-id with --raw"},
		{[]string{"--raw", "--idempotency-key", "k"}, "--idempotency-key with --raw"},
		{[]string{"--raw", "body"}, "--raw is for lines on stdin"},
	} {
		_, stderr, code := runCLI(t, "x\n", append([]string{"send", q.URL}, tt.args...)...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// A long send shows its progress on a terminal: a count and a rate, then
// clears the line for the summary.
func TestSendProgress(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	var term lockedBuffer
	var mu sync.Mutex
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tick := func() time.Time { // a second passes between two looks
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(time.Second)
		return clock
	}
	p := startCLIWith(t, context.Background(), strings.NewReader(jsonLines(300)),
		[]rootOption{withProgressTo(&term, tick)}, "send", q.URL)
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	out := term.String()
	if !regexp.MustCompile(`\r\x1b\[Ksent [0-9,]+ messages, [0-9,]+/s`).MatchString(out) || !strings.HasSuffix(out, "\r\x1b[K") {
		t.Errorf("progress line %q", out)
	}
	if !strings.Contains(out, "sent 300 messages, 10/s") {
		t.Errorf("progress line %q does not end with 300 messages at 10/s (one call a second)", out)
	}
	if p.stdout.String() != "sent 300\n" {
		t.Errorf("stdout %q", p.stdout.String())
	}
	if strings.Contains(p.stderr.String(), "\r") {
		t.Errorf("progress on a stderr that is not a terminal: %q", p.stderr.String())
	}
}

// BODY arguments too: an interrupt lets the call under way finish and says
// which arguments were not sent.
func TestSendInterruptedArguments(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	proxy := interruptingProxy(t, 2, interrupt)
	args := []string{"send", q.URL}
	for i := 1; i <= 25; i++ {
		args = append(args, fmt.Sprint("arg-", i))
	}
	p := startSendThrough(t, ctx, proxy, strings.NewReader(""), args...)
	wantInterrupted(t, p.wait(t), p.stderr.String())
	if want := "interrupted after message 20 of 25: messages 21 to 25 were not sent"; !strings.Contains(p.stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, p.stderr.String())
	}
	if p.stdout.String() != "sent 20\n" {
		t.Errorf("stdout %q", p.stdout.String())
	}
	if n := len(localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 5*time.Minute)); n != 20 {
		t.Errorf("%d messages in the queue, want 20", n)
	}
}

// --schedule sends the envelope of an occurrence: the same occurrence sent
// twice has one idempotency key, another time another key.
func TestSendSchedule(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	for _, args := range [][]string{
		{"send", q.URL, `{"report":"sales"}`, "--schedule", "nightly-report", "--scheduled-time", "2026-12-01T03:00:00Z"},
		{"send", q.URL, `{"report":"sales"}`, "--schedule", "nightly-report", "--scheduled-time", "2026-12-01T04:00:00+01:00"},
		{"send", q.URL, "--schedule", "nightly-report", "--scheduled-time", "2026-12-02T03:00:00Z"},
		{"send", q.URL, "--schedule", "sync"},
	} {
		if _, stderr, code := runCLI(t, "", args...); code != 0 {
			t.Fatalf("%q: exit %d; stderr:\n%s", args, code, stderr)
		}
	}
	keys := map[string]int{}
	var bodies []string
	for _, m := range localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 30*time.Second) {
		msg := &sqsworker.Message{ID: aws.ToString(m.MessageId), Body: aws.ToString(m.Body)}
		if _, err := schedule.Parse(msg); err != nil {
			t.Errorf("%s: %v", msg.Body, err)
		}
		keys[schedule.Key(msg)]++
		bodies = append(bodies, msg.Body)
	}
	want, _ := schedule.Envelope("nightly-report", time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), json.RawMessage(`{"report":"sales"}`))
	if !slices.Contains(bodies, want) {
		t.Errorf("bodies %q lack %s", bodies, want)
	}
	if len(bodies) != 4 || keys["schedule:nightly-report@2026-12-01T03:00:00Z"] != 2 || keys["schedule:nightly-report@2026-12-02T03:00:00Z"] != 1 {
		t.Errorf("keys %v", keys)
	}
	// The default time: now, to the minute.
	for k := range keys {
		if strings.HasPrefix(k, "schedule:sync@") {
			at, err := time.Parse(time.RFC3339, strings.TrimPrefix(k, "schedule:sync@"))
			if err != nil || at.Second() != 0 || time.Since(at) > 5*time.Minute {
				t.Errorf("default scheduled time in %s: %v", k, err)
			}
		}
	}
}

func TestSendScheduleErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--scheduled-time", "2026-12-01T03:00:00Z"}, "--scheduled-time needs --schedule NAME"},
		{[]string{"--schedule", "n", "--scheduled-time", "tomorrow"}, `--scheduled-time "tomorrow": want an RFC 3339 time`},
		{[]string{"--schedule", "n", "a", "b"}, "--schedule with 2 BODY arguments"},
		{[]string{"--schedule", "n", "not json"}, "must be JSON"},
		{[]string{"--schedule", "n", "--idempotency-key", "k"}, "--idempotency-key with --schedule"},
		{[]string{"--schedule", "n", "--raw"}, "not --raw lines"},
		{[]string{"--schedule", "bad name"}, "1 to 64 letters"},
	} {
		args := append([]string{"send", "http://127.0.0.1:1/000000000000/never-used"}, tt.args...)
		_, stderr, code := runCLI(t, "", args...)
		if code != 2 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tt.args, code, stderr, tt.want)
		}
	}
}

// On a FIFO queue, a line not sent holds back its group's later lines,
// across calls too, so that sending again from it keeps the group's order:
// line 3 (group a) is over the queue's MaximumMessageSize and fails in the
// first call, so line 11 (group a, in the second call) is not sent; line 13
// is not JSON, its group unknown, so every later line waits. Group b's
// lines before line 13 are sent. Before, line 11 was sent ahead of line 3.
func TestSendFIFOFailedLineHoldsItsGroup(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, ContentDedup: true})
	if _, err := c.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: &q.URL,
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	line := func(body, group string) string { return fmt.Sprintf(`{"body": %q, "groupId": %q}`+"\n", body, group) }
	stdin := line("a1", "a") + line("b1", "b") + line(strings.Repeat("x", 2000), "a")
	for i := 4; i <= 10; i++ {
		stdin += line(fmt.Sprint("b", i), "b")
	}
	stdin += line("a11", "a") + line("b12", "b") + "not json\n" + line("b14", "b")
	stdout, stderr, code := runCLI(t, stdin, "send", q.URL, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var res []sendResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	errs := map[int]string{}
	for _, r := range res {
		if r.Error != "" {
			errs[r.Index] = r.Error
		}
	}
	want := map[int]string{
		3:  "over the queue's MaximumMessageSize",
		11: `line 3 of its group "a" was not sent before it; send again from line 3`,
		13: "not a JSON object",
		14: "line 13, whose group is not known, was not sent before it",
	}
	if len(errs) != len(want) {
		t.Errorf("lines not sent: %v, want %v", errs, want)
	}
	for i, w := range want {
		if !strings.Contains(errs[i], w) {
			t.Errorf("line %d: %q, want %q", i, errs[i], w)
		}
	}
	got := map[string]bool{}
	for _, m := range drainAtLeast(t, c, q.URL, 10) {
		got[m.body] = true
	}
	if len(got) != 10 {
		t.Errorf("the queue held %d messages, want 10", len(got))
	}
	for _, b := range []string{"a1", "b1", "b4", "b10", "b12"} {
		if !got[b] {
			t.Errorf("%s not in the queue", b)
		}
	}
	for _, b := range []string{"a11", "b14"} {
		if got[b] {
			t.Errorf("%s in the queue, sent ahead of a line of its group not sent", b)
		}
	}
}

// A FIFO line whose size makes the call before it go out is held back when
// a line of its group fails in that call: line 1 (600 KB, group a) is over
// the queue's 512 KiB and fails in the call line 2 (500 KB, group a) sends
// on its way; line 2 is not sent. It was queued before the call, and sent.
func TestSendFIFOHoldAcrossASizeFlush(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, ContentDedup: true})
	if _, err := c.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: &q.URL,
		Attributes: map[string]string{"MaximumMessageSize": "524288"}}); err != nil {
		t.Fatal(err)
	}
	stdin := strings.Repeat("x", 600_000) + "\n" + strings.Repeat("y", 500_000) + "\n"
	stdout, stderr, code := runCLI(t, stdin, "send", q.URL, "--raw", "--group", "a", "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d, want 1\nstderr: %s", code, stderr)
	}
	var res []sendResult
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(res) != 2 || !strings.Contains(res[0].Error, "MaximumMessageSize") || !strings.Contains(res[1].Error, `line 1 of its group "a" was not sent before it`) {
		t.Errorf("results %+v, want line 1 refused and line 2 held back", res)
	}
	if v, f, d := localtest.Depth(t, c, q.URL); v+f+d != 0 {
		t.Errorf("the queue holds %d messages, want none", v+f+d)
	}
}

// On the local SQS, which lacks ListDeadLetterSourceQueues: the test
// answers that call as SQS in a region does, naming the queue whose
// dead-letter queue it is. send refuses a dead-letter queue, naming its
// source and the fix, and sends nothing: a job sent there would never
// run. --force sends it; a queue that is no dead-letter queue takes its
// job as before.
func TestSendRefusesADeadLetterQueue(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	sources := func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("deadLetterSources",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if l, ok := in.Parameters.(*sqs.ListDeadLetterSourceQueuesInput); ok {
						out := &sqs.ListDeadLetterSourceQueuesOutput{}
						if aws.ToString(l.QueueUrl) == q.DLQURL {
							out.QueueUrls = []string{q.URL}
						}
						return middleware.InitializeOutput{Result: out}, middleware.Metadata{}, nil
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	send := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli := startCLIWith(t, ctx, strings.NewReader(""), []rootOption{withSQSOptions(sources)}, append([]string{"send"}, args...)...)
		return cli.wait(t), cli.stderr.String()
	}
	dlqName, name := queueName(q.DLQURL), queueName(q.URL)
	code, stderr := send(q.DLQURL, `{"order":1}`)
	if want := dlqName + " is the dead-letter queue of " + name + ": a job sent there is never run, only listed by sqsworker dlq; send it to " + name + ", or pass --force"; code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("send to the dead-letter queue: exit %d, want 1 and %q; stderr:\n%s", code, want, stderr)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages sent to the dead-letter queue", v+f+d)
	}
	if code, stderr := send(q.DLQURL, `{"order":1}`, "--force"); code != 0 {
		t.Errorf("--force: exit %d; stderr:\n%s", code, stderr)
	}
	if code, stderr := send(q.URL, `{"order":2}`); code != 0 {
		t.Errorf("send to the source queue: exit %d; stderr:\n%s", code, stderr)
	}
	for _, u := range []string{q.DLQURL, q.URL} {
		if v, f, d := localtest.Depth(t, c, u); v+f+d != 1 {
			t.Errorf("%s: %d messages, want 1", queueName(u), v+f+d)
		}
	}
}

// On the local SQS, which lacks ListDeadLetterSourceQueues, send finds a
// dead-letter queue by the redrive policies of the queues it lists, and
// refuses it. Before, it sent the job there, where it would never run,
// without a word.
func TestSendRefusesADeadLetterQueueWithoutTheSourceList(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cli := startCLI(t, ctx, "", "send", q.DLQURL, `{"order":1}`)
	code, stderr := cli.wait(t), cli.stderr.String()
	if want := queueName(q.DLQURL) + " is the dead-letter queue of " + queueName(q.URL); code != 1 || !strings.Contains(stderr, want) {
		t.Errorf("send to the dead-letter queue: exit %d, want 1 and %q; stderr:\n%s", code, want, stderr)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages sent to the dead-letter queue", v+f+d)
	}
}

// Interrupted on a FIFO queue after a line of a group was not sent, send
// says to resume from that line, as the line's own error does, and why
// only within five minutes: before, it said to resume after the last line
// handled as well, which would leave the line out and its group out of
// order.
func TestSendInterruptedOnFIFOResumesFromTheLineNotSent(t *testing.T) {
	s := &sender{what: "line", fifo: true, interrupted: true, after: 12}
	s.results = []sendResult{{Index: 2, Error: "not sent: refused"}, {Index: 3}}
	s.failed(0, "A", true)
	err := s.outcome()
	if err == nil || !strings.Contains(err.Error(), "interrupted after line 12; line 2, of a FIFO group, was not sent: resume with `tail -n +2`, within 5 minutes") ||
		strings.Contains(err.Error(), "tail -n +13") {
		t.Errorf("outcome: %v", err)
	}
	s = &sender{what: "line", interrupted: true, after: 12} // a standard queue
	if err := s.outcome(); err == nil || !strings.Contains(err.Error(), "resume with `tail -n +13`") {
		t.Errorf("standard queue: %v", err)
	}
}

// A queue is given by its name, its URL (a trailing slash, as a console's
// copy may have, included) or its ARN, to send and stats as to run; an ARN
// of another region than the client's is refused, naming the flag that
// mends it, rather than read as the queue of that name in the client's
// region. Before, an ARN was taken for a name and refused as a queue that
// does not exist.
func TestQueueGivenByARN(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	if _, stderr, code := runCLI(t, "", "send", q.ARN, "by-arn"); code != 0 {
		t.Fatalf("send by ARN: exit %d; stderr:\n%s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "", "send", q.URL+"/", "by-url"); code != 0 {
		t.Fatalf("send by URL with a trailing slash: exit %d; stderr:\n%s", code, stderr)
	}
	got := receiveBodies(t, c, q.URL, 2)
	if _, ok := got["by-arn"]; !ok {
		t.Errorf("received %v, want the message sent by ARN", got)
	}
	stdout, stderr, code := runCLI(t, "", "stats", q.ARN, "-o", "json")
	if code != 0 || !strings.Contains(stdout, q.URL) {
		t.Errorf("stats by ARN: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	arn, err := dlq.ParseARN(q.ARN)
	if err != nil {
		t.Fatal(err)
	}
	missing := arn
	missing.Name += "-missing"
	_, stderr, code = runCLI(t, "", "send", missing.String(), "nowhere")
	if code == 0 || !strings.Contains(stderr, "sqsworker queue create "+missing.Name) {
		t.Errorf("send to the ARN of a missing queue: exit %d, stderr %q; want the hint to create it by name", code, stderr)
	}
	arn.Region = "eu-north-9"
	_, stderr, code = runCLI(t, "", "send", arn.String(), "elsewhere")
	if code == 0 || !strings.Contains(stderr, "is in region eu-north-9") || !strings.Contains(stderr, "--region eu-north-9") {
		t.Errorf("send to an ARN of another region: exit %d, stderr %q; want it refused, naming --region", code, stderr)
	}
}

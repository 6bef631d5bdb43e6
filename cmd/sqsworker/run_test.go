package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// lockedBuffer is a bytes.Buffer safe for a writer and readers at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// cliProcess is a command line running in-process in the background.
type cliProcess struct {
	stdout, stderr *lockedBuffer
	done           chan struct{}
	code           int
}

// startCLI runs the command line in a goroutine, as main would, with ctx as
// the context that SIGINT and SIGTERM cancel in main. Cancel ctx to stop it,
// then wait. A test that ends without waiting stops it.
func startCLI(t *testing.T, ctx context.Context, stdin string, args ...string) *cliProcess {
	t.Helper()
	return startCLIWith(t, ctx, strings.NewReader(stdin), nil, args...)
}

// startCLIWith is startCLI with any stdin and options of the root command.
// A second interrupt is withStopNow on ctx.
func startCLIWith(t *testing.T, ctx context.Context, stdin io.Reader, opts []rootOption, args ...string) *cliProcess {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	p := &cliProcess{stdout: &lockedBuffer{}, stderr: &lockedBuffer{}, done: make(chan struct{})}
	root := newRoot(stdin, p.stdout, p.stderr, opts...)
	root.SetArgs(args)
	go func() {
		defer close(p.done)
		err := root.ExecuteContext(ctx)
		if err != nil {
			p.stderr.Write([]byte("sqsworker: " + err.Error() + "\n"))
		}
		p.code = exitCode(ctx, err)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-p.done:
		case <-time.After(time.Minute):
			t.Error("the command line did not stop within a minute of the end of the test")
		}
	})
	return p
}

// wait waits for the command line to return and gives its exit code.
func (p *cliProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(2 * time.Minute):
		t.Fatalf("the command line did not return; stderr:\n%s", p.stderr.String())
		return -1
	}
}

// fileLines returns the lines of a file, none if it does not exist.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// sendWithAttrs sends body with String attributes.
func sendWithAttrs(t *testing.T, c *sqs.Client, url, body string, attrs map[string]string) string {
	t.Helper()
	in := &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body, MessageAttributes: map[string]types.MessageAttributeValue{}}
	for k, v := range attrs {
		in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(v)}
	}
	out, err := c.SendMessage(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.MessageId)
}

// dlqBodies waits for n messages in the dead-letter queue and returns them
// by body.
func dlqBodies(t *testing.T, c *sqs.Client, q localtest.Queue, n int) map[string]types.Message {
	t.Helper()
	return receiveBodies(t, c, q.DLQURL, n)
}

// emptyEventually waits until the queue holds no message at all.
func emptyEventually(t *testing.T, c *sqs.Client, url string) {
	t.Helper()
	localtest.Eventually(t, 60*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, url)
		return v+f+d == 0
	}, "queue %s not empty", url)
}

// The command gets each body on stdin and the message's details in its
// environment; its exit status deletes (0), retries later (75), retries
// with backoff (other) or dead-letters (65) the message.
func TestRunCommand(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 5})
	dir := t.TempDir()
	done := filepath.Join(dir, "done")
	attempts := filepath.Join(dir, "attempts")
	script := `body=$(cat)
printf '%s %s\n' "$body" "$SQS_RECEIVE_COUNT" >> ` + attempts + `
echo "working on it"
echo "a warning" >&2
printf 'no newline at the end'
case "$body" in
  bad*) exit 65;;
  later*) [ "$SQS_RECEIVE_COUNT" -ge 2 ] || exit 75;;
  flaky*) [ "$SQS_RECEIVE_COUNT" -ge 2 ] || exit 3;;
esac
printf '%s|%s|%s|%s|%s|%s\n' "$body" "$SQS_MESSAGE_ID" "$SQS_RECEIVE_COUNT" "$SQS_ATTR_TENANT_ID" "$SQS_ATTR_KIND" "${SQS_ATTR_LEAKED-unset}" >> ` + done + `
`
	ids := map[string]string{}
	for _, body := range []string{"ok-1", "ok-2", "later", "flaky", "bad"} {
		ids[body] = sendWithAttrs(t, c, q.URL, body, map[string]string{"tenant-id": "acme", "kind": body})
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--retry-after", "1s", "--concurrency", "3", "--", "sh", "-c", script)

	localtest.Eventually(t, 90*time.Second, func() bool { return len(fileLines(t, done)) == 4 },
		"commands done: %q; stderr:\n%s", fileLines(t, done), p.stderr.String())
	dead := dlqBodies(t, c, q, 1)
	emptyEventually(t, c, q.URL)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}

	got := fileLines(t, done)
	slices.Sort(got)
	want := []string{
		"flaky|" + ids["flaky"] + "|2|acme|flaky|unset",
		"later|" + ids["later"] + "|2|acme|later|unset",
		"ok-1|" + ids["ok-1"] + "|1|acme|ok-1|unset",
		"ok-2|" + ids["ok-2"] + "|1|acme|ok-2|unset",
	}
	if !slices.Equal(got, want) {
		t.Errorf("done:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	att := fileLines(t, attempts)
	slices.Sort(att)
	if want := []string{"bad 1", "flaky 1", "flaky 2", "later 1", "later 2", "ok-1 1", "ok-2 1"}; !slices.Equal(att, want) {
		t.Errorf("attempts %q, want %q", att, want)
	}
	m, ok := dead["bad"]
	if !ok {
		t.Fatalf("bad not in the dead-letter queue: %v", dead)
	}
	if class := attr(m, sqsworker.AttrFailureClass); class != "String:exit-65" {
		t.Errorf("error class %s", class)
	}
	if e := attr(m, sqsworker.AttrFailureError); !strings.Contains(e, "EX_DATAERR") {
		t.Errorf("error %s", e)
	}
	if a := attr(m, sqsworker.AttrFailureAttempts); a != "Number:1" {
		t.Errorf("attempts %s", a)
	}

	stderr := p.stderr.String()
	for body, id := range ids {
		for _, line := range []string{"[" + id + "] working on it\n", "[" + id + "] a warning\n", "[" + id + "] no newline at the end\n"} {
			if !strings.Contains(stderr, line) {
				t.Errorf("stderr lacks %q", line)
			}
		}
		if strings.Contains(stderr, "kind="+body) || strings.Contains(stderr, " "+body+" ") {
			t.Errorf("stderr holds the body %q", body)
		}
	}
	if !strings.Contains(stderr, "EX_TEMPFAIL") || !strings.Contains(stderr, "command exited with status 3") {
		t.Errorf("stderr does not log the failures:\n%s", stderr)
	}
}

// A variable from sqsworker's environment named like a message's is not
// passed on; the attribute names become variable names.
func TestRunEnvironment(t *testing.T) {
	env := runBaseEnv([]string{"PATH=/bin", "SQS_ATTR_LEAKED=x", "SQS_MESSAGE_ID=old", "SQS_GROUP_ID=g", "SQS_QUEUE_URL=u", "SQS_RECEIVE_COUNT=9", "SQS_OTHER=kept"})
	if want := []string{"PATH=/bin", "SQS_OTHER=kept"}; !slices.Equal(env, want) {
		t.Errorf("runBaseEnv = %q, want %q", env, want)
	}
	for name, want := range map[string]string{
		"tenant-id": "SQS_ATTR_TENANT_ID", "sqsworker.error": "SQS_ATTR_SQSWORKER_ERROR", "CamelCase_9": "SQS_ATTR_CAMELCASE_9",
	} {
		if got := runAttrEnvName(name); got != want {
			t.Errorf("runAttrEnvName(%q) = %q, want %q", name, got, want)
		}
	}
	if got := runAttrValue(sqsworker.MessageAttribute{DataType: "Binary", BinaryValue: []byte{0, 1, 2}}); got != "AAEC" {
		t.Errorf("binary value %q", got)
	}
}

// httpRecorder is an endpoint that records the requests it receives and
// answers by body.
type httpRecorder struct {
	mu       sync.Mutex
	requests map[string][]http.Header // by body
}

func (h *httpRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	body := string(b)
	h.mu.Lock()
	h.requests[body] = append(h.requests[body], r.Header.Clone())
	n := len(h.requests[body])
	h.mu.Unlock()
	if r.Method != http.MethodPost {
		http.Error(w, "want POST", http.StatusMethodNotAllowed)
		return
	}
	switch {
	case body == "gone":
		http.Error(w, "no such job", http.StatusGone)
	case body == "unknown":
		// A 404 of the job's own, which the application marks permanent.
		w.Header().Set("X-Sqs-Permanent", "true")
		http.Error(w, "no such order", http.StatusNotFound)
	case body == "busy" && n == 1:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case body == "throttled" && n == 1:
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case body == "broken" && n == 1:
		http.Error(w, "oops", http.StatusInternalServerError)
	case body == "moved":
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (h *httpRecorder) get(body string) []http.Header {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.requests[body])
}

// Each message is POSTed with its details in headers; the status deletes
// (2xx), retries later (429, 503), dead-letters (other 4xx) or retries with
// backoff (5xx, redirects) the message.
func TestRunHTTP(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	rec := &httpRecorder{requests: map[string][]http.Header{}}
	srv := httptest.NewServer(rec)
	defer srv.Close()

	ids := map[string]string{}
	for _, body := range []string{"ok", "busy", "throttled", "broken", "gone", "unknown", "moved"} {
		ids[body] = sendWithAttrs(t, c, q.URL, body, map[string]string{"tenant-id": "acme", "note": "line one\nline two"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", srv.URL+"/jobs", "--wait", "1s", "--retry-after", "1s", "--content-type", "text/plain")

	dead := dlqBodies(t, c, q, 3)
	emptyEventually(t, c, q.URL)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel; stderr:\n%s", code, p.stderr.String())
	}

	for body, want := range map[string]int{"ok": 1, "busy": 2, "throttled": 2, "broken": 2, "gone": 1, "unknown": 1, "moved": 2} {
		reqs := rec.get(body)
		if len(reqs) != want {
			t.Errorf("%s: %d requests, want %d", body, len(reqs), want)
			continue
		}
		for i, h := range reqs {
			checks := map[string]string{
				"X-Sqs-Message-Id":     ids[body],
				"X-Sqs-Job-Key":        "message-id:" + ids[body],
				"X-Sqs-Receive-Count":  strconv.Itoa(i + 1),
				"X-Sqs-Attr-Tenant-Id": "acme",
				"X-Sqs-Attr-Note":      "line%20one%0Aline%20two",
				"X-Sqs-Encoded-Attrs":  "note",
				"Content-Type":         "text/plain",
			}
			for k, v := range checks {
				if got := h.Get(k); got != v {
					t.Errorf("%s request %d: %s = %q, want %q", body, i+1, k, got, v)
				}
			}
		}
	}
	for body, class := range map[string]string{"gone": "String:http-4xx", "unknown": "String:http-4xx", "moved": "String:http-3xx"} {
		m, ok := dead[body]
		if !ok {
			t.Errorf("%s not dead-lettered", body)
			continue
		}
		if got := attr(m, sqsworker.AttrFailureClass); got != class {
			t.Errorf("%s: error class %s, want %s", body, got, class)
		}
	}
	if a := attr(dead["gone"], sqsworker.AttrFailureAttempts); a != "Number:1" {
		t.Errorf("gone dead-lettered after %s attempts, want 1", a)
	}
	stderr := p.stderr.String()
	for _, body := range []string{"throttled", "broken", "busy"} {
		if strings.Contains(stderr, body) {
			t.Errorf("stderr holds the body %q", body)
		}
	}
}

// The application not listening yet (connection refused) opens the circuit
// breaker instead of spending the messages' attempts: nothing is
// dead-lettered while it starts, and every message is handled once it is up.
func TestRunHTTPConnectionRefused(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 5 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var bodies []string
	for i := range 20 {
		bodies = append(bodies, fmt.Sprint("job-", i))
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", "http://"+addr+"/jobs", "--wait", "1s")
	localtest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(p.stderr.String(), "circuit breaker open") },
		"breaker never opened; stderr:\n%s", p.stderr.String())
	time.Sleep(10 * time.Second) // the application takes its time to start
	rec := &httpRecorder{requests: map[string][]http.Header{}}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	srv := &http.Server{Handler: rec}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	emptyEventually(t, c, q.URL)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered while the application started, want none", v+f+d)
	}
	for _, b := range bodies {
		if n := len(rec.get(b)); n != 1 {
			t.Errorf("%s: %d requests, want 1", b, n)
		}
	}
	if !strings.Contains(p.stderr.String(), "connection refused") {
		t.Errorf("stderr does not say why:\n%s", p.stderr.String())
	}
}

// A command still running at shutdown is allowed to finish.
func TestRunShutdownWaitsForCommands(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	dir := t.TempDir()
	started, finished := filepath.Join(dir, "started"), filepath.Join(dir, "finished")
	localtest.Send(t, c, q.URL, "", "slow")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--",
		"sh", "-c", fmt.Sprintf("touch %s; sleep 2; touch %s", started, finished))
	localtest.Eventually(t, 60*time.Second, func() bool { _, err := os.Stat(started); return err == nil }, "command not started")
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	if _, err := os.Stat(finished); err != nil {
		t.Errorf("the command did not finish: %v", err)
	}
	emptyEventually(t, c, q.URL)
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	missing := localtest.UniqueName(t, false)
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"run"}, 2, "run takes a QUEUE"},
		{[]string{"run", q.URL}, 2, "no command after -- and no --http URL"},
		{[]string{"run", q.URL, "--"}, 2, "no command after --"},
		{[]string{"run", q.URL, "cat"}, 2, "put the command after --"},
		{[]string{"run", "--", "cat"}, 2, "run takes a QUEUE"},
		{[]string{"run", q.URL, "other", "--", "cat"}, 2, "one QUEUE before --"},
		{[]string{"run", q.URL, "--http", "http://127.0.0.1:1/", "--", "cat"}, 2, "not both"},
		{[]string{"run", q.URL, "--http", "ftp://127.0.0.1/"}, 2, `--http "ftp://127.0.0.1/": want an http://`},
		{[]string{"run", q.URL, "--http-health", "/healthz", "--", "cat"}, 2, `--http-health "/healthz": it goes with --http`},
		{[]string{"run", q.URL, "--http", "http://127.0.0.1:1/", "--http-health", "ftp://h/"}, 2, `--http-health "ftp://h/": want a path such as /healthz`},
		{[]string{"run", q.URL, "--concurrency", "0", "--wait", "21s", "--", "cat"}, 2, "--concurrency 0: want at least 1\n--wait 21s"},
		{[]string{"run", q.URL, "--visibility-timeout", "1.5s", "--", "cat"}, 2, "--visibility-timeout 1.5s"},
		{[]string{"run", q.URL, "--log-level", "loud", "--", "cat"}, 2, `--log-level "loud"`},
		{[]string{"run", q.URL, "--concurrency", "many", "--", "cat"}, 2, "invalid argument"},
		{[]string{"run", q.URL, "--", "no-such-command-here"}, 2, `command "no-such-command-here": executable file not found`},
		{[]string{"run", missing, "--", "cat"}, 1, "queue " + missing + " does not exist"},
		{[]string{"run", q.URL + "-gone", "--wait", "1s", "--", "cat"}, 1, "queue " + q.URL + "-gone does not exist"},
	} {
		_, stderr, code := runCLI(t, "", tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}

func TestRunHelp(t *testing.T) {
	stdout, _, code := runCLI(t, "", "run", "--help")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range []string{
		"Examples:", "--concurrency", "--visibility-timeout", "--handler-timeout", "--wait", "--retry-after", "--http",
		"SQS_MESSAGE_ID", "SQS_RECEIVE_COUNT", "SQS_GROUP_ID", "SQS_ATTR_", "EX_TEMPFAIL", "EX_DATAERR",
		"X-Sqs-Message-Id", "X-Sqs-Receive-Count", "X-Sqs-Attr-", "429, 503", "other 4xx", "5xx",
		"--response-header-timeout", "--shutdown-timeout", "--kill-after", "--totals-interval", "5m with --http",
		"process group", "PID 1", "Ctrl-C again", "128 KiB", "without its user information and query",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q", want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":         30 * time.Second,
		"7":        7 * time.Second,
		" 0 ":      0,
		"-3":       30 * time.Second,
		"soon":     30 * time.Second,
		"99999999": sqsworker.MaxVisibilityTimeout,
		now.Add(2 * time.Minute).Format(http.TimeFormat): 2 * time.Minute,
		now.Add(-time.Minute).Format(http.TimeFormat):    0,
	} {
		if got := parseRetryAfter(v, 30*time.Second, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}

func TestRunLinePrefixer(t *testing.T) {
	var out bytes.Buffer
	p := &runLinePrefixer{w: &out, prefix: "[id] "}
	for _, s := range []string{"one\ntw", "o\n", "", "three\nfour\nfi", "ve"} {
		p.Write([]byte(s))
	}
	p.flush()
	if want := "[id] one\n[id] two\n[id] three\n[id] four\n[id] five\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	out.Reset()
	p.Write(bytes.Repeat([]byte("x"), maxOutputLine+10))
	p.flush()
	if n := strings.Count(out.String(), "[id] "); n != 2 {
		t.Errorf("a line longer than %d bytes written as %d lines", maxOutputLine, n)
	}
}

// The URL's user information and query string (credentials, tokens) are
// sent but never logged nor put in dead-letter metadata; a stuck endpoint is
// given up on at the response-header timeout.
func TestRunHTTPRedactsSecretsAndTimesOut(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 1})
	type seen struct{ user, pass, token string }
	got := make(chan seen, 10)
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		got <- seen{u, p, r.URL.Query().Get("token")}
		b, _ := io.ReadAll(r.Body)
		switch string(b) {
		case "stuck":
			select { // never answers within the test's timeouts
			case <-release:
			case <-r.Context().Done():
			}
		case "gone":
			http.Error(w, "no such job", http.StatusGone)
		}
	}))
	defer srv.Close()
	secretURL := strings.Replace(srv.URL, "http://", "http://robot:s3cret-pass@", 1) + "/jobs?token=t0ps3cret&x=1"
	localtest.Send(t, c, q.URL, "", "stuck", "gone")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", secretURL, "--wait", "1s", "--response-header-timeout", "2s", "--log-level", "debug")
	dead := dlqBodies(t, c, q, 2)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	for range 2 {
		if s := <-got; s != (seen{"robot", "s3cret-pass", "t0ps3cret"}) {
			t.Errorf("the endpoint got %+v", s)
		}
	}
	stderr := p.stderr.String()
	var texts []string
	for _, m := range dead {
		for name, a := range m.MessageAttributes {
			texts = append(texts, name+"="+aws.ToString(a.StringValue))
		}
	}
	for _, secret := range []string{"s3cret", "t0ps3cret", "robot"} {
		if strings.Contains(stderr, secret) {
			t.Errorf("stderr holds %q:\n%s", secret, stderr)
		}
		for _, s := range texts {
			if strings.Contains(s, secret) {
				t.Errorf("dead-letter metadata holds %q: %s", secret, s)
			}
		}
	}
	if want := "url=" + strings.Replace(srv.URL, "http://", "http://REDACTED@", 1) + "/jobs?REDACTED"; !strings.Contains(stderr, want) {
		t.Errorf("stderr does not log %s:\n%s", want, stderr)
	}
	if !strings.Contains(stderr, "handler_timeout=5m0s") {
		t.Errorf("no default handler timeout with --http:\n%s", stderr)
	}
	m := dead["stuck"]
	if class := attr(m, sqsworker.AttrFailureClass); class != "String:timeout" {
		t.Errorf("stuck: error class %s, want timeout", class)
	}
	if e := attr(m, sqsworker.AttrFailureError); !strings.Contains(e, "timeout awaiting response headers") || !strings.Contains(e, "REDACTED") {
		t.Errorf("stuck: error %s", e)
	}
	if class := attr(dead["gone"], sqsworker.AttrFailureClass); class != "String:http-4xx" {
		t.Errorf("gone: error class %s, want http-4xx", class)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://u:p@h:1/a?b=c#d":      "http://REDACTED@h:1/a?REDACTED",
		"https://h/jobs":              "https://h/jobs",
		"https://token@h/jobs?":       "https://REDACTED@h/jobs",
		"http://h/p?sig=abc&exp=1234": "http://h/p?REDACTED",
		"http://[::1]:80/%zz":         "(an invalid URL)",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
	_, stderr, code := runCLI(t, "", "run", "jobs", "--http", "ftp://u:secret@h/?k=secret")
	if code != 2 || strings.Contains(stderr, "secret") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// run logs its totals every --totals-interval while it runs.
func TestRunPeriodicTotals(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, q.URL, "", "a", "b")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--totals-interval", "1s", "--", "sh", "-c", "cat >/dev/null")
	localtest.Eventually(t, 60*time.Second, func() bool {
		return strings.Contains(p.stderr.String(), `level=INFO msg="totals so far" received=2 succeeded=2 failed=0`)
	}, "no totals; stderr:\n%s", p.stderr.String())
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d", code)
	}
	if !strings.Contains(p.stderr.String(), `msg=totals received=2 succeeded=2`) {
		t.Errorf("no final totals:\n%s", p.stderr.String())
	}
}

// A bad --http is said once: --http-health, resolved against it, is not
// refused for it too.
func TestRunBadHTTPWithHealthSaysItOnce(t *testing.T) {
	t.Parallel()
	_, stderr, code := runCLI(t, "", "run", "jobs", "--http", "ftp://127.0.0.1/", "--http-health", "/healthz")
	if code != 2 || !strings.Contains(stderr, `--http "ftp://127.0.0.1/": want an http://`) || strings.Contains(stderr, "--http-health") {
		t.Errorf("exit %d, stderr %q; want 2, naming --http alone", code, stderr)
	}
}

package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// syncBuffer is a log destination read by the test while the server
// writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func noStats(context.Context) ([]QueueStats, error) { return []QueueStats{}, nil }

// newTestServer serves a server on the fake SQS at a loopback address,
// until the test ends.
func newTestServer(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s := newUnserved(t, cfg)
	return s, serve(t, s)
}

// newUnserved makes a server on the fake SQS (by default) at a loopback
// address, for a test to set before serving it.
func newUnserved(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.SQS == nil {
		cfg.SQS = sqstest.NewFake()
	}
	if cfg.Stats == nil {
		cfg.Stats = noStats
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cfg.Addr = "127.0.0.1:0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve serves s at a loopback address until the test ends, and returns
// its base URL.
func serve(t *testing.T, s *Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, url, body string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func get(t *testing.T, url string, hdr map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

var csrfMeta = regexp.MustCompile(`name="csrf-token" content="([0-9a-f]+)"`)

// csrfOf reads the CSRF token from the page, as the page's script does.
func csrfOf(t *testing.T, base string) string {
	t.Helper()
	code, page := get(t, base+"/", nil)
	m := csrfMeta.FindStringSubmatch(page)
	if code != http.StatusOK || m == nil {
		t.Fatalf("page: %d, no CSRF token in\n%s", code, page)
	}
	return m[1]
}

func TestReadOnlyRefusesPOSTs(t *testing.T) {
	f := sqstest.NewFake()
	f.CreateQueue("jobs-dlq", nil)
	_, base := newTestServer(t, Config{SQS: f})
	token := csrfOf(t, base)
	for _, path := range []string{"/api/dlq/plan", "/api/dlq/replay", "/api/dlq/purge"} {
		code, body := post(t, base+path, `{"queue":"jobs-dlq","confirm":"jobs-dlq"}`, map[string]string{"X-CSRF-Token": token})
		if code != http.StatusForbidden || !strings.Contains(body, "--allow-actions") {
			t.Errorf("POST %s read-only: %d %s", path, code, body)
		}
	}
	if v, _, _ := f.Depth(f.CreateQueue("jobs-dlq", nil)); v != 0 {
		t.Errorf("depth %d", v)
	}
	code, page := get(t, base+"/", nil)
	if code != http.StatusOK || !strings.Contains(page, `content="off"`) || !strings.Contains(page, "read-only") {
		t.Errorf("page does not say read-only: %d", code)
	}
}

func TestCSRFAndOriginChecks(t *testing.T) {
	f := sqstest.NewFake()
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true})
	token := csrfOf(t, base)
	body := `{"queue":"nope","confirm":"nope"}`
	for name, hdr := range map[string]map[string]string{
		"no token":     {},
		"wrong token":  {"X-CSRF-Token": strings.Repeat("0", len(token))},
		"short token":  {"X-CSRF-Token": token[:10]},
		"other origin": {"X-CSRF-Token": token, "Origin": "http://evil.example"},
		"cross-site":   {"X-CSRF-Token": token, "Sec-Fetch-Site": "cross-site"},
		"form post":    {"X-CSRF-Token": token, "Content-Type": "application/x-www-form-urlencoded"},
	} {
		code, out := post(t, base+"/api/dlq/purge", body, hdr)
		if code != http.StatusForbidden {
			t.Errorf("%s: %d %s, want 403", name, code, out)
		}
	}
	// With the token, from the page's origin, the request reaches the
	// handler (which finds no such queue).
	code, out := post(t, base+"/api/dlq/purge", body, map[string]string{"X-CSRF-Token": token, "Origin": base, "Sec-Fetch-Site": "same-origin"})
	if code == http.StatusForbidden {
		t.Errorf("accepted request refused: %d %s", code, out)
	}
	// Another server's token is not this one's.
	_, base2 := newTestServer(t, Config{SQS: f, AllowActions: true})
	if other := csrfOf(t, base2); other == token {
		t.Error("two servers made the same CSRF token")
	}
}

func TestHostCheckOnLoopback(t *testing.T) {
	s, err := New(Config{SQS: sqstest.NewFake(), Stats: noStats, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	for host, want := range map[string]int{"127.0.0.1:8080": 200, "localhost:8080": 200, "[::1]:8080": 200, "evil.example:8080": 403, "evil.example": 403} {
		req := httptest.NewRequest(http.MethodGet, "/api/audit", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: %d %s, want %d", host, rec.Code, rec.Body, want)
		}
	}
}

func TestNonLoopbackNeedsToken(t *testing.T) {
	base := Config{SQS: sqstest.NewFake(), Stats: noStats}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "192.0.2.10:8080", "[::]:8080"} {
		cfg := base
		cfg.Addr = addr
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "token") {
			t.Errorf("%s without a token: %v", addr, err)
		}
		cfg.Token = RandomToken()
		if _, err := New(cfg); err != nil {
			t.Errorf("%s with a token: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:8080", "localhost:0", "[::1]:8080", "127.0.0.2:1"} {
		cfg := base
		cfg.Addr = addr
		if _, err := New(cfg); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	cfg := base
	cfg.Addr = "8080"
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "host:port") {
		t.Errorf("bad address: %v", err)
	}
}

func TestAccessToken(t *testing.T) {
	tok := RandomToken()
	_, base := newTestServer(t, Config{Token: tok})
	if code, _ := get(t, base+"/api/audit", nil); code != http.StatusUnauthorized {
		t.Errorf("no token: %d", code)
	}
	if code, _ := get(t, base+"/api/audit?token=wrong", nil); code != http.StatusUnauthorized {
		t.Errorf("wrong token: %d", code)
	}
	if code, _ := get(t, base+"/api/audit", map[string]string{"Authorization": "Bearer " + tok}); code != http.StatusOK {
		t.Errorf("bearer: %d", code)
	}
	// ?token= sets the cookie and redirects without it.
	req, _ := http.NewRequest(http.MethodGet, base+"/?token="+tok, nil)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther || strings.Contains(res.Header.Get("Location"), "token") || len(res.Cookies()) != 1 {
		t.Fatalf("?token=: %d, Location %q, cookies %v", res.StatusCode, res.Header.Get("Location"), res.Cookies())
	}
	ck := res.Cookies()[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie %+v", ck)
	}
	if code, _ := get(t, base+"/api/audit", map[string]string{"Cookie": ck.Name + "=" + ck.Value}); code != http.StatusOK {
		t.Errorf("cookie: %d", code)
	}
}

// TestBodiesOnlyOnClick lists a dead-letter queue whose messages carry a
// secret in their body and attributes: the listing has their failure
// metadata, not the secret; the message endpoint has it; the log never.
func TestBodiesOnlyOnClick(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	arn := queueARN(t, f, dlqURL)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+arn+`","maxReceiveCount":3}`)
	const secret = "card-4111-1111-1111-1111"
	fail := sqsworker.Failure{Error: "upstream said no", ErrorClass: "upstream-unavailable", Attempts: 3,
		FirstReceived: time.Now().Add(-time.Minute), FailedAt: time.Now(), SourceQueue: src, MessageID: "orig-1"}
	attrs, _ := fail.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "secret-tenant-" + secret}})
	id := f.Send(dlqURL, `{"card":"`+secret+`"}`, withAttributes(attrs))
	logs := &syncBuffer{}
	_, base := newTestServer(t, Config{SQS: f, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	code, list := get(t, base+"/api/dlq/messages?queue=jobs-dlq&text="+secret[:9], nil)
	if code != http.StatusOK {
		t.Fatalf("list: %d %s", code, list)
	}
	var l listing
	if err := json.Unmarshal([]byte(list), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Messages) != 1 || l.Messages[0].ErrorClass != "upstream-unavailable" || l.Messages[0].Error != "upstream said no" ||
		l.Messages[0].Attempts != 3 || l.Messages[0].OriginalID != "orig-1" || l.Messages[0].SourceQueue != src {
		t.Fatalf("listing: %s", list)
	}
	if strings.Contains(list, secret) || strings.Contains(list, "tenant") {
		t.Errorf("the listing has the body or the attributes: %s", list)
	}
	code, one := get(t, base+"/api/dlq/message?queue=jobs-dlq&id="+id, nil)
	if code != http.StatusOK || !strings.Contains(one, `\"card\":\"`+secret) || !strings.Contains(one, "secret-tenant-") {
		t.Errorf("message: %d %s", code, one)
	}
	if strings.Contains(logs.String(), secret) || strings.Contains(logs.String(), "secret-tenant") {
		t.Errorf("the log has the body or an attribute:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "path=/api/dlq/message") {
		t.Errorf("no request line in the log:\n%s", logs.String())
	}
}

// TestSamplingStopsWhenNoPageIsOpen checks that the figures are read only
// while a client polls.
func TestSamplingStopsWhenNoPageIsOpen(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	stats := func(context.Context) ([]QueueStats, error) {
		mu.Lock()
		defer mu.Unlock()
		reads++
		return []QueueStats{{Queue: "jobs", URL: "u", Visible: reads}}, nil
	}
	s, base := newTestServer(t, Config{Stats: stats, SampleInterval: 50 * time.Millisecond, SampleIdle: 300 * time.Millisecond})
	if n := s.sampler.readings(); n != 0 {
		t.Fatalf("%d readings before any page", n)
	}
	code, body := get(t, base+"/api/queues", nil)
	if code != http.StatusOK || !strings.Contains(body, `"queue":"jobs"`) || !strings.Contains(body, `"requestsPerMinute":1200`) {
		t.Fatalf("queues: %d %s", code, body)
	}
	// Sampling goes on for SampleIdle, then stops: the count settles.
	deadline := time.Now().Add(30 * time.Second)
	last, stable := -1, 0
	for stable < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("sampling did not stop: %d readings", s.sampler.readings())
		}
		n := s.sampler.readings()
		if n == last {
			stable++
		} else {
			last, stable = n, 0
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last < 2 {
		t.Errorf("%d readings while the page polled", last)
	}
	var snap struct {
		Queues []queueView `json:"queues"`
	}
	_, body = get(t, base+"/api/queues", nil)
	if err := json.Unmarshal([]byte(body), &snap); err != nil || len(snap.Queues) != 1 || len(snap.Queues[0].History) < 2 {
		t.Errorf("history: %v %s", err, body)
	}
}

func TestRequestsPerMinute(t *testing.T) {
	if got := RequestsPerMinute(5*time.Second, 3, 2, false); got != 60 {
		t.Errorf("3 queues, 2 DLQs, 5s: %v", got)
	}
	if got := RequestsPerMinute(5*time.Second, 3, 2, true); got != 72 {
		t.Errorf("listed: %v", got)
	}
}

func TestStaticAssetsAreEmbedded(t *testing.T) {
	_, base := newTestServer(t, Config{})
	for _, p := range []string{"/static/app.js", "/static/app.css"} {
		if code, body := get(t, base+p, nil); code != http.StatusOK || len(body) < 100 {
			t.Errorf("%s: %d", p, code)
		}
	}
	_, page := get(t, base+"/", nil)
	if strings.Contains(page, "//") && regexp.MustCompile(`(src|href)="(https?:)?//`).MatchString(page) {
		t.Error("the page loads something from another host")
	}
}

func queueARN(t *testing.T, f *sqstest.Fake, url string) string {
	t.Helper()
	out, err := f.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes["QueueArn"]
}

func withAttributes(attrs map[string]sqsworker.MessageAttribute) func(*sqs.SendMessageInput) {
	return func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			in.MessageAttributes[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
		}
	}
}

// TestCrossSiteReadsRefused checks that another site's page cannot make
// the server call SQS with a GET (an <img> or a no-cors fetch: it cannot
// read the answer, but the listing receives every message of the queue,
// raising their receive counts, and the figures cost requests): the API
// answers a cross-site or same-site request, or one from another origin,
// with 403 before any SQS call. The page's own requests pass.
func TestCrossSiteReadsRefused(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	id := f.Send(dlqURL, `{"n":1}`)
	s, base := newTestServer(t, Config{SQS: f, Stats: func(context.Context) ([]QueueStats, error) {
		return []QueueStats{{Queue: "jobs", URL: src}}, nil
	}})
	paths := []string{"/api/queues", "/api/dlq/messages?queue=jobs-dlq", "/api/dlq/message?queue=jobs-dlq&id=" + id, "/api/audit", "/api/jobs/x"}
	for name, hdr := range map[string]map[string]string{
		"cross-site":   {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "image"},
		"same-site":    {"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"},
		"other origin": {"Origin": "http://evil.example"},
	} {
		for _, p := range paths {
			if code, body := get(t, base+p, hdr); code != http.StatusForbidden {
				t.Errorf("%s GET %s: %d %s, want 403", name, p, code, body)
			}
		}
	}
	if n := f.Calls("ReceiveMessage"); n != 0 {
		t.Errorf("refused requests made %d ReceiveMessage calls", n)
	}
	if n := s.sampler.readings(); n != 0 {
		t.Errorf("refused requests woke the sampler: %d readings", n)
	}
	// The page's own requests, and tools that send no Fetch Metadata.
	for _, hdr := range []map[string]string{{"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}, nil} {
		if code, body := get(t, base+"/api/dlq/messages?queue=jobs-dlq", hdr); code != http.StatusOK || !strings.Contains(body, id) {
			t.Errorf("same-origin listing %v: %d %s", hdr, code, body)
		}
	}
	// A link from another site still opens the page.
	if code, _ := get(t, base+"/", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}); code != http.StatusOK {
		t.Errorf("navigation from another site: %d", code)
	}
}

// TestPlanWarnsOfAnotherDestination checks that a dry run to a queue that
// does not send its dead letters to the dead-letter queue (a slip of the
// operator's: orders-v2 for orders) says so above the plan, which the
// library's source check does not cover (a destination given is the
// operator's choice); to the source queue, or to none, it says nothing.
func TestPlanWarnsOfAnotherDestination(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	other := f.CreateQueue("jobs-v2", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	fail := sqsworker.Failure{Error: "no", ErrorClass: "validation", Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: "orig-1"}
	attrs, _ := fail.AddTo(nil)
	f.Send(dlqURL, `{}`, withAttributes(attrs))
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}
	for to, warn := range map[string]bool{"jobs-v2": true, other: true, "jobs": false, "": false} {
		code, body := post(t, base+"/api/dlq/plan", `{"queue":"jobs-dlq","to":"`+to+`"}`, hdr)
		var p planResponse
		if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil || len(p.Result.Messages) != 1 {
			t.Fatalf("plan to %q: %d %s", to, code, body)
		}
		got := strings.Join(p.Warnings, " ")
		if warn != (got != "") || warn && !strings.Contains(got, "jobs-v2 does not send its dead letters to jobs-dlq") {
			t.Errorf("plan to %q: warnings %q", to, p.Warnings)
		}
	}
}

// TestSecurityHeaders checks the headers of every kind of response: the
// page, an asset, an API answer (which may carry a body) and an error.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	f.CreateQueue("jobs-dlq", nil)
	_, base := newTestServer(t, Config{SQS: f})
	for _, p := range []string{"/", "/static/app.js", "/api/audit", "/api/dlq/message?queue=jobs-dlq&id=nope", "/nope"} {
		res, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		h := res.Header
		csp := h.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'self'", "frame-ancestors 'none'", "base-uri 'none'", "form-action 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", p, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP %q", p, csp)
		}
		for k, v := range map[string]string{"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
			"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Resource-Policy": "same-origin"} {
			if h.Get(k) != v {
				t.Errorf("%s: %s %q, want %q", p, k, h.Get(k), v)
			}
		}
	}
}

// TestReplayConfirmsOnlyItsOwnFreshPlan checks that a replay confirms a
// dry run of this server, once, before it expires: an unknown plan ID, one
// of another server and an expired one move nothing.
func TestReplayConfirmsOnlyItsOwnFreshPlan(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	fail := sqsworker.Failure{Error: "no", ErrorClass: "validation", Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: "orig-1"}
	attrs, _ := fail.AddTo(nil)
	f.Send(dlqURL, `{}`, withAttributes(attrs))
	s, base := newTestServer(t, Config{SQS: f, AllowActions: true})
	_, base2 := newTestServer(t, Config{SQS: f, AllowActions: true})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}
	hdr2 := map[string]string{"X-CSRF-Token": csrfOf(t, base2)}
	plan := func() string {
		code, body := post(t, base+"/api/dlq/plan", `{"queue":"jobs-dlq"}`, hdr)
		var p planResponse
		if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil || len(p.Result.Messages) != 1 {
			t.Fatalf("plan: %d %s", code, body)
		}
		return p.PlanID
	}
	id := plan()
	if code, body := post(t, base2+"/api/dlq/replay", `{"planId":"`+id+`"}`, hdr2); code != http.StatusBadRequest {
		t.Errorf("another server's plan: %d %s", code, body)
	}
	if code, body := post(t, base+"/api/dlq/replay", `{"planId":"`+RandomToken()[:16]+`"}`, hdr); code != http.StatusBadRequest {
		t.Errorf("unknown plan: %d %s", code, body)
	}
	s.mu.Lock()
	s.plans[id].created = time.Now().Add(-planTTL - time.Second)
	s.mu.Unlock()
	if code, body := post(t, base+"/api/dlq/replay", `{"planId":"`+id+`"}`, hdr); code != http.StatusBadRequest || !strings.Contains(body, "expired") {
		t.Errorf("expired plan: %d %s", code, body)
	}
	if v, fl, _ := f.Depth(src); v+fl != 0 {
		t.Errorf("refused confirms moved %d messages", v+fl)
	}
	if v, _, _ := f.Depth(dlqURL); v != 1 {
		t.Errorf("dead-letter queue holds %d visible", v)
	}
}

// TestTokenRedirectStaysOnThisServer checks that the redirect that takes
// ?token= out of the address goes to a path of this server: an address
// whose path starts with two slashes (or a backslash, which browsers read
// as a slash) would otherwise redirect to another host.
func TestTokenRedirectStaysOnThisServer(t *testing.T) {
	tok := RandomToken()
	_, base := newTestServer(t, Config{Token: tok})
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, p := range []string{"//evil.example/", "///evil.example/x", "/%2Fevil.example/", `/\evil.example/`, "/%5Cevil.example/", "/#/queues"} {
		req, err := http.NewRequest(http.MethodGet, base+"/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.URL.Opaque = "//" + req.URL.Host + p + "?a=1&token=" + tok
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		loc := res.Header.Get("Location")
		u, err := url.Parse(loc)
		if res.StatusCode != http.StatusSeeOther || err != nil || u.Host != "" || strings.HasPrefix(loc, "//") || strings.HasPrefix(loc, `/\`) ||
			strings.Contains(loc, tok) || !strings.HasPrefix(loc, "/") || !strings.Contains(loc, "a=1") {
			t.Errorf("path %s: %d, Location %q", p, res.StatusCode, loc)
		}
	}
}

// TestChosenMessagesAreExactlyThose ticks one message whose ID another
// message names as its original ID (failure metadata is whatever was sent:
// a forged copy, or a job SQS redrove with its ID besides the copy the
// runtime dead-lettered): the dry run, the replay and the body shown are
// of the message chosen only.
func TestChosenMessagesAreExactlyThose(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	send := func(body, origID string) string {
		fail := sqsworker.Failure{Error: "no", ErrorClass: "validation", Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: origID}
		attrs, _ := fail.AddTo(nil)
		return f.Send(dlqURL, body, withAttributes(attrs))
	}
	chosen := send(`{"chosen":true}`, "orig-1")
	send(`{"other":true}`, chosen)
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true})
	for range 3 { // whichever the scan reads first
		code, body := get(t, base+"/api/dlq/message?queue=jobs-dlq&id="+chosen, nil)
		if code != http.StatusOK || !strings.Contains(body, `chosen\":true`) {
			t.Fatalf("body of the chosen message: %d %s", code, body)
		}
	}
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}
	code, body := post(t, base+"/api/dlq/plan", `{"queue":"jobs-dlq","ids":["`+chosen+`"]}`, hdr)
	var p planResponse
	if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil {
		t.Fatalf("plan: %d %s", code, body)
	}
	if len(p.Result.Messages) != 1 || p.Result.Messages[0].MessageID != chosen {
		t.Fatalf("dry run of one chosen message: %s", body)
	}
	code, body = post(t, base+"/api/dlq/replay", `{"planId":"`+p.PlanID+`"}`, hdr)
	if code != http.StatusAccepted {
		t.Fatalf("replay: %d %s", code, body)
	}
	localtest.Eventually(t, 30*time.Second, func() bool { v, _, _ := f.Depth(src); return v >= 1 }, "nothing replayed")
	var j job
	localtest.Eventually(t, 30*time.Second, func() bool {
		var m map[string]string
		_ = json.Unmarshal([]byte(body), &m)
		_, jb := get(t, base+"/api/jobs/"+m["jobId"], nil)
		return json.Unmarshal([]byte(jb), &j) == nil && j.Done
	}, "the replay did not end")
	if v, _, _ := f.Depth(src); v != 1 || j.Result == nil || j.Result.Moved != 1 {
		t.Errorf("replay of one chosen message: %d in the source queue, result %+v, error %q", v, j.Result, j.Error)
	}
}

// TestPlanIsBounded checks that a dry run of the filtered set of a
// dead-letter queue larger than ScanMax plans ScanMax messages and says
// that it stopped there (a plan of a whole large queue is as large as it,
// for the page to show, and its replay matches each message against every
// ID of it); its replay moves exactly those.
func TestPlanIsBounded(t *testing.T) {
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	for i := range 12 {
		fail := sqsworker.Failure{Error: "no", ErrorClass: "validation", Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: fmt.Sprint("orig-", i)}
		attrs, _ := fail.AddTo(nil)
		f.Send(dlqURL, `{}`, withAttributes(attrs))
	}
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true, ScanMax: 5})
	hdr := map[string]string{"X-CSRF-Token": csrfOf(t, base)}
	code, body := post(t, base+"/api/dlq/plan", `{"queue":"jobs-dlq","filter":{"classes":["validation"]}}`, hdr)
	var p planResponse
	if err := json.Unmarshal([]byte(body), &p); code != http.StatusOK || err != nil {
		t.Fatalf("plan: %d %s", code, body)
	}
	if len(p.Result.Messages) != 5 || !p.Result.LimitHit {
		t.Fatalf("dry run of 12 with ScanMax 5: %d messages, limit reached %v", len(p.Result.Messages), p.Result.LimitHit)
	}
	code, body = post(t, base+"/api/dlq/replay", `{"planId":"`+p.PlanID+`"}`, hdr)
	if code != http.StatusAccepted {
		t.Fatalf("replay: %d %s", code, body)
	}
	var started map[string]string
	_ = json.Unmarshal([]byte(body), &started)
	var j job
	localtest.Eventually(t, 30*time.Second, func() bool {
		_, jb := get(t, base+"/api/jobs/"+started["jobId"], nil)
		return json.Unmarshal([]byte(jb), &j) == nil && j.Done
	}, "the replay did not end")
	moved := map[string]bool{}
	for _, m := range j.Result.Messages {
		moved[m.MessageID] = true
	}
	for _, m := range p.Result.Messages {
		if !moved[m.MessageID] {
			t.Errorf("planned message %s not moved", m.MessageID)
		}
	}
	if v, _, _ := f.Depth(src); v != 5 || len(moved) != 5 {
		t.Errorf("replay: %d in the source queue, %d moved", v, len(moved))
	}
}

// TestNoReplayStartsAfterServe checks that a replay confirmed by a
// request still under way when Serve ended (its shutdown waits 10 seconds
// for requests, not for ever) is refused, rather than started by a
// goroutine that Serve no longer waits for.
func TestNoReplayStartsAfterServe(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	fail := sqsworker.Failure{Error: "no", ErrorClass: "validation", Attempts: 3, FailedAt: time.Now(), SourceQueue: src, MessageID: "orig-1"}
	attrs, _ := fail.AddTo(nil)
	f.Send(dlqURL, `{}`, withAttributes(attrs))
	s, err := New(Config{SQS: f, Stats: noStats, AllowActions: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := s.Handler()
	call := func(path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
		req.Host = "127.0.0.1:8080"
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-CSRF-Token", s.csrf)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	rec := call("/api/dlq/plan", `{"queue":"jobs-dlq"}`)
	var p planResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &p); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("plan: %d %s", rec.Code, rec.Body)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Serve(ctx, ln); err != nil {
		t.Fatal(err)
	}
	if rec := call("/api/dlq/replay", `{"planId":"`+p.PlanID+`"}`); rec.Code != http.StatusServiceUnavailable {
		t.Errorf("replay after Serve: %d %s", rec.Code, rec.Body)
	}
	s.jobsWG.Wait()
	if v, fl, _ := f.Depth(dlqURL); v+fl != 1 {
		t.Errorf("dead-letter queue holds %d", v+fl)
	}
}

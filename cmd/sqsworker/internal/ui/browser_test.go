package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/chromedp/chromedp"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// UpdateScreenshotsEnv, set to a non-empty value, makes the browser test
// write its screenshots to docs/ui/ (the README links them) instead of a
// temporary directory.
const updateScreenshotsEnv = "SQSWORKER_UPDATE_SCREENSHOTS"

// chromiumPath finds Debian's chromium (or $SQSWORKER_CHROMIUM). Without
// it the test skips, or fails in CI.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SQSWORKER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no Chromium: install Debian's chromium package (scripts/install-chromium.sh, which `make test` runs), or set SQSWORKER_CHROMIUM"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// classError is a handler error with an error class of its own.
type classError struct{ class, text string }

func (e classError) Error() string      { return e.text }
func (e classError) ErrorClass() string { return e.class }

// statsOf reads the figures of queues as `sqsworker ui` does, for a test:
// the queue and the dead-letter queue of its redrive policy.
func statsOf(c *sqs.Client, qs ...localtest.Queue) func(context.Context) ([]QueueStats, error) {
	return func(ctx context.Context) ([]QueueStats, error) {
		var out []QueueStats
		read := func(url string) (v, f, d int, err error) {
			a, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{
				types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
				types.QueueAttributeNameApproximateNumberOfMessagesDelayed}})
			if err != nil {
				return 0, 0, 0, err
			}
			n := func(k string) int { i, _ := strconv.Atoi(a.Attributes[k]); return i }
			return n("ApproximateNumberOfMessages"), n("ApproximateNumberOfMessagesNotVisible"), n("ApproximateNumberOfMessagesDelayed"), nil
		}
		for _, q := range qs {
			v, f, d, err := read(q.URL)
			if err != nil {
				return nil, err
			}
			s := QueueStats{Queue: name(q.URL), URL: q.URL, Visible: v, InFlight: f, Delayed: d}
			if q.DLQURL != "" {
				v, f, d, err := read(q.DLQURL)
				if err != nil {
					return nil, err
				}
				s.DLQ = &DLQStats{Queue: name(q.DLQURL), URL: q.DLQURL, MaxReceiveCount: 2, Depth: v + f + d}
			}
			out = append(out, s)
		}
		return out, nil
	}
}

func name(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

// deadLetter runs the real worker on q until it has dead-lettered every
// job (a body and the error its handler returns), then stops it. It
// returns the jobs' message IDs by body.
func deadLetter(t *testing.T, c *sqs.Client, q localtest.Queue, jobs map[string]error) map[string]string {
	t.Helper()
	w, err := worker.New(c, worker.Config{
		QueueURL: q.URL, WaitTime: time.Second, Host: "browser-test",
		Backoff: sqsworker.ExponentialBackoff{Jitter: func() float64 { return 0 }},
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			return jobs[m.Body]
		}))
	}()
	ids := map[string]string{}
	for body := range jobs {
		out, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(body),
			MessageAttributes: map[string]types.MessageAttributeValue{"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[body] = aws.ToString(out.MessageId)
	}
	localtest.Eventually(t, 90*time.Second, func() bool { return w.Stats().DeadLettered >= int64(len(jobs)) },
		"the worker dead-lettered %d of %d jobs", w.Stats().DeadLettered, len(jobs))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 60*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.DLQURL)
		return v == len(jobs) && f == 0 && d == 0
	}, "the dead-letter queue does not hold the %d jobs", len(jobs))
	return ids
}

// TestBrowserReplay drives the dashboard in headless Chromium against the
// local stack: the real worker dead-letters jobs with different error
// classes; the page lists them with their reasons, filters one class, runs
// the dry run, confirms; then replays one message chosen by hand to another
// queue. The SDK finds exactly those messages moved, the last still
// dead-lettered, and the audit log has them, as its page shows. A second
// source queue shares the dead-letter queue: the purge panel names both.
func TestBrowserReplay(t *testing.T) {
	localtest.Require(t)
	chromium := chromiumPath(t)

	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 5 * time.Second})
	jobs := map[string]error{
		`{"order":1}`: sqsworker.Permanent(classError{"validation", "order 1: no customer"}),
		`{"order":2}`: sqsworker.Permanent(classError{"validation", "order 2: negative total"}),
		`{"order":3}`: classError{"upstream-unavailable", "payments API answered 503"},
		`{"order":4}`: sqsworker.Permanent(classError{"unsupported-currency", "currency XTS is not supported"}),
	}
	ids := deadLetter(t, c, q, jobs)
	// A second source queue sends its dead letters to the same queue: the
	// purge panel names both, since a purge deletes the dead letters of
	// both.
	payments := newSharingSource(t, c, q.DLQARN)

	auditPath, recorder := newAuditLog(t, "browser-test")
	logs := &syncBuffer{}
	s, err := New(Config{
		Addr: "127.0.0.1:0", AllowActions: true, SQS: c, Stats: statsOf(c, q),
		Audit: recorder, AuditFile: auditPath,
		SampleInterval: time.Second, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sctx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(sctx, ln) }()
	t.Cleanup(func() {
		stopServer()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	base := "http://" + ln.Addr().String() + "/"

	shots := t.TempDir()
	if os.Getenv(updateScreenshotsEnv) != "" {
		shots = filepath.Join("..", "..", "..", "..", "docs", "ui")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", shots)

	bctx := startBrowser(t, chromium)
	ctx, cancel := context.WithTimeout(bctx, 4*time.Minute)
	defer cancel()

	shot := func(file string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tgt)
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, file), png, 0o644)
		})
	}
	p := &page{t: t, ctx: ctx, timeout: 2 * time.Minute, log: logs}
	until, run, text := p.until, p.run, textOf

	// The queues page: the dead-letter queue's depth, and charts once two
	// readings are in.
	run("queues page",
		chromedp.Navigate(base+"#/queues"),
		until(fmt.Sprintf(`(() => { const r = document.querySelector('#queue-table tr[data-queue=%q]');
			return !!r && r.querySelector('.dlq-depth').textContent === "4" && r.querySelectorAll('svg.spark path.line').length === 2; })()`, name(q.URL))),
		shot("queues.png"))

	// The dead-letter queue, from the link: every job with its reason, and
	// the purge panel naming both sources before it asks for the name.
	var table, actions string
	run("dead-letter page",
		chromedp.Click(chromedp.CSS(`a.dlq-link`)),
		until(`document.querySelectorAll('#messages tbody tr').length === 4`),
		text(`#messages`, &table),
		text(`#actions`, &actions),
		shot("dlq.png"))
	if want := sharedPurgeWarning(q.DLQURL, 4, q.URL, payments) + " Type the queue name to confirm."; !strings.Contains(actions, want) {
		t.Errorf("the purge panel does not say %q:\n%s", want, actions)
	}
	for _, want := range []string{"validation", "upstream-unavailable", "unsupported-currency", "order 1: no customer",
		"order 2: negative total", "payments API answered 503", "currency XTS is not supported", name(q.URL)} {
		if !strings.Contains(table, want) {
			t.Errorf("the listing lacks %q:\n%s", want, table)
		}
	}
	for body := range jobs {
		if strings.Contains(table, body) {
			t.Errorf("the listing shows the body %s", body)
		}
	}

	// A body, on click.
	var body string
	run("message body",
		chromedp.Click(chromedp.CSS(`#messages tr[data-class="unsupported-currency"] button.show`)),
		until(`!!document.querySelector('#message-body')`),
		text(`#message-body`, &body),
		shot("message.png"))
	if body != `{"order":4}` {
		t.Errorf("body shown: %q", body)
	}

	// Filter one class, dry run, confirm.
	var plan string
	run("filter and dry run",
		// Choose the class in the select, as a person would.
		until(`(() => { const s = document.querySelector('#f-class');
			if (![...s.options].some(o => o.value === "validation")) return false;
			s.value = "validation"; s.dispatchEvent(new Event("change")); return true; })()`),
		chromedp.Click(chromedp.CSS(`#apply`)),
		until(`(() => { const rs = [...document.querySelectorAll('#messages tbody tr')];
			return rs.length === 2 && rs.every(r => r.dataset.class === "validation"); })()`),
		chromedp.Click(chromedp.CSS(`#plan-filtered`)),
		until(`document.querySelectorAll('#plan-table tbody tr').length === 2`),
		text(`#plan-panel`, &plan),
		shot("plan.png"))
	if !strings.Contains(plan, "→ "+name(q.URL)) || !strings.Contains(plan, "2 message(s) would move") || strings.Contains(plan, "does not send its dead letters") {
		t.Errorf("dry run:\n%s", plan)
	}
	// Nothing moved by the dry run.
	if v, f, _ := localtest.Depth(t, c, q.URL); v+f != 0 {
		t.Errorf("the dry run moved messages: source queue has %d visible, %d in flight", v, f)
	}
	var result string
	run("confirm",
		chromedp.Click(chromedp.CSS(`#confirm-replay`)),
		until(`!!document.querySelector('#replay-result')`),
		text(`#replay-result`, &result),
		// The list is read again: the moved messages are gone.
		until(`!!document.querySelector('#list-summary') && document.querySelectorAll('#messages tbody tr').length === 0`),
		shot("replay.png"))
	if !strings.Contains(result, "Moved 2 message(s)") {
		t.Fatalf("replay result: %q\nserver log:\n%s", result, logs.String())
	}

	// Then one message chosen by hand, to another queue.
	other := localtest.NewQueue(t, c, localtest.QueueOptions{})
	var plan2, result2 string
	run("select one, replay to another queue",
		until(`(() => { const s = document.querySelector('#f-class'); s.value = ""; return true; })()`),
		chromedp.Click(chromedp.CSS(`#apply`)),
		until(`document.querySelectorAll('#messages tbody tr').length === 2`),
		chromedp.Click(chromedp.CSS(`#messages tr[data-class="upstream-unavailable"] input.pick`)),
		until(`!document.querySelector('#plan-selected').disabled`),
		chromedp.SendKeys(chromedp.CSS(`#replay-to`), name(other.URL)),
		chromedp.Click(chromedp.CSS(`#plan-selected`)),
		until(`document.querySelectorAll('#plan-table tbody tr').length === 1`),
		text(`#plan-panel`, &plan2),
		chromedp.Click(chromedp.CSS(`#confirm-replay`)),
		until(`!!document.querySelector('#replay-result')`),
		text(`#replay-result`, &result2),
		until(`!!document.querySelector('#list-summary') && document.querySelectorAll('#messages tbody tr').length === 1`))
	if !strings.Contains(plan2, "→ "+name(other.URL)) || !strings.Contains(plan2, name(other.URL)+" does not send its dead letters to "+name(q.DLQURL)) ||
		!strings.Contains(result2, "Moved 1 message(s)") {
		t.Errorf("selected replay: plan\n%s\nresult %q", plan2, result2)
	}

	// Exactly the two validation jobs are back in their source queue, the
	// chosen one in the other queue; the last is still dead-lettered.
	localtest.Eventually(t, 60*time.Second, func() bool {
		v, _, _ := localtest.Depth(t, c, q.URL)
		o, _, _ := localtest.Depth(t, c, other.URL)
		dv, df, _ := localtest.Depth(t, c, q.DLQURL)
		return v == 2 && o == 1 && dv+df == 1
	}, "the queues do not hold the replayed messages")
	bodies := func(url string) []string {
		var out []string
		for _, m := range localtest.ReceiveAll(t, c, url, 2*time.Second, 60*time.Second) {
			out = append(out, aws.ToString(m.Body))
		}
		slices.Sort(out)
		return out
	}
	if got, want := bodies(q.URL), []string{`{"order":1}`, `{"order":2}`}; !slices.Equal(got, want) {
		t.Errorf("source queue holds %q, want %q", got, want)
	}
	if got, want := bodies(other.URL), []string{`{"order":3}`}; !slices.Equal(got, want) {
		t.Errorf("the other queue holds %q, want %q", got, want)
	}
	if got, want := bodies(q.DLQURL), []string{`{"order":4}`}; !slices.Equal(got, want) {
		t.Errorf("dead-letter queue holds %q, want %q", got, want)
	}

	// The audit log has them, and its page shows them.
	recs := readAuditFile(t, auditPath)
	var replayed []string
	for _, r := range recs {
		if r.Action == dlq.ActionReplayStart {
			continue
		}
		if r.Action != dlq.ActionReplay || r.Caller != "browser-test" || !r.Deleted || !strings.Contains(r.CallerNote, "sqsworker ui") {
			t.Errorf("audit record %+v", r)
		}
		switch r.OriginalMessageID {
		case ids[`{"order":3}`]:
			if r.Destination != other.URL {
				t.Errorf("audit record of the chosen message: %+v", r)
			}
		default:
			if r.Destination != q.URL || !strings.Contains(r.Filter, `error-class="validation"`) {
				t.Errorf("audit record of a filtered message: %+v", r)
			}
		}
		replayed = append(replayed, r.OriginalMessageID)
	}
	slices.Sort(replayed)
	want := []string{ids[`{"order":1}`], ids[`{"order":2}`], ids[`{"order":3}`]}
	slices.Sort(want)
	if !slices.Equal(replayed, want) {
		t.Errorf("audit log replayed %v, want %v", replayed, want)
	}
	var auditText string
	run("audit page",
		chromedp.Click(chromedp.CSS(`#nav-audit`)),
		until(`document.querySelectorAll('#audit-table tbody tr[data-action="replay"]').length === 3`),
		text(`#audit-table`, &auditText),
		shot("audit.png"))
	for _, id := range want {
		if !strings.Contains(auditText, id) {
			t.Errorf("the audit page lacks %s:\n%s", id, auditText)
		}
	}
	for body := range jobs {
		if strings.Contains(logs.String(), body) {
			t.Errorf("the server log has the body %s", body)
		}
	}

	// Started without --allow-actions, the same page offers no action.
	_, roBase := newTestServer(t, Config{SQS: c, Stats: statsOf(c, q), AuditFile: auditPath})
	var note string
	run("read-only page",
		chromedp.Navigate(roBase+"/#/dlq/"+name(q.DLQURL)),
		// (The SDK's reads above hold the last message: the list is empty.)
		until(`!!document.querySelector('#list-summary')`),
		text(`#actions`, &note))
	var buttons int
	run("read-only buttons", chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) (err error) {
		buttons, err = chromedp.Evaluate[int](`document.querySelectorAll('#plan-filtered, #plan-selected, #purge').length`)(ctx, tgt)
		return err
	}))
	if buttons != 0 || !strings.Contains(note, "Read-only") {
		t.Errorf("read-only page: %d action buttons, note %q", buttons, note)
	}
}

// newAuditLog opens an audit log of the test's own, closed when the test
// ends: its path, and the dlq.Audit that records to it as caller.
func newAuditLog(t *testing.T, caller string) (string, dlq.Audit) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := dlq.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = log.Close() })
	return path, dlq.Audit{Record: log.Record, Caller: caller}
}

func readAuditFile(t *testing.T, path string) []dlq.AuditRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dlq.AuditRecord
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r dlq.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return out
}

// page drives a browser tab in a test: its steps fail the test with the
// page's text.
type page struct {
	t       *testing.T
	ctx     context.Context // the tab's
	timeout time.Duration   // how long until waits for a condition
	log     fmt.Stringer    // when set, a failed step prints it as the server's log
}

// until waits, up to p.timeout, for a JavaScript condition on the page.
func (p *page) until(cond string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
		_, err := chromedp.Poll[bool](cond, chromedp.WithPollingTimeout(p.timeout), chromedp.WithPollingInterval(100*time.Millisecond))(ctx, tgt)
		return err
	})
}

// run does a step's actions, failing the test with the page's text (and
// the server's log) when one fails.
func (p *page) run(step string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		text, _ := chromedp.Run(p.ctx, chromedp.Text(chromedp.CSS("body")))
		if p.log != nil {
			p.t.Fatalf("%s: %v\npage text:\n%s\nserver log:\n%s", step, err, text, p.log.String())
		}
		p.t.Fatalf("%s: %v\npage text:\n%s", step, err, text)
	}
}

// textOf reads the text of the element sel into *dst.
func textOf(sel string, dst *string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) (err error) {
		*dst, err = chromedp.Text(chromedp.CSS(sel))(ctx, tgt)
		return err
	})
}

// startBrowser starts headless Chromium for a test, stopped when it ends.
func startBrowser(t *testing.T, chromium string) context.Context {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true))
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(cancelBrowser)
	// The browser lives as long as the context of the first run: start it
	// without a deadline.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("starting %s: %v", chromium, err)
	}
	return bctx
}

// TestBrowserHostileFields fills every field a dead letter carries (error
// text and class, source queue, original ID, attribute, body), a queue's
// name and an audit record with HTML that would run script if the page
// inserted it as HTML. Every page shows it as text: no element comes from
// it, no script runs. (The Content-Security-Policy would block inline
// handlers anyway: the test looks for the elements, not only the effect.)
func TestBrowserHostileFields(t *testing.T) {
	chromium := chromiumPath(t)
	const xss = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script><b id=bold>b</b>`
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	fail := sqsworker.Failure{Error: "error " + xss, ErrorClass: "class" + xss, Attempts: 3, FirstReceived: time.Now().Add(-time.Minute),
		FailedAt: time.Now(), SourceQueue: "queue" + xss, MessageID: "id" + xss, Host: "host" + xss}
	attrs, _ := fail.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "attr" + xss}})
	f.Send(dlqURL, "body"+xss, withAttributes(attrs))
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	rec, _ := json.Marshal(dlq.AuditRecord{Action: dlq.ActionReplay, DLQ: dlqURL + xss, Destination: src + xss, OriginalMessageID: "id" + xss,
		NewMessageID: "new" + xss, Filter: "filter" + xss, Caller: "caller" + xss, CallerNote: "note" + xss, Note: "note" + xss, Time: time.Now()})
	if err := os.WriteFile(auditPath, append(rec, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	stats := func(context.Context) ([]QueueStats, error) {
		return []QueueStats{{Queue: "queue" + xss, URL: src, DLQ: &DLQStats{Queue: "jobs-dlq", URL: dlqURL, Depth: 1}},
			{Queue: "other", URL: dlqURL + "x", DLQ: &DLQStats{Queue: "dlq" + xss, Missing: true}}}, nil
	}
	_, base := newTestServer(t, Config{SQS: f, Stats: stats, AllowActions: true, AuditFile: auditPath})

	ctx, cancel := context.WithTimeout(startBrowser(t, chromium), 2*time.Minute)
	defer cancel()
	p := &page{t: t, ctx: ctx, timeout: time.Minute}
	wait, step := p.until, p.run
	// clean checks that nothing of the payload became an element or ran,
	// and that sel shows it as text.
	clean := func(page, sel string) {
		t.Helper()
		var got struct {
			Pwned    bool   `json:"pwned"`
			Elements int    `json:"elements"`
			Scripts  int    `json:"scripts"`
			Text     string `json:"text"`
		}
		err := chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) (err error) {
			got, err = chromedp.Evaluate[struct {
				Pwned    bool   `json:"pwned"`
				Elements int    `json:"elements"`
				Scripts  int    `json:"scripts"`
				Text     string `json:"text"`
			}](fmt.Sprintf(`({pwned: window.__pwned !== undefined, elements: document.querySelectorAll('img, #bold').length,
				scripts: document.scripts.length, text: document.querySelector(%q).textContent})`, sel))(ctx, tgt)
			return err
		}))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		if got.Pwned || got.Elements != 0 || got.Scripts != 1 || !strings.Contains(got.Text, xss) {
			t.Errorf("%s: script ran %v, %d elements and %d scripts from the data, %s shows %q", page, got.Pwned, got.Elements, got.Scripts-1, sel, got.Text)
		}
	}

	step("queues", chromedp.Navigate(base+"/#/queues"), wait(`!!document.querySelector('#queue-table')`))
	clean("queues", "#queue-table")
	step("dead letters", chromedp.Navigate(base+"/#/dlq"), wait(`document.querySelectorAll('main table tbody tr').length === 1`))
	step("dead letters of jobs-dlq", chromedp.Navigate(base+"/#/dlq/jobs-dlq"), wait(`document.querySelectorAll('#messages tbody tr').length === 1`))
	clean("listing", "#messages")
	clean("class filter", "#f-class")
	step("message", chromedp.Click(chromedp.CSS(`#messages button.show`)), wait(`!!document.querySelector('#message-body')`))
	clean("message body", "#message-body")
	clean("message", "#message-detail")
	step("dry run", chromedp.Click(chromedp.CSS(`#plan-filtered`)), wait(`!!document.querySelector('#plan-panel')`))
	clean("dry run", "#plan-panel")
	step("audit", chromedp.Navigate(base+"/#/audit"), wait(`document.querySelectorAll('#audit-table tbody tr').length === 1`))
	clean("audit", "#audit-table")
	step("dead letters, another queue", chromedp.Navigate(base+"/#/dlq/"+url.PathEscape(xss)), wait(`!!document.querySelector('#list-error')`))
	clean("unknown queue", "#dlq-title")
}

// TestInstallScriptFindsWhatTheTestFinds runs scripts/install-chromium.sh
// where the browser test would find a browser (chromium-browser,
// google-chrome or $SQSWORKER_CHROMIUM) but apt-get cannot install
// Debian's chromium, in CI: the script must not fail `make test` there,
// nor say that the browser tests will skip.
func TestInstallScriptFindsWhatTheTestFinds(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "..", "..", "scripts", "install-chromium.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, env string }{{"chromium-browser", ""}, {"google-chrome", ""}, {"", "SQSWORKER_CHROMIUM="}} {
		bin := t.TempDir()
		for _, tool := range []string{"bash", "id", "env", "awk"} {
			if p, err := exec.LookPath(tool); err == nil {
				if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
					t.Fatal(err)
				}
			}
		}
		env := []string{"PATH=" + bin, "CI=1"}
		browser := filepath.Join(bin, "some-browser")
		if tc.name != "" {
			browser = filepath.Join(bin, tc.name)
		} else {
			env = append(env, tc.env+browser)
		}
		if err := os.WriteFile(browser, []byte("#!/bin/sh\necho Chromium 1.0\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bash, script)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Contains(string(out), "will skip") {
			t.Errorf("with %s: %v\n%s", filepath.Base(browser), err, out)
		}
	}
}

// TestBrowserWithAccessToken opens the address printed with the access
// token: the page loads without the token in its address, its API calls
// pass on the cookie, which its script cannot read; without the token the
// server answers 401.
func TestBrowserWithAccessToken(t *testing.T) {
	chromium := chromiumPath(t)
	tok := RandomToken()
	stats := func(context.Context) ([]QueueStats, error) { return []QueueStats{{Queue: "jobs", URL: "u"}}, nil }
	_, base := newTestServer(t, Config{Token: tok, Stats: stats})
	ctx, cancel := context.WithTimeout(startBrowser(t, chromium), 2*time.Minute)
	defer cancel()
	var loc, cookie string
	err := chromedp.Do(ctx,
		chromedp.Navigate(base+"/?token="+tok),
		chromedp.Func(func(ctx context.Context, tgt *chromedp.Target) error {
			_, err := chromedp.Poll[bool](`!!document.querySelector('#queue-table tr[data-queue="jobs"]')`, chromedp.WithPollingTimeout(time.Minute))(ctx, tgt)
			if err != nil {
				return err
			}
			if loc, err = chromedp.Evaluate[string](`location.href`)(ctx, tgt); err != nil {
				return err
			}
			cookie, err = chromedp.Evaluate[string](`document.cookie`)(ctx, tgt)
			return err
		}))
	if err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		t.Fatalf("page with the token: %v\n%s", err, page)
	}
	if strings.Contains(loc, tok) || cookie != "" {
		t.Errorf("address %q, cookie readable by script %q", loc, cookie)
	}
	if code, _ := get(t, base+"/api/queues", nil); code != http.StatusUnauthorized {
		t.Errorf("without the token: %d", code)
	}
}

// TestBrowserNavigationFromAnotherSite has another site's page send the
// browser to the dashboard's address of a dead-letter queue (a link, or
// location = …: frames are refused, a navigation is not). The page opens,
// but does not list the queue (a listing receives its messages) until the
// operator asks; typed in the address bar, it does.
func TestBrowserNavigationFromAnotherSite(t *testing.T) {
	chromium := chromiumPath(t)
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+queueARN(t, f, dlqURL)+`","maxReceiveCount":3}`)
	f.Send(dlqURL, `{}`)
	stats := func(context.Context) ([]QueueStats, error) {
		return []QueueStats{{Queue: "jobs", URL: src, DLQ: &DLQStats{Queue: "jobs-dlq", URL: dlqURL, Depth: 1}}}, nil
	}
	_, base := newTestServer(t, Config{SQS: f, Stats: stats})
	// The dashboard as localhost, the other site as 127.0.0.1: two sites.
	target := strings.Replace(base, "127.0.0.1", "localhost", 1) + "/#/dlq/jobs-dlq"
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!doctype html><script>location.href = %q;</script>`, target)
	}))
	defer evil.Close()
	ctx, cancel := context.WithTimeout(startBrowser(t, chromium), 2*time.Minute)
	defer cancel()
	p := &page{t: t, ctx: ctx, timeout: time.Minute}
	poll, step := p.until, p.run
	step("from another site", chromedp.Navigate(evil.URL), poll(`location.host.startsWith("localhost") && !!document.querySelector('#cross-site-note')`),
		// Time for a listing the page would have asked for.
		chromedp.Sleep(time.Second))
	if n := f.Calls("ReceiveMessage"); n != 0 {
		t.Errorf("a navigation from another site listed the queue: %d ReceiveMessage calls", n)
	}
	step("the operator asks", chromedp.Click(chromedp.CSS(`#cross-site-note a`)), poll(`document.querySelectorAll('#messages tbody tr').length === 1`))
	// Typed in the address bar, the address lists at once.
	step("typed address", chromedp.Navigate("about:blank"), chromedp.Navigate(target), poll(`document.querySelectorAll('#messages tbody tr').length === 1`))
}

// TestBrowserTruncatedListing drives the page over a dead-letter queue
// larger than the scan limit (the fake SQS, ScanMax 3, 8 messages): the
// listing says it shows 3 of about 8 and offers to read more; the dry run
// of the filtered says it stopped at 3 and that only those move, and so
// does its confirm button and the replay's result; reading up to 20 then
// lists the 5 left, with no notice, and a body of one of them opens.
func TestBrowserTruncatedListing(t *testing.T) {
	chromium := chromiumPath(t)
	f := sqstest.NewFake()
	src, _ := fakeDLQ(t, f, 8, func(int) string { return "validation" })
	_, base := newTestServer(t, Config{SQS: f, AllowActions: true, ScanMax: 3})
	ctx, cancel := context.WithTimeout(startBrowser(t, chromium), 3*time.Minute)
	defer cancel()
	p := &page{t: t, ctx: ctx, timeout: time.Minute}
	until, run, text := p.until, p.run, textOf

	var notice, scope string
	run("truncated listing",
		chromedp.Navigate(base+"/#/dlq/jobs-dlq"),
		until(`document.querySelectorAll('#messages tbody tr').length === 3 && !!document.querySelector('#list-truncated')`),
		text(`#list-truncated`, &notice),
		text(`#plan-scope`, &scope))
	if !strings.Contains(notice, "Shown 3 of about 8 messages in jobs-dlq") || !strings.Contains(notice, "sqsworker dlq ls jobs-dlq --max N") || !strings.Contains(notice, "Read up to") {
		t.Errorf("listing notice: %q", notice)
	}
	if !strings.Contains(scope, "read only the first 3 messages") {
		t.Errorf("dry run scope note: %q", scope)
	}

	var limit, confirm, result string
	run("truncated dry run and its replay",
		chromedp.Click(chromedp.CSS(`#plan-filtered`)),
		until(`document.querySelectorAll('#plan-table tbody tr').length === 3`),
		text(`#plan-limit`, &limit),
		text(`#confirm-replay`, &confirm),
		chromedp.Click(chromedp.CSS(`#confirm-replay`)),
		until(`!!document.querySelector('#replay-notice')`),
		text(`#last-result`, &result))
	if !strings.Contains(limit, "confirming moves only these 3") || confirm != "Confirm: move only these 3 message(s)" {
		t.Errorf("dry run: notice %q, button %q", limit, confirm)
	}
	if !strings.Contains(result, "Moved 3 message(s)") || !strings.Contains(result, "Only the 3 messages of the dry run were acted on") {
		t.Errorf("replay result: %q", result)
	}
	if v, _, _ := f.Depth(src); v != 3 {
		t.Errorf("source queue holds %d, want the 3 planned", v)
	}

	var body string
	run("read more",
		until(`document.querySelectorAll('#messages tbody tr').length === 3 && !!document.querySelector('#scan-max')`),
		until(`(() => { document.querySelector('#scan-max').value = "20"; return true; })()`),
		chromedp.Click(chromedp.CSS(`#read-more`)),
		until(`document.querySelectorAll('#messages tbody tr').length === 5 && !document.querySelector('#list-truncated') && !document.querySelector('#plan-scope')`),
		chromedp.Click(chromedp.CSS(`#messages tbody tr:last-child button.show`)),
		until(`!!document.querySelector('#message-body')`),
		text(`#message-body`, &body))
	if !strings.HasPrefix(body, `{"job":`) {
		t.Errorf("body shown: %q", body)
	}
}

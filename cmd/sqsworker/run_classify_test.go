package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// An endpoint that refuses every request alike (credentials it does not
// take: 401 for all) is an operator's mistake, not the jobs': no message
// is dead-lettered, each is tried again (and the circuit breaker opens).
// Before, every 4xx was permanent, and the whole queue went to the
// dead-letter queue in seconds.
func TestRunHTTPEndpointRefusalIsNoJobsFault(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 5 * time.Second})
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "bad token", http.StatusUnauthorized) // an expired token
	}))
	defer srv.Close()
	localtest.Send(t, c, q.URL, "", "job-1", "job-2")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", srv.URL+"/jobs", "--wait", "1s")
	// Each job tried past its first 401, which dead-lettered it before.
	localtest.Eventually(t, 2*time.Minute, func() bool { return requests.Load() >= 4 },
		"the jobs were not tried again; stderr:\n%s", p.stderr.String())
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered for the endpoint's 401, want none", v+f+d)
	}
	if stderr := p.stderr.String(); !strings.Contains(stderr, "refused the request, not the job") {
		t.Errorf("stderr does not say why:\n%s", stderr)
	}
}

// A command that exits 75 (EX_TEMPFAIL: what the job needs is down) for
// longer than the queue's receives allow is not dead-lettered: it waits,
// counted toward the circuit breaker, and runs once the dependency is
// back. Before, exit 75 was an ordinary failure with a delay, and an
// outage of a few minutes sent every job to the dead-letter queue.
func TestRunExitTempFailOutlastsTheReceives(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 5 * time.Second})
	dir := t.TempDir()
	attempts, done := filepath.Join(dir, "attempts"), filepath.Join(dir, "done")
	script := fmt.Sprintf(`echo x >> %s
[ "$(wc -l < %s)" -ge 4 ] || exit 75
cat >> %s`, attempts, attempts, done)
	localtest.Send(t, c, q.URL, "", "report")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--wait", "1s", "--retry-after", "1s", "--", "sh", "-c", script)
	localtest.Eventually(t, 2*time.Minute, func() bool { return len(fileLines(t, done)) == 1 },
		"the job never ran once the dependency was back; attempts %d; stderr:\n%s", len(fileLines(t, attempts)), p.stderr.String())
	emptyEventually(t, c, q.URL)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered during the outage, want none", v+f+d)
	}
}

// sources is a queue's dead-letter sources as SQS lists them, or its error;
// and, for the listing that stands in when it cannot, the queues and their
// redrive policies (by URL), or the listing's error.
type sources struct {
	urls     []string
	err      error
	policies map[string]string
	listErr  error
}

func (s sources) ListDeadLetterSourceQueues(context.Context, *sqs.ListDeadLetterSourceQueuesInput, ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error) {
	return &sqs.ListDeadLetterSourceQueuesOutput{QueueUrls: s.urls}, s.err
}

func (s sources) ListQueues(context.Context, *sqs.ListQueuesInput, ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error) {
	if s.listErr != nil {
		return nil, s.listErr
	}
	out := &sqs.ListQueuesOutput{}
	for u := range s.policies {
		out.QueueUrls = append(out.QueueUrls, u)
	}
	return out, nil
}

func (s sources) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	u := aws.ToString(in.QueueUrl)
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{
		"QueueArn":      "arn:aws:sqs:eu-west-1:123456789012:" + queueName(u),
		"RedrivePolicy": s.policies[u],
	}}, nil
}

// run refuses a queue that is another's dead-letter queue (an operator
// pointing it at the wrong queue would run the dead-lettered jobs there),
// naming the source and the fix; a queue that is none runs. Where SQS
// refuses ListDeadLetterSourceQueues (the local SQS lacks it; a role may
// not have it), the redrive policies of the queues it lists stand in;
// when neither can say, it runs, and says so. Before, a refused
// ListDeadLetterSourceQueues let any queue run, silently.
func TestRunRefusesADeadLetterQueue(t *testing.T) {
	const base = "https://sqs.eu-west-1.amazonaws.com/123456789012/"
	const dlqURL = base + "orders-dlq"
	ctx := context.Background()
	var warn strings.Builder
	err := refuseDeadLetterQueue(ctx, sources{urls: []string{base + "orders"}}, dlqURL, &warn)
	if err == nil || !strings.Contains(err.Error(), "orders-dlq is the dead-letter queue of orders") ||
		!strings.Contains(err.Error(), "sqsworker dlq replay orders-dlq") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a dead-letter queue: %v", err)
	}
	if err := refuseDeadLetterQueue(ctx, sources{}, dlqURL, &warn); err != nil {
		t.Errorf("a queue that is no dead-letter queue: %v", err)
	}
	invalid := &smithy.GenericAPIError{Code: "InvalidAction", Message: "Unknown action: ListDeadLetterSourceQueues"}
	policies := map[string]string{
		base + "orders":      `{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:orders-dlq","maxReceiveCount":5}`,
		base + "billing":     `{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:billing-dlq","maxReceiveCount":5}`,
		dlqURL:               "",
		base + "billing-dlq": "",
	}
	err = refuseDeadLetterQueue(ctx, sources{err: invalid, policies: policies}, dlqURL, &warn)
	if err == nil || !strings.Contains(err.Error(), "orders-dlq is the dead-letter queue of orders:") {
		t.Errorf("a dead-letter queue found by the redrive policies: %v", err)
	}
	if err := refuseDeadLetterQueue(ctx, sources{err: invalid, policies: policies}, base+"orders", &warn); err != nil {
		t.Errorf("a queue that no redrive policy names: %v", err)
	}
	if warn.Len() != 0 {
		t.Errorf("warned: %s", warn.String())
	}
	// Throttled: no scan of every queue for it; it says so, and runs.
	throttled := &smithy.GenericAPIError{Code: "RequestThrottled"}
	if err := refuseDeadLetterQueue(ctx, sources{err: throttled, policies: policies}, dlqURL, &warn); err != nil {
		t.Errorf("throttled: %v, want it run", err)
	}
	if !strings.Contains(warn.String(), "RequestThrottled") {
		t.Errorf("throttled, and the warning is %q", warn.String())
	}
	warn.Reset()
	if err := refuseDeadLetterQueue(ctx, sources{err: invalid, listErr: errors.New("AccessDenied")}, dlqURL, &warn); err != nil {
		t.Errorf("neither way can say: %v, want it run", err)
	}
	if !strings.Contains(warn.String(), "warning: could not check that orders-dlq is no dead-letter queue") || !strings.Contains(warn.String(), "AccessDenied") {
		t.Errorf("neither way can say, and the warning is %q", warn.String())
	}
}

// An application that crashes on one job (here, it closes the connection
// with no answer, every time), on the emulator with maxReceiveCount 2 and
// Concurrency 4, while other jobs keep coming: once reset, the job runs
// alone; it reaches the dead-letter queue, with its class, once its
// request was reset alone crashLimit times with answers to the others in
// between, and each other job is handled once. Before, every reset was taken for the application
// down: the job was never dead-lettered, and went on crashing the
// application for ever.
func TestRunHTTPJobThatCrashesTheApplication(t *testing.T) {
	t.Parallel()
	r := runPoisonAmongOthers(t, 300*time.Millisecond, 0, 5*time.Second)
	if class := aws.ToString(r.dead.MessageAttributes[sqsworker.AttrFailureClass].StringValue); class != "connection-reset" {
		t.Errorf("dead-lettered with the class %q, want connection-reset", class)
	}
	if !strings.Contains(r.stderr, "crashes the application") {
		t.Errorf("stderr does not say why the job failed:\n%s", r.stderr)
	}
	t.Logf("poison sent %d times, %d other jobs", r.poisonSent, len(r.goods))
}

// How resets count against a job: not among other requests (a crash
// resets them all, whichever job caused it), not with no answer from the
// application since the job's last reset, or since the start for its first
// (it may be down, behind a proxy that accepts for it); a job answered
// starts anew; a job reset is suspect, to run alone; and the jobs counted
// stay bounded over a worker's life.
func TestCrashCounts(t *testing.T) {
	var c crashCounts
	alone := func(key string) int {
		m := c.done(c.start())
		return c.reset(key, m)
	}
	answer := func(key string) {
		c.done(c.start())
		c.answered(key)
	}
	if n := alone("p"); n != 0 {
		t.Errorf("a first reset counted: %d", n)
	}
	if n := alone("p"); n != 0 {
		t.Errorf("a reset with no answer in between counted: %d", n)
	}
	answer("other")
	if n := alone("p"); n != 1 {
		t.Errorf("a reset alone after an answer counted %d, want 1", n)
	}
	answer("other")
	m := c.start()
	other := c.start() // a second request under way
	m = c.done(m)
	c.done(other)
	if n := c.reset("p", m); n != 1 {
		t.Errorf("a reset among other requests counted: %d, want 1", n)
	}
	answer("other")
	m = c.start() // alone when it starts, but another starts before it ends
	other = c.start()
	c.done(other)
	m = c.done(m)
	if n := c.reset("p", m); n != 1 {
		t.Errorf("a reset with another request started meanwhile counted: %d, want 1", n)
	}
	answer("p")
	if c.suspect("p") {
		t.Errorf("a job answered is still suspect")
	}
	if n := alone("p"); n != 1 {
		t.Errorf("a reset alone after the job's own answer counted %d, want 1: its count starts anew", n)
	}
	if !c.suspect("p") {
		t.Errorf("a job reset is not suspect: its next request would not run alone")
	}
	for i := range crashKeys + 100 {
		alone(fmt.Sprint("job-", i))
	}
	if n := len(c.jobs); n != crashKeys {
		t.Errorf("%d jobs counted, want at most %d", n, crashKeys)
	}
}

// A crash resets every request under way, not just that of the job that
// caused it: on the emulator with maxReceiveCount 2 and Concurrency 4, the
// jobs in flight beside a job that crashes the application (here, closes
// every connection under way) are not dead-lettered, however often the
// crashes catch them, and each is answered in the end. (This run's crashes
// catch no job three times, so it passes with the first rule, which
// counted every reset of a job in a row, too: TestCrashCounts shows the
// rule.)
func TestRunHTTPCrashSparesTheJobsInFlight(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 5 * time.Second})
	var mu sync.Mutex
	crash := make(chan struct{})
	answered := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		crashed := crash
		if string(b) == "poison" {
			close(crash) // the application dies, and every request with it
			crash = make(chan struct{})
		}
		mu.Unlock()
		if string(b) != "poison" {
			select {
			case <-time.After(2 * time.Second):
				mu.Lock()
				answered[string(b)] = true
				mu.Unlock()
				return
			case <-crashed:
			}
		}
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
		}
	}))
	defer srv.Close()
	var goods []string
	for i := range 12 {
		goods = append(goods, fmt.Sprint("good-", i))
	}
	localtest.Send(t, c, q.URL, "", append([]string{"poison"}, goods...)...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", srv.URL, "--wait", "1s", "--concurrency", "4")
	localtest.Eventually(t, 120*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(answered) == len(goods)
	}, "%d of %d jobs answered", len(answered), len(goods))
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}
	poisoned := false
	for _, m := range localtest.ReceiveAll(t, c, q.DLQURL, time.Second, time.Minute) {
		if b := aws.ToString(m.Body); b != "poison" {
			t.Errorf("%s dead-lettered: it was only in flight when another job crashed the application", b)
		} else {
			poisoned = true
		}
	}
	t.Logf("the job that crashes the application dead-lettered by the time the others were answered: %v", poisoned)
}

// A request that got no answer in time (here, the response headers within
// 2 s), to an application that goes on with the job after its client left:
// the job's retry comes no sooner than the 2 s the request was given, for
// as long again, not after the usual backoff (a second or two) beside the
// run still under way; on the emulator, maxReceiveCount 3. It is a failure
// all the same, dead-lettered, with its class, when its attempts run out.
func TestRunHTTPTimeoutRetriedNoSoonerThanItsTime(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 30 * time.Second})
	var mu sync.Mutex
	var starts []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		time.Sleep(3 * time.Second) // goes on after its client left
	}))
	defer srv.Close()
	localtest.Send(t, c, q.URL, "", "slow")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", srv.URL, "--wait", "1s", "--response-header-timeout", "2s")
	dead := dlqBodies(t, c, q, 1)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	if class := attr(dead["slow"], sqsworker.AttrFailureClass); class != "String:timeout" {
		t.Errorf("error class %s, want timeout", class)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(starts) != 3 {
		t.Fatalf("%d requests, want 3", len(starts))
	}
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 4*time.Second {
			t.Errorf("request %d came %s after the one before, want 4s or more: its 2s, and as long again", i+1, gap.Round(time.Millisecond))
		}
	}
}

// A job that crashes its application while slower jobs keep every one of
// the 4 slots busy (Concurrency 4, jobs of 1 s arriving every 150 ms), on
// the emulator with maxReceiveCount 2: once reset, the job waits to run
// alone, and reaches the dead-letter queue; the others are each answered
// once. Counting only the resets of requests that happened to run alone,
// it never ran alone, and crashed the application for ever.
func TestRunHTTPJobThatCrashesABusyApplication(t *testing.T) {
	t.Parallel()
	r := runPoisonAmongOthers(t, 150*time.Millisecond, time.Second, 30*time.Second)
	t.Logf("poison sent %d times, %d other jobs", r.poisonSent, len(r.goods))
}

// A job that crashes its application with no other job to run, on the
// emulator with maxReceiveCount 2: with --http-health, the application's
// answer there after each reset tells the crash from the application down,
// and the job reaches the dead-letter queue. Without it, no answer comes
// between the resets, and the job was retried for ever.
func TestRunHTTPJobThatCrashesTheApplicationAlone(t *testing.T) {
	t.Parallel()
	r := runPoisonAmongOthers(t, 0, 0, 5*time.Second, "--http-health", "/healthz")
	if class := attr(r.dead, sqsworker.AttrFailureClass); class != "String:connection-reset" {
		t.Errorf("error class %s, want connection-reset", class)
	}
	t.Logf("poison sent %d times", r.poisonSent)
}

// poisonRun is what runPoisonAmongOthers saw.
type poisonRun struct {
	dead       types.Message // the poison job's dead-letter copy
	goods      []string      // the other jobs sent
	poisonSent int           // the poison job's requests
	stderr     string
}

// runPoisonAmongOthers runs sqsworker run --http, Concurrency 4, and the
// flags in extra, on a queue of the emulator (maxReceiveCount 2,
// visibility timeout vis) that holds a job, "poison", on which the
// application closes the connection with no answer, while other jobs
// arrive every interval (none with 0), each taking the application work to
// answer. The application answers GET /healthz with 200. It waits for the poison job in the
// dead-letter queue, alone there, and for the queue to empty, and checks
// that every other job was answered once.
func runPoisonAmongOthers(t *testing.T, every, work, vis time.Duration, extra ...string) poisonRun {
	t.Helper()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: vis})
	var mu sync.Mutex
	answered := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/healthz" {
			return
		}
		b, _ := io.ReadAll(r.Body)
		if string(b) == "poison" {
			mu.Lock()
			answered["poison"]++ // sent, never answered
			mu.Unlock()
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close() // the application dies on it
			}
			return
		}
		time.Sleep(work)
		mu.Lock()
		answered[string(b)]++
		mu.Unlock()
	}))
	defer srv.Close()
	localtest.Send(t, c, q.URL, "", "poison")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", append([]string{"run", q.URL, "--http", srv.URL, "--wait", "1s", "--concurrency", "4"}, extra...)...)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", p.stderr.String())
		}
	})
	stopSending := func() []string { return nil }
	if every > 0 {
		stopSending = sendEvery(ctx, c, q.URL, every)
	}
	dead := dlqBodies(t, c, q, 1)
	r := poisonRun{goods: stopSending()}
	m, ok := dead["poison"]
	if !ok {
		t.Fatalf("dead-lettered %v, want the job that crashes the application", dead)
	}
	r.dead = m
	emptyEventually(t, c, q.URL)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 1 {
		t.Errorf("%d messages dead-lettered, want the poison alone", v+f+d)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range r.goods {
		if answered[b] != 1 {
			t.Errorf("%s answered %d times, want 1", b, answered[b])
		}
	}
	r.poisonSent, r.stderr = answered["poison"], p.stderr.String()
	return r
}

// sendEvery sends a job to the queue at url every interval, its bodies
// good-0, good-1 and on, until the func it returns is called; that returns
// the bodies sent.
func sendEvery(ctx context.Context, c *sqs.Client, url string, every time.Duration) (stop func() []string) {
	ctx, cancel := context.WithCancel(ctx)
	sent := make(chan []string, 1)
	go func() {
		var goods []string
		defer func() { sent <- goods }()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-time.After(every):
			}
			b := fmt.Sprint("good-", i)
			if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &b}); err == nil {
				goods = append(goods, b)
			}
		}
	}()
	return func() []string { cancel(); return <-sent }
}

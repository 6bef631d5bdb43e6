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

// sources is a queue's dead-letter sources as SQS lists them, or its error.
type sources struct {
	urls []string
	err  error
}

func (s sources) ListDeadLetterSourceQueues(context.Context, *sqs.ListDeadLetterSourceQueuesInput, ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error) {
	return &sqs.ListDeadLetterSourceQueuesOutput{QueueUrls: s.urls}, s.err
}

// run refuses a queue that is another's dead-letter queue (an operator
// pointing it at the wrong queue would run the dead-lettered jobs there),
// naming the source and the fix; a queue that is none, or that SQS cannot
// say of (the local SQS lacks ListDeadLetterSourceQueues), runs.
func TestRunRefusesADeadLetterQueue(t *testing.T) {
	const dlqURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/orders-dlq"
	err := refuseDeadLetterQueue(context.Background(), sources{urls: []string{"https://sqs.eu-west-1.amazonaws.com/123456789012/orders"}}, dlqURL)
	if err == nil || !strings.Contains(err.Error(), "orders-dlq is the dead-letter queue of orders") ||
		!strings.Contains(err.Error(), "sqsworker dlq replay orders-dlq") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a dead-letter queue: %v", err)
	}
	if err := refuseDeadLetterQueue(context.Background(), sources{}, dlqURL); err != nil {
		t.Errorf("a queue that is no dead-letter queue: %v", err)
	}
	if err := refuseDeadLetterQueue(context.Background(), sources{err: errors.New("InvalidAction")}, dlqURL); err != nil {
		t.Errorf("an endpoint that cannot say: %v", err)
	}
}

// An application that crashes on one job (here, it closes the connection
// with no answer, every time), on the emulator with maxReceiveCount 2: the
// job reaches the dead-letter queue, with its class, after crashLimit
// resets in a row, and the other jobs are each handled once. Before, every
// reset was taken for the application down: the job was never
// dead-lettered, and went on crashing the application for ever.
func TestRunHTTPJobThatCrashesTheApplication(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 5 * time.Second})
	var mu sync.Mutex
	got := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[string(b)]++
		mu.Unlock()
		if string(b) == "poison" {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close() // the application dies on it
			}
		}
	}))
	defer srv.Close()
	localtest.Send(t, c, q.URL, "", "poison", "good-1", "good-2", "good-3")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := startCLI(t, ctx, "", "run", q.URL, "--http", srv.URL, "--wait", "1s")
	dead := dlqBodies(t, c, q, 1)
	m, ok := dead["poison"]
	if !ok {
		t.Fatalf("dead-lettered %v, want the job that crashes the application", dead)
	}
	if class := aws.ToString(m.MessageAttributes[sqsworker.AttrFailureClass].StringValue); class != "connection-reset" {
		t.Errorf("dead-lettered with the class %q, want connection-reset", class)
	}
	emptyEventually(t, c, q.URL)
	cancel()
	if code := p.wait(t); code != 0 {
		t.Errorf("exit %d after cancel", code)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, b := range []string{"good-1", "good-2", "good-3"} {
		if got[b] != 1 {
			t.Errorf("%s: %d requests, want 1", b, got[b])
		}
	}
	if got["poison"] < crashLimit {
		t.Errorf("poison: %d requests, want at least %d before it was taken for the job's fault", got["poison"], crashLimit)
	}
	if !strings.Contains(p.stderr.String(), "crashes the application") {
		t.Errorf("stderr does not say why the job failed:\n%s", p.stderr.String())
	}
	t.Logf("poison sent %d times", got["poison"])
}

// The resets counted per job stay bounded over a worker's life: past
// crashKeys jobs, one is forgotten for each new one; a job answered is
// forgotten at once.
func TestCrashCountsBounded(t *testing.T) {
	var c crashCounts
	for i := range crashKeys + 100 {
		c.add(fmt.Sprint("job-", i))
	}
	if n := len(c.n); n != crashKeys {
		t.Errorf("%d jobs counted, want at most %d", n, crashKeys)
	}
	key := fmt.Sprint("job-", crashKeys+99)
	if n := c.add(key); n != 2 {
		t.Errorf("the last job's second reset counted as %d", n)
	}
	c.answered(key)
	if n := c.add(key); n != 1 {
		t.Errorf("a reset after an answer counted as %d, want 1", n)
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

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

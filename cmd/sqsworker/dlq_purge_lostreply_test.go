package main

import (
	"context"
	"encoding/json"
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
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// purgeLimitingProxy forwards SQS calls to the local endpoint, and answers
// a PurgeQueue of a queue purged less than 60 seconds ago as SQS does
// (403 PurgeQueueInProgress), which the emulator does not. It returns the
// proxy's address, host:port on the loopback interface. While *throttle is
// above 0, it answers a PurgeQueue RequestThrottled instead (counting it
// down), which SQS does not apply.
func purgeLimitingProxy(t *testing.T, throttle *atomic.Int32) string {
	t.Helper()
	var mu sync.Mutex
	purged := map[string]time.Time{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.PurgeQueue" && throttle.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.Header().Set("X-Amzn-Query-Error", "RequestThrottled;Sender")
			w.WriteHeader(http.StatusForbidden)
			_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#RequestThrottled","message":"Rate exceeded"}`)
			return
		}
		if r.Header.Get("X-Amz-Target") == "AmazonSQS.PurgeQueue" {
			var in struct{ QueueUrl string }
			_ = json.Unmarshal(body, &in)
			mu.Lock()
			last, seen := purged[in.QueueUrl]
			if !seen || time.Since(last) >= 60*time.Second {
				purged[in.QueueUrl] = time.Now()
			}
			mu.Unlock()
			if seen && time.Since(last) < 60*time.Second {
				w.Header().Set("Content-Type", "application/x-amz-json-1.0")
				w.Header().Set("X-Amzn-Query-Error", "AWS.SimpleQueueService.PurgeQueueInProgress;Sender")
				w.WriteHeader(http.StatusForbidden)
				_, _ = io.WriteString(w, `{"__type":"com.amazonaws.sqs#PurgeQueueInProgress","message":"Only one PurgeQueue operation on the queue is allowed every 60 seconds."}`)
				return
			}
		}
		resp, err := passOn(r.Context(), r, body, false)
		answer(w, resp, err)
	}))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().String()
}

// The reply to PurgeQueue is lost: SQS purged the queue, the SDK retries
// the request and SQS answers PurgeQueueInProgress (one purge a minute).
// The purge the operator asked for was done: the command says so and exits
// 0, and the audit log holds the purge and no refusal. (It said "not
// purged: purged less than 60 seconds ago", exited 1 and recorded a
// purge-failed, of a queue it had purged.) A second purge the operator asks
// for within the minute is refused, and says why.
func TestDlqPurgeLostReply(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "a", "b", "c")
	waitVisible(t, c, q.DLQURL, 3)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")

	p, err := faultproxy.New(purgeLimitingProxy(t, new(atomic.Int32)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var purges atomic.Int32
	losePurgeReply := func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("losePurgeReply",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if _, ok := in.Parameters.(*sqs.PurgeQueueInput); ok && purges.Add(1) == 1 {
						if err := p.LoseReplies(1); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	purge := func() (code int, stdout, stderr string) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cli := startCLIWith(t, ctx, strings.NewReader(""), []rootOption{withSQSOptions(losePurgeReply)},
			"dlq", "purge", q.DLQURL, "--yes", "--audit", audit)
		code = cli.wait(t)
		return code, cli.stdout.String(), cli.stderr.String()
	}

	code, stdout, stderr := purge()
	if st := p.Stats(); st.LostReplies != 1 {
		t.Fatalf("the proxy lost %d replies, want 1", st.LostReplies)
	}
	waitVisible(t, c, q.DLQURL, 0)
	if code != 0 || !strings.Contains(stdout, "purged "+queueName(q.DLQURL)) || strings.Contains(stderr, "not purged") ||
		!strings.Contains(stderr, "the queue is being purged") {
		t.Errorf("a purge whose reply was lost: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var actions []string
	for _, l := range readAudit(t, audit) {
		actions = append(actions, l.Action)
	}
	if len(actions) != 1 || actions[0] != dlq.ActionPurge {
		t.Errorf("audit actions %q, want one %q", actions, dlq.ActionPurge)
	}

	// The operator purges again within the minute: refused, and said so.
	localtest.Send(t, c, q.DLQURL, "", "d")
	waitVisible(t, c, q.DLQURL, 1)
	code, stdout, stderr = purge()
	if code != 1 || stdout != "" || !strings.Contains(stderr, "not purged") || !strings.Contains(stderr, "purged less than 60 seconds ago") {
		t.Errorf("a second purge within the minute: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	waitVisible(t, c, q.DLQURL, 1)
}

// Another operator purged the queue a moment ago; this purge's first
// attempt is throttled (SQS applies nothing), and the SDK's retry is
// answered PurgeQueueInProgress: that purge is the other one, not this
// one. The command says the queue was not purged, exits 1 and records the
// refusal. (It said "purged", exited 0 and recorded none, taking the other
// purge for its own, as when its own reply is lost.)
func TestDlqPurgeRetryMeetsAnotherPurge(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	throttle := new(atomic.Int32)
	addr := purgeLimitingProxy(t, throttle)
	viaProxy := func(o *sqs.Options) { o.BaseEndpoint = aws.String("http://" + addr) }
	other := localtest.NewSQS(t, viaProxy)
	if _, err := other.PurgeQueue(context.Background(), &sqs.PurgeQueueInput{QueueUrl: aws.String(q.DLQURL)}); err != nil {
		t.Fatalf("the other operator's purge: %v", err)
	}
	localtest.Send(t, c, q.DLQURL, "", "sent after the other purge")
	waitVisible(t, c, q.DLQURL, 1)
	throttle.Store(1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := startCLIWith(t, ctx, strings.NewReader(""), []rootOption{withSQSOptions(viaProxy)},
		"dlq", "purge", q.DLQURL, "--yes", "--audit", audit)
	code := cli.wait(t)
	stdout, stderr := cli.stdout.String(), cli.stderr.String()
	if throttle.Load() >= 0 {
		t.Fatalf("the purge's first attempt was not throttled (%d left)", throttle.Load())
	}
	if code != 1 || strings.Contains(stdout, "purged") || !strings.Contains(stderr, "not purged") || !strings.Contains(stderr, "purged less than 60 seconds ago") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	var actions []string
	for _, l := range readAudit(t, audit) {
		actions = append(actions, l.Action)
	}
	if len(actions) != 2 || actions[0] != dlq.ActionPurge || actions[1] != dlq.ActionPurgeFailed {
		t.Errorf("audit actions %q, want %q then %q", actions, dlq.ActionPurge, dlq.ActionPurgeFailed)
	}
	waitVisible(t, c, q.DLQURL, 1)
}

// Ctrl-C while SQS holds the PurgeQueue call unanswered (a proxy swallowing
// it): the purge may have been applied. The command says so and exits 1,
// and the audit log's purge-failed record, written though the command was
// interrupted, says so too. (Both said only that the purge failed, as if
// SQS had refused it, of a queue that may be empty.)
func TestDlqPurgeInterruptedDuringTheCall(t *testing.T) {
	t.Parallel()
	c, q, _ := newDLQ(t, localtest.QueueOptions{})
	localtest.Send(t, c, q.DLQURL, "", "a", "b")
	waitVisible(t, c, q.DLQURL, 2)
	audit := filepath.Join(t.TempDir(), "audit.jsonl")
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	sent := make(chan struct{})
	var once sync.Once
	swallowPurge := func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("swallowPurge",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if _, ok := in.Parameters.(*sqs.PurgeQueueInput); ok {
						if err := p.Blackhole(); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
						once.Do(func() { close(sent) })
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	cli := startCLIWith(t, ctx, strings.NewReader(""), []rootOption{withSQSOptions(swallowPurge)},
		"dlq", "purge", q.DLQURL, "--yes", "--audit", audit)
	select {
	case <-sent:
	case <-time.After(time.Minute):
		t.Fatalf("no PurgeQueue call; stderr:\n%s", cli.stderr.String())
	}
	time.Sleep(time.Second) // the call under way, unanswered
	interrupt()
	code := cli.wait(t)
	if code == 0 || !strings.Contains(cli.stderr.String(), "may have purged the queue all the same") {
		t.Errorf("interrupted during the call: exit %d\nstderr: %s", code, cli.stderr.String())
	}
	var actions, notes []string
	for _, l := range readAudit(t, audit) {
		actions, notes = append(actions, l.Action), append(notes, l.Note)
	}
	if len(actions) != 2 || actions[0] != dlq.ActionPurge || actions[1] != dlq.ActionPurgeFailed ||
		!strings.Contains(notes[1], "may have purged the queue all the same") {
		t.Errorf("audit actions %q, notes %q: want a purge, then a purge-failed saying it may have been applied", actions, notes)
	}
}

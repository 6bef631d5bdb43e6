package dlq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// sendDeadLetters sends n copies with failure metadata to a dead-letter
// queue, as the runtimes dead-letter messages, naming source as their
// source queue.
func sendDeadLetters(t *testing.T, c *sqs.Client, dlqURL, source string, n int) {
	t.Helper()
	for start := 0; start < n; start += 10 {
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(dlqURL)}
		for i := start; i < min(start+10, n); i++ {
			attrs, _ := sqsworker.Failure{ErrorClass: "c", Error: "boom", Attempts: 1, SourceQueue: source,
				MessageID: fmt.Sprint("orig-", i), FailedAt: time.Now()}.AddTo(nil)
			in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(fmt.Sprint(i)), MessageBody: aws.String(fmt.Sprint("job ", i)), MessageAttributes: sdkAttributes(attrs),
			})
		}
		out, err := c.SendMessageBatch(context.Background(), in)
		if err != nil || len(out.Failed) > 0 {
			t.Fatalf("sending dead letters: %v %v", err, out)
		}
	}
}

// depth is the visible and in-flight counts of a queue.
func depth(t *testing.T, c *sqs.Client, u string) (visible, inFlight int) {
	t.Helper()
	v, f, _ := localtest.Depth(t, c, u)
	return v, f
}

// On the emulator, which lacks ListDeadLetterSourceQueues, the sources come
// from the listed queues' redrive policies, and the fallback is noted. A
// source queue and a queue that no queue names are refused before anything
// is received from them.
func TestOpenOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	jobs := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	plain := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, jobs.URL, "", "live 1", "live 2")
	localtest.Send(t, c, plain.URL, "", "live 3")
	ctx := context.Background()
	for _, tc := range []struct{ url, want string }{
		{jobs.URL, "it has a redrive policy of its own (its messages go to " + queueName(jobs.DLQURL) + " after 3 receives)"},
		{plain.URL, "no queue names it as its dead-letter queue (redrive policies of the listed queues)"},
	} {
		_, err := Open(ctx, c, tc.url, Config{})
		if !errors.Is(err, ErrNotDeadLetterQueue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", queueName(tc.url), err)
		}
	}
	// Nothing was received: the messages were never in flight.
	for _, m := range localtest.ReceiveAll(t, c, jobs.URL, time.Second, 30*time.Second) {
		if n := m.Attributes["ApproximateReceiveCount"]; n != "1" {
			t.Errorf("a message of the source queue was received %s times", n)
		}
	}
	q, err := Open(ctx, c, jobs.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	if q.SourcesFrom != SourcesFound || len(q.Sources) != 1 || queueName(q.Sources[0]) != queueName(jobs.URL) ||
		!strings.Contains(strings.Join(q.Notes, "\n"), "this SQS endpoint does not support ListDeadLetterSourceQueues (ListDeadLetterSourceQueues answered InvalidAction") {
		t.Errorf("%+v", q)
	}
}

// A receive whose response is lost on the way (the connection reset once
// SQS answered) hid the messages SQS handed it. The SDK's own retry would
// make the scan see 65 of 75 and say nothing; the scan retries itself,
// waits for them, and sees all 75.
func TestScanLostResponseOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	sendDeadLetters(t, c, q.DLQURL, q.URL, 75)
	pc, p := losingClient(t, 3, func(in any) bool { _, ok := in.(*sqs.ReceiveMessageInput); return ok })
	dq, err := Open(context.Background(), pc, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The visibility must outlast the scan: held messages whose visibility
	// runs out come back, and after a few comebacks the scan takes the
	// queue for read. 2 s was too short on a loaded CI machine (65 of 75
	// seen once); 6 s still keeps the wait for the lost receive short.
	res, err := dq.Scan(context.Background(), ScanConfig{Visibility: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c75 := res.Coverage
	if p.Stats().LostReplies != 1 || res.Scanned != 75 || c75.Seen != 75 || c75.Approximate != 75 || c75.LostReceives != 1 || c75.Shortfall() != "" {
		t.Errorf("lost %d replies; scanned %d, %+v, %q", p.Stats().LostReplies, res.Scanned, c75, c75.Shortfall())
	}
	if v, f := depth(t, c, q.DLQURL); v != 75 || f != 0 {
		t.Errorf("after the scan: %d visible, %d in flight", v, f)
	}
}

// Forged failure metadata on the emulator: a message in orders' dead-letter
// queue that names billing (whose redrive policy names its own dead-letter
// queue) is marked unverified, and a replay leaves it in place.
func TestReplayForgedSourceOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	billing := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	sendDeadLetters(t, c, orders.DLQURL, orders.URL, 2)
	sendDeadLetters(t, c, orders.DLQURL, billing.URL, 1)
	ctx := context.Background()
	q, err := Open(ctx, c, orders.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Scan(ctx, ScanConfig{})
	if err != nil {
		t.Fatal(err)
	}
	unverified := 0
	for _, m := range res.Messages {
		if m.Failure.SourceQueue == billing.URL {
			unverified++
			if !strings.Contains(m.Unverified, "source queue "+queueName(billing.URL)+" does not send its dead letters to "+q.Name) {
				t.Errorf("forged: %q", m.Unverified)
			}
		} else if !m.Verified() {
			t.Errorf("worker copy unverified: %q", m.Unverified)
		}
	}
	if unverified != 1 || len(res.Messages) != 3 {
		t.Errorf("%d messages, %d unverified", len(res.Messages), unverified)
	}
	rr, err := q.Replay(ctx, ReplayConfig{})
	if err != nil || rr.Moved != 2 || rr.Refused != 1 {
		t.Fatalf("%v, %+v", err, rr)
	}
	if v, f := depth(t, c, billing.URL); v+f != 0 {
		t.Errorf("billing received %d message(s)", v+f)
	}
	if v, f := depth(t, c, orders.URL); v != 2 || f != 0 {
		t.Errorf("orders holds %d visible, %d in flight", v, f)
	}
}

// A purge on the emulator is recorded before it is sent; a source queue's
// is refused. Message move tasks are reported missing.
func TestPurgeAndRedriveOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	jobs := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	localtest.Send(t, c, jobs.URL, "", "live")
	sendDeadLetters(t, c, jobs.DLQURL, jobs.URL, 4)
	ctx := context.Background()
	if _, err := Open(ctx, c, jobs.URL, Config{}); !errors.Is(err, ErrNotDeadLetterQueue) {
		t.Fatalf("source queue opened: %v", err)
	}
	q, err := Open(ctx, c, jobs.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	log, err := OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	if _, err := q.PlanRedrive(ctx, RedriveConfig{}); !errors.Is(err, ErrUnsupported) ||
		!strings.Contains(err.Error(), "this SQS endpoint does not support message move tasks (ListMessageMoveTasks answered InvalidAction") {
		t.Errorf("redrive plan: %v", err)
	}
	if err := q.Purge(ctx, PurgeConfig{Audit: Audit{Record: log.Record, Caller: "arn:aws:iam::000000000000:user/op"}}); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 60*time.Second, func() bool { v, f := depth(t, c, jobs.DLQURL); return v+f == 0 }, "the dead-letter queue was not purged")
	if v, _ := depth(t, c, jobs.URL); v != 1 {
		t.Errorf("the source queue holds %d", v)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); strings.Count(s, "\n") != 1 || !strings.Contains(s, `"action":"purge"`) || !strings.Contains(s, `"approximateMessages":4`) ||
		!strings.Contains(s, `"caller":"arn:aws:iam::000000000000:user/op"`) || !strings.Contains(s, `"dlq":"`+jobs.DLQURL+`"`) {
		t.Errorf("audit log: %s", s)
	}
}

// losingClient returns an SQS client that sends through a fault proxy of
// the test's own, and the proxy, which loses the reply to the nth request
// whose input lose matches: SQS applies it, the client sees its connection
// reset.
func losingClient(t *testing.T, nth int32, lose func(in any) bool) (*sqs.Client, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var seen atomic.Int32
	return localtest.NewSQS(t, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("loseReply",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if lose(in.Parameters) && seen.Add(1) == nth {
						if err := p.LoseReplies(1); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}), p
}

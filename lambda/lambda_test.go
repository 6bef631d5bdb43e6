package lambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

var update = flag.Bool("update", false, "rewrite the golden responses in testdata")

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// jobs is the test handler: the body says what to do.
var jobs = sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
	verb, arg, _ := strings.Cut(m.Body, ":")
	switch verb {
	case "ok":
		return nil
	case "fail":
		return errors.New("upstream unavailable")
	case "permanent":
		return sqsworker.Permanent(errors.New("malformed job"))
	case "panic":
		panic("job exploded")
	case "retry-after":
		d, _ := time.ParseDuration(arg)
		return sqsworker.RetryAfter(d, errors.New("rate limited"))
	case "sleep":
		d, _ := time.ParseDuration(arg)
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	var v any
	if err := json.Unmarshal([]byte(m.Body), &v); err != nil {
		return sqsworker.Permanent(fmt.Errorf("body is not JSON: %w", err))
	}
	return nil
})

// newFake creates the queues the testdata events come from: orders and
// orders.fifo, each with a dead-letter queue and maxReceiveCount 3.
func newFake(vis string) *sqstest.Fake {
	f := sqstest.NewFake()
	f.CreateQueue("orders-dlq", nil)
	f.CreateQueue("orders", map[string]string{"VisibilityTimeout": vis,
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, sqstest.QueueARN("orders-dlq"))})
	f.CreateQueue("orders-dlq.fifo", map[string]string{"FifoQueue": "true"})
	f.CreateQueue("orders.fifo", map[string]string{"VisibilityTimeout": vis, "FifoQueue": "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, sqstest.QueueARN("orders-dlq.fifo"))})
	return f
}

func newHandler(t *testing.T, h sqsworker.Handler, cfg lambda.Config) lambda.HandlerFunc {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	fn, err := lambda.NewHandler(h, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

func failedIDs(r events.SQSEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// The golden events of testdata/lambda give the golden responses: standard,
// FIFO and malformed records.
func TestGoldenEvents(t *testing.T) {
	for _, name := range []string{"standard", "fifo", "malformed"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "testdata", "lambda", name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var ev events.SQSEvent
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			f := newFake("30")
			// No heartbeat: the events' records are in no queue, and an
			// extension SQS refuses would leave them unrun, lost (see
			// TestLostWhileWaitingNotRun), as soon as the heartbeat's
			// first round came before their handlers.
			fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true})
			resp, err := fn(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := json.MarshalIndent(resp, "", "  ")
			golden := filepath.Join("..", "testdata", "lambda", name+".response.json")
			if *update {
				if err := os.WriteFile(golden, append(got, '\n'), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if strings.TrimSpace(string(got)) != strings.TrimSpace(string(want)) {
				t.Errorf("response:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// received sends bodies to a fake queue and receives them, as the event
// source mapping would, into an event.
func received(t testing.TB, f *sqstest.Fake, name string, bodies ...string) events.SQSEvent {
	t.Helper()
	url := sqstest.QueueURL(name)
	for _, b := range bodies {
		if strings.HasSuffix(name, ".fifo") {
			f.Send(url, b, func(in *sqs.SendMessageInput) {
				g, d := "g", fmt.Sprint(time.Now().UnixNano())
				in.MessageGroupId, in.MessageDeduplicationId = &g, &d
			})
		} else {
			f.Send(url, b)
		}
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: 10, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"},
	})
	if err != nil || len(out.Messages) != len(bodies) {
		t.Fatalf("received %d of %d: %v", len(out.Messages), len(bodies), err)
	}
	return sqstest.SQSEvent(sqstest.QueueARN(name), out.Messages)
}

// Failed records come back after their backoff or RetryAfter delay, not
// after the queue's visibility timeout; dead-lettered ones carry metadata.
func TestFailedRecordsGetTheirDelay(t *testing.T) {
	clock := sqstest.NewClock(time.Now())
	f := newFake("300")
	f.Now = clock.Now
	fixed := sqsworker.BackoffFunc(func(int, error) time.Duration { return 20 * time.Second })
	fn := newHandler(t, jobs, lambda.Config{Client: f, Backoff: fixed, DisableHeartbeat: true})
	ev := received(t, f, "orders", "fail", "retry-after:40s", "permanent", "ok")
	resp, err := fn(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 2 || got[0] != ev.Records[0].MessageId || got[1] != ev.Records[1].MessageId {
		t.Fatalf("failures %v", got)
	}
	url := sqstest.QueueURL("orders")
	receive := func() []string {
		out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		var bodies []string
		for _, m := range out.Messages {
			bodies = append(bodies, *m.Body)
		}
		return bodies
	}
	clock.Advance(19 * time.Second)
	if got := receive(); len(got) != 0 {
		t.Errorf("receivable before the backoff delay: %v", got)
	}
	clock.Advance(2 * time.Second)
	if got := receive(); len(got) != 1 || got[0] != "fail" {
		t.Errorf("after 21s: %v, want the failed record", got)
	}
	clock.Advance(20 * time.Second)
	if got := receive(); len(got) != 1 || got[0] != "retry-after:40s" {
		t.Errorf("after 41s: %v, want the RetryAfter record", got)
	}
	if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 1 {
		t.Errorf("dead-letter queue holds %d messages, want 1", v)
	}
}

// A batch in which every record failed returns them all as failures, and no
// error: Lambda must not count the invocation as failed.
func TestAllFailedIsNotAnError(t *testing.T) {
	f := newFake("30")
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true})
	ev := received(t, f, "orders", "fail", "fail", "panic")
	resp, err := fn(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 3 {
		t.Errorf("resp %v, err %v", resp, err)
	}
}

// Records not started before the safety margin are reported failed and
// visible at once; running ones are cancelled with ErrDeadline, and released
// at once too: the adapter cut them short, they did not fail.
func TestDeadlineAwareness(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	var causes []error
	var mu sync.Mutex
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		d, _ := time.ParseDuration(strings.TrimPrefix(m.Body, "sleep:"))
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			mu.Lock()
			causes = append(causes, context.Cause(ctx))
			mu.Unlock()
			return ctx.Err()
		}
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, SafetyMargin: time.Second, DisableHeartbeat: true})
	ev := received(t, f, "orders", "sleep:100ms", "sleep:10s", "sleep:100ms", "sleep:100ms")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 3 {
		t.Fatalf("failures %v, want the long record and the two never started", got)
	}
	if len(causes) != 1 || !errors.Is(causes[0], lambda.ErrDeadline) {
		t.Errorf("causes %v, want one ErrDeadline", causes)
	}
	// The two that never started, and the one cut short, are visible
	// again at once.
	url := sqstest.QueueURL("orders")
	out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if len(out.Messages) != 3 {
		t.Errorf("%d records visible again, want 3", len(out.Messages))
	}
}

// Records run concurrently, at most Concurrency at once.
func TestConcurrencyBound(t *testing.T) {
	f := newFake("30")
	var cur, peak atomic.Int64
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		n := cur.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(30 * time.Millisecond)
		cur.Add(-1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 3, DisableHeartbeat: true})
	ev := received(t, f, "orders", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
	if _, err := fn(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if p := peak.Load(); p != 3 {
		t.Errorf("peak concurrency %d, want 3", p)
	}
}

// The heartbeat keeps a record that outlives the visibility timeout
// invisible.
func TestHeartbeatExtendsLongRecords(t *testing.T) {
	t.Parallel()
	f := newFake("2")
	url := sqstest.QueueURL("orders")
	stolen := make(chan int, 1)
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		time.Sleep(3 * time.Second)
		out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url})
		stolen <- len(out.Messages)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f})
	ev := received(t, f, "orders", "long")
	if _, err := fn(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if n := <-stolen; n != 0 {
		t.Error("record became visible while its handler ran")
	}
	if f.Calls(sqstest.OpChangeMessageVisibilityBatch) == 0 {
		t.Error("no extension made")
	}
}

// An event that is not an SQS event is an error: nothing runs, nothing is
// deleted. A queue whose attributes cannot be read is not: the records run
// with what the configuration says, and the read is tried again next time.
func TestInvocationErrors(t *testing.T) {
	f := newFake("30")
	ran := false
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran = true; return nil })
	fn := newHandler(t, h, lambda.Config{Client: f})
	if _, err := fn(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{Body: "x"}}}); err == nil || !strings.Contains(err.Error(), "no messageId") {
		t.Errorf("record without messageId: %v", err)
	}
	f.FailNext(sqstest.OpGetQueueAttributes, &smithy.GenericAPIError{Code: "AccessDenied", Message: "no"}, 1)
	ev := received(t, f, "orders", "ok")
	if resp, err := fn(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 || !ran {
		t.Errorf("unreadable queue: %v %v, ran %v", resp, err, ran)
	}
	reads := f.Calls(sqstest.OpGetQueueAttributes)
	if resp, err := fn(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("next invocation: %v %v", resp, err)
	}
	if f.Calls(sqstest.OpGetQueueAttributes) == reads {
		t.Error("the attributes were not read again after the failed read")
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := lambda.NewHandler(nil, lambda.Config{Concurrency: -1, SafetyMargin: -time.Second, BatchingWindow: time.Hour})
	for _, want := range []string{"Concurrency -1", "SafetyMargin -1s", "BatchingWindow 1h0m0s", "nil handler"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %q", err, want)
		}
	}
	_, err = lambda.NewHandler(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		lambda.Config{SafetyMargin: 50 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "SafetyMargin 50ms is under 200ms") {
		t.Errorf("a SafetyMargin of 50ms: error %v, want one naming it and the least", err)
	}
}

func TestQueueURLFromARN(t *testing.T) {
	for arn, want := range map[string]string{
		"arn:aws:sqs:eu-west-1:123456789012:jobs":     "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
		"arn:aws-cn:sqs:cn-north-1:123456789012:jobs": "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/jobs",
	} {
		if got, err := lambda.QueueURLFromARN(arn); err != nil || got != want {
			t.Errorf("QueueURLFromARN(%s) = %s, %v", arn, got, err)
		}
	}
	if _, err := lambda.QueueURLFromARN("arn:aws:sns:eu-west-1:1:t"); err == nil {
		t.Error("SNS ARN accepted")
	}
}

package lambda_test

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

const examplePkg = "github.com/sqsworker/sqsworker/cmd/example-lambda"

// receiveN receives exactly n messages from a real queue, as the event
// source mapping would (all attributes), holding them for 30s.
func receiveN(t testing.TB, c *sqs.Client, url string, n int) []types.Message {
	t.Helper()
	msgs := receiveUpTo(t, c, url, n, 30*time.Second)
	if len(msgs) != n {
		t.Fatalf("received %d of %d messages", len(msgs), n)
	}
	return msgs
}

// receiveUpTo receives up to n messages from a real queue, as receiveN
// does, for d at most, and returns those it received.
func receiveUpTo(t testing.TB, c *sqs.Client, url string, n int, d time.Duration) []types.Message {
	t.Helper()
	var msgs []types.Message
	deadline := time.Now().Add(d)
	for len(msgs) < n && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: int32(min(10, n-len(msgs))), WaitTimeSeconds: 1, VisibilityTimeout: 30,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, out.Messages...)
	}
	return msgs
}

// receiveLast receives the one message in the queue at url, makes it
// visible again and receives it once more: its second receive, the last
// one a redrive policy with a maxReceiveCount of 2 allows, which it
// returns.
func receiveLast(t testing.TB, c *sqs.Client, url string) []types.Message {
	t.Helper()
	first := receiveN(t, c, url, 1)
	if _, err := c.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: first[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	last := receiveN(t, c, url, 1)
	if n := last[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Fatalf("receive count %s, want 2", n)
	}
	return last
}

func invoke(t *testing.T, rie *localtest.RIE, ev events.SQSEvent) (int, []byte) {
	t.Helper()
	payload, _ := json.Marshal(ev)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status, body, err := rie.Invoke(ctx, payload)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, rie.Log())
	}
	return status, body
}

func idsOf(msgs []types.Message, bodies ...string) []string {
	var ids []string
	for _, m := range msgs {
		if slices.Contains(bodies, aws.ToString(m.Body)) {
			ids = append(ids, aws.ToString(m.MessageId))
		}
	}
	slices.Sort(ids)
	return ids
}

// The example function, built as a bootstrap and run under the Lambda
// Runtime Interface Emulator, with an event of messages really received from
// the emulated SQS: partial batch response, backoff through visibility, and
// dead-lettering with metadata.
func TestRealInvocationStandard(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg))
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 30 * time.Second})
	localtest.Send(t, sq, q.URL, "", "ok", "fail", "permanent", "panic", "retry-after:4s")
	msgs := receiveN(t, sq, q.URL, 5)
	start := time.Now()
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, msgs))
	var resp events.SQSEventResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
		t.Fatalf("status %d, body %s", status, body)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	slices.Sort(failed)
	if want := idsOf(msgs, "fail", "panic", "retry-after:4s"); !slices.Equal(failed, want) {
		t.Errorf("batchItemFailures %v, want %v", failed, want)
	}
	// The RetryAfter record is not receivable before its 4s, and is after;
	// the failed ones come back within their backoff (at most 2s), not after
	// the 30s visibility timeout.
	var back []types.Message
	for time.Since(start) < 8*time.Second && len(back) < 3 {
		out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 60})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			if aws.ToString(m.Body) == "retry-after:4s" && time.Since(start) < 3900*time.Millisecond {
				t.Errorf("RetryAfter record receivable %s after the invocation started", time.Since(start))
			}
			back = append(back, m)
		}
	}
	if got, want := idsOf(back, "fail", "panic", "retry-after:4s"), idsOf(msgs, "fail", "panic", "retry-after:4s"); !slices.Equal(got, want) {
		t.Errorf("back within 8s: %v, want %v", got, want)
	}
	dlq := receiveN(t, sq, q.DLQURL, 1)
	f, ok := sqsworker.ParseFailure(sqsmsg.FromSDK(q.DLQURL, &dlq[0]).MessageAttributes)
	wantSource, _ := lambda.QueueURLFromARN(q.ARN)
	if aws.ToString(dlq[0].Body) != "permanent" || !ok || f.ErrorClass != "*errors.errorString" || f.Attempts != 1 || f.SourceQueue != wantSource {
		t.Errorf("dead-lettered %q with %+v", aws.ToString(dlq[0].Body), f)
	}
	if f.Host == "" {
		t.Error("no host in failure metadata")
	}
}

// A FIFO batch with a failure in one group: the other groups go on.
func TestRealInvocationFIFO(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg))
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 3})
	localtest.Send(t, sq, q.URL, "A", "fail")
	localtest.Send(t, sq, q.URL, "B", "ok")
	localtest.Send(t, sq, q.URL, "C", "ok")
	msgs := receiveN(t, sq, q.URL, 3)
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, msgs))
	var resp events.SQSEventResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
		t.Fatalf("status %d, body %s", status, body)
	}
	if len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != idsOf(msgs, "fail")[0] {
		t.Errorf("batchItemFailures %v, want group A's record only", resp.BatchItemFailures)
	}
}

// A function error — an event that is not JSON — returns a clear error
// body, and nothing is deleted: the message stays in the queue.
func TestRealInvocationBadEvent(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg))
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{})
	localtest.Send(t, sq, q.URL, "", "ok")
	receiveN(t, sq, q.URL, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status, body, err := rie.Invoke(ctx, []byte(`{"Records": "not a list"`))
	var fe struct{ ErrorMessage, ErrorType string }
	if err != nil || json.Unmarshal(body, &fe) != nil || fe.ErrorMessage == "" {
		t.Fatalf("status %d, body %s, err %v", status, body, err)
	}
	t.Logf("error body: %s", body)
	if v, f, _ := localtest.Depth(t, sq, q.URL); v+f != 1 {
		t.Errorf("%d messages left after the failed invocation, want 1", v+f)
	}
}

// BenchmarkRIEInvoke measures invocations per second of the example function
// under the Lambda emulator, for batches of ten successful records (the
// event is the same each time; successful records make no SQS call), and
// the cold start: from the emulator's start to the first answer.
func BenchmarkRIEInvoke(b *testing.B) {
	if os.Getenv("AWS_ENDPOINT_URL_SQS") == "" {
		b.Skip("needs the local stack: make bench")
	}
	sq := localtest.NewSQS(b)
	bootstrap := localtest.BuildBootstrap(b, examplePkg)
	q := localtest.NewQueue(b, sq, localtest.QueueOptions{})
	bodies := make([]string, 10)
	for i := range bodies {
		bodies[i] = "ok"
	}
	localtest.Send(b, sq, q.URL, "", bodies...)
	payload, _ := json.Marshal(sqstest.SQSEvent(q.ARN, receiveN(b, sq, q.URL, 10)))
	start := time.Now()
	rie := localtest.StartRIE(b, bootstrap)
	if status, body, err := rie.Invoke(context.Background(), payload); err != nil || status != 200 {
		b.Fatalf("first invoke: %d %s %v", status, body, err)
	}
	cold := time.Since(start)
	b.ResetTimer()
	for range b.N {
		if status, body, err := rie.Invoke(context.Background(), payload); err != nil || status != 200 || !strings.Contains(string(body), `"batchItemFailures":null`) && !strings.Contains(string(body), `"batchItemFailures":[]`) {
			b.Fatalf("invoke: %d %s %v", status, body, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "invokes/s")
	b.ReportMetric(float64(cold.Milliseconds()), "cold-start-ms")
	if fi, err := os.Stat(bootstrap); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "bootstrap-MiB")
	}
}

// A handler that ignores its context does not hold the invocation past the
// function's timeout: the function answers in time, with the stalled record
// failed and its visibility left alone, so that the records whose handlers
// succeeded are deleted rather than retried with the whole batch (and at
// last dead-lettered by SQS, though they succeeded every time).
func TestRealInvocationHandlerIgnoringContext(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg), "AWS_LAMBDA_FUNCTION_TIMEOUT=4")
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 60 * time.Second})
	localtest.Send(t, sq, q.URL, "", "ok", "stall:1m", "ok")
	msgs := receiveN(t, sq, q.URL, 3)
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, msgs))
	var resp events.SQSEventResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
		t.Fatalf("status %d, body %q: want the batch response before the function's timeout", status, body)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	if want := idsOf(msgs, "stall:1m"); !slices.Equal(failed, want) {
		t.Errorf("batchItemFailures %v, want the stalled record only %v", failed, want)
	}
	// The stalled record's handler still runs: it is not made visible.
	if v, _, _ := localtest.Depth(t, sq, q.URL); v != 0 {
		t.Errorf("%d records visible, want none", v)
	}
}

// A function killed in the middle of a batch (here by a job that ends the
// process, as an out-of-memory kill does) after it moved a record to the
// dead-letter queue has deleted that record already: Lambda retries the
// whole batch, and the record would be moved a second time (or run again,
// and perhaps succeed, while its copy waits in the dead-letter queue).
func TestRealInvocationKilledAfterDeadLetter(t *testing.T) {
	sq := localtest.NewSQS(t)
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg))
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 60 * time.Second})
	localtest.Send(t, sq, q.URL, "", "permanent", "crash:2s")
	msgs := receiveN(t, sq, q.URL, 2)
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, msgs))
	var resp events.SQSEventResponse
	if json.Unmarshal(body, &resp) == nil && resp.BatchItemFailures != nil {
		t.Fatalf("status %d, body %s: want the function killed", status, body)
	}
	if n := len(receiveN(t, sq, q.DLQURL, 1)); n != 1 {
		t.Fatalf("dead-letter queue holds %d, want 1", n)
	}
	if v, inFlight, _ := localtest.Depth(t, sq, q.URL); v+inFlight != 1 {
		t.Errorf("the queue holds %d records after the kill, want 1 (the crashed one): the dead-lettered record, not deleted, would be received again", v+inFlight)
	}
}

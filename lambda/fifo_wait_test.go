package lambda_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A FIFO record on the last receive its redrive policy allows whose handler
// finds a dependency down waits in flight, within the invocation, and runs
// again: reported failed and made visible, SQS would move it to the
// dead-letter queue on its next receive, and no copy can wait in its place
// (it would go behind the rest of its group).
func TestEmulatorFIFOLastReceiveWaitsInFlight(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 2, VisibilityTimeout: 30 * time.Second})
	var calls, ran atomic.Int64
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if calls.Add(1) == 1 {
			return sqsworker.Unavailable(errors.New("the dependency is down"))
		}
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: sq})
	localtest.Send(t, sq, q.URL, "g", "job")
	last := receiveLast(t, sq, q.URL)
	if resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, last), 20*time.Second); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, want none: the record waits in flight and runs again", failedIDs(resp))
	}
	if _, err := sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: last[0].ReceiptHandle}); err != nil {
		t.Fatal(err) // as the event source mapping does
	}
	if calls.Load() != 2 || ran.Load() != 1 {
		t.Errorf("%d calls, %d ran; want 2 calls, the second ran", calls.Load(), ran.Load())
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

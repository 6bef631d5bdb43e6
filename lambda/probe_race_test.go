package lambda_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// A FIFO record on its last receive waits in flight for the breaker's probe
// and, given it, runs again as the probe; its handler then hangs past the
// invocation's deadline. The invocation gives the probe's turn back, reading
// the probe the record runs as while the executor set it: both under the
// record's lock, so that -race finds no data race (it found one before), and
// the turn given back is the probe's own: a later invocation's record
// probes and, the dependency back, runs.
func TestFIFOProbeInFlightGivenUp(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	f.CreateQueue("jobs-dlq.fifo", map[string]string{"FifoQueue": "true"})
	f.CreateQueue("jobs.fifo", map[string]string{"VisibilityTimeout": "30", "FifoQueue": "true",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, sqstest.QueueARN("jobs-dlq.fifo"))})
	hung := make(chan struct{})
	t.Cleanup(func() { close(hung) })
	var calls, ran atomic.Int64
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		switch {
		case m.Body == "later":
			ran.Add(1)
			return nil
		case calls.Add(1) == 1:
			return sqsworker.Unavailable(errors.New("connection refused")) // opens the breaker
		}
		<-hung // the probe's call hangs, ignoring its context
		return sqsworker.Unavailable(errors.New("connection timed out"))
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true,
		Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Second, MaxProbeInterval: time.Minute, CloseAfter: 1}})
	invokeBy(t, fn, received(t, f, "jobs.fifo", "first"), 6*time.Second)
	if calls.Load() != 2 {
		t.Fatalf("%d calls, want 2: the first, then the probe after waiting in flight", calls.Load())
	}
	time.Sleep(1500 * time.Millisecond) // past the probe interval, should the hung probe still hold the turn
	deadline := time.Now().Add(30 * time.Second)
	url := sqstest.QueueURL("jobs.fifo")
	for i := 0; ran.Load() == 0 && time.Now().Before(deadline); i++ {
		f.Send(url, "later", func(in *sqs.SendMessageInput) { // another group: "first"'s stays locked
			g, d := fmt.Sprint("later-", i), fmt.Sprint(i)
			in.MessageGroupId, in.MessageDeduplicationId = &g, &d
		})
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receiving the later record: %v", err)
		}
		invokeBy(t, fn, sqstest.SQSEvent(sqstest.QueueARN("jobs.fifo"), out.Messages), 5*time.Second)
		if ran.Load() == 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if ran.Load() != 1 {
		t.Errorf("the later record ran %d times in 30 s, want once: the hung probe kept its turn", ran.Load())
	}
}

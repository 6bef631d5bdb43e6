package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// receiveOnce receives every visible message of url once (up to 10; at
// least one) and makes it visible again at once: each message's receive
// count goes up by one. api is the fake or the emulator.
func receiveOnce(t *testing.T, api interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibility(context.Context, *sqs.ChangeMessageVisibilityInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
}, url string) {
	t.Helper()
	ctx := context.Background()
	out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) == 0 {
		t.Fatal("nothing received")
	}
	for _, m := range out.Messages {
		if _, err := api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
	}
}

// FIFO shutdown on the last receive the redrive policy allows: of five
// messages of a group received together, the first is being handled when
// Shutdown is called. Released, the four others would be moved to the
// dead-letter queue by SQS on their next receive, though no handler saw
// them (a copy cannot take their place: it would go behind the rest of the
// group). Within the shutdown deadline the group goes on instead, in
// order: all five are handled and deleted, none dead-lettered.
func TestFakeFIFOShutdownRunsGroupOnItsLastReceive(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	dlqURL := f.CreateQueue("last-dlq.fifo", map[string]string{"FifoQueue": "true"})
	url := fakeFIFO(f, "last", map[string]string{"VisibilityTimeout": "300",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("last-dlq.fifo"))})
	fakeGroup(f, url, "g", "g0", "g1", "g2", "g3", "g4")
	receiveOnce(t, f, url) // the worker's receive is their second, the last allowed

	r, calls, _ := shutDownWhileG0Runs(t, f, url, 3) // the worker's second receive under way
	want := []fakeCall{{"g0", 2}, {"g1", 2}, {"g2", 2}, {"g3", 2}, {"g4", 2}}
	if got := calls.of(""); !slices.Equal(got, want) {
		t.Errorf("handled %v, want %v: the group in order, on its last receive", got, want)
	}
	if s := r.w.Stats(); s.Released != 0 || s.Deleted != 5 || s.AckFailures != 0 {
		t.Errorf("stats = %+v, want 5 deleted, none released", s)
	}
	// Nothing left for SQS to dead-letter.
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 0 {
		t.Errorf("%d messages still in the queue", len(out.Messages))
	}
	if v, fl, d := f.Depth(dlqURL); v+fl+d != 0 {
		t.Errorf("dead-letter queue holds %d messages, want none", v+fl+d)
	}
}

// FIFO, on the emulator: a message that reaches the worker's long poll
// under way when Shutdown was called, on the last receive its redrive
// policy allows (maxReceiveCount 1, its first receive). Released, SQS
// would move it to the dead-letter queue on its next receive, though no
// handler saw it. It is handled within the shutdown deadline instead, and
// deleted.
func TestFIFOReceivedWhileStoppingOnItsLastReceive(t *testing.T) {
	t.Parallel()
	var n localtest.Counter
	c := localtest.NewCountingSQS(t, &n)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 1})
	var calls fakeCalls
	r := start(t, c, worker.Config{QueueURL: q.URL, WaitTime: 20 * time.Second}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			calls.add(m)
			return nil
		}))
	// The worker's first long poll is under way (the queue is empty).
	localtest.Eventually(t, 30*time.Second, func() bool { return n.Get("ReceiveMessage") >= 1 }, "the worker never received")
	time.Sleep(200 * time.Millisecond)
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		shut <- r.w.Shutdown(ctx)
	}()
	localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker did not begin to stop")
	localtest.Send(t, c, q.URL, "g", "last")
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Shutdown did not return")
	}
	if got := calls.of(""); !slices.Equal(got, []fakeCall{{"last", 1}}) {
		t.Errorf("handled %v, want the message once, on its receive while stopping", got)
	}
	if s := r.w.Stats(); s.Received != 1 || s.Deleted != 1 || s.Released != 0 {
		t.Errorf("stats = %+v, want 1 received and deleted, none released", s)
	}
	if got := localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 5*time.Second); len(got) != 0 {
		t.Errorf("%d messages still in the queue", len(got))
	}
	if v, fl, d := localtest.Depth(t, c, q.DLQURL); v+fl+d != 0 {
		t.Errorf("dead-letter queue holds %d messages, want none", v+fl+d)
	}
}

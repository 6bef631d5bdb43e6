package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A handler cut short at the shutdown deadline has its message released
// once the last long polls have ended, not at once: another receive loop's
// last long poll (Shutdown never cuts a receive short) would take it again,
// and the stop would cost the message two receives, one of them wasted, one
// step nearer its dead-letter queue. On the emulator:
// TestShutdownDeadlineReleaseIsNotReceivedAgain.
func TestFakeShutdownDeadlineReleaseIsNotReceivedAgain(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("rereceive", map[string]string{"VisibilityTimeout": "300"})
	f.Send(url, "m")
	started := make(chan struct{}, 1)
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 3 * time.Second},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}))
	<-started
	// Both loops are in long polls: the first has a free slot again too.
	localtest.Eventually(t, 10*time.Second, func() bool { return f.Calls(sqstest.OpReceiveMessage) >= 3 }, "no long poll under way")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	r.stop(20 * time.Second)
	if s := r.w.Stats(); s.Received != 1 {
		t.Errorf("the worker received the message %d times, want once: its own last long poll took the released message again", s.Received)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("after the shutdown: %d messages, %v; want the released one", len(out.Messages), err)
	}
	if n := out.Messages[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
	}
}

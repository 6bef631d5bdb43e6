package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

func runOnce(t *testing.T, c *sqs.Client, cfg worker.Config) error {
	t.Helper()
	w, err := worker.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = w.Run(ctx, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	if ctx.Err() != nil {
		t.Fatal("Run did not return an error before the deadline")
	}
	return err
}

// A missing queue is a clear error at start-up, matched with errors.As.
func TestMissingQueueFailsRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	missing := strings.Replace(q.URL, "TestMissingQueueFailsRun", "no-such-queue", 1)
	err := runOnce(t, c, worker.Config{QueueURL: missing})
	var notFound *types.QueueDoesNotExist
	if !errors.As(err, &notFound) || !strings.Contains(err.Error(), missing) {
		t.Errorf("Run = %v, want QueueDoesNotExist naming the queue", err)
	}
}

// A redrive policy whose dead-letter queue was deleted is a clear error at
// start-up, not a failure at the first dead-lettering.
func TestDeletedDLQFailsRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	if _, err := c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &q.DLQURL}); err != nil {
		t.Fatal(err)
	}
	err := runOnce(t, c, worker.Config{QueueURL: q.URL})
	var notFound *types.QueueDoesNotExist
	if !errors.As(err, &notFound) || !strings.Contains(err.Error(), "dead-letter queue") {
		t.Errorf("Run = %v, want QueueDoesNotExist about the dead-letter queue", err)
	}
}

// A MaxReceiveCount above the redrive policy's cannot work: SQS would move the
// message first.
func TestMaxReceiveCountAbovePolicyFailsRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	err := runOnce(t, c, worker.Config{QueueURL: q.URL, MaxReceiveCount: 5})
	if err == nil || !strings.Contains(err.Error(), "MaxReceiveCount 5 is above the redrive policy's maxReceiveCount 3") {
		t.Errorf("Run = %v", err)
	}
}

// A MaxReceiveCount without any dead-letter queue is a configuration error.
func TestMaxReceiveCountWithoutDLQFailsRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	err := runOnce(t, c, worker.Config{QueueURL: q.URL, MaxReceiveCount: 2})
	if err == nil || !strings.Contains(err.Error(), "has no dead-letter queue") {
		t.Errorf("Run = %v", err)
	}
}

// A dead-letter queue given in Config works without a redrive policy.
func TestConfigDeadLetterQueue(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	dlq := localtest.NewQueue(t, c, localtest.QueueOptions{})
	var rec recorder
	start(t, c, worker.Config{QueueURL: q.URL, DeadLetterQueueURL: dlq.URL, MaxReceiveCount: 2, Backoff: noDelay},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			rec.add(m.Body)
			return errTransient
		}))
	localtest.Send(t, c, q.URL, "", "x")
	got := dlqMessages(t, c, localtest.Queue{DLQURL: dlq.URL}, 1)
	if aws.ToString(got[0].Body) != "x" || rec.count("x") != 2 {
		t.Errorf("dead-lettered %q after %d attempts", aws.ToString(got[0].Body), rec.count("x"))
	}
}

// A malformed redrive policy is a clear error at start-up, if the emulator
// lets one be set at all.
func TestMalformedRedrivePolicyFailsRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	_, err := c.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{
		QueueUrl: &q.URL, Attributes: map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:x"}`},
	})
	if err != nil {
		t.Skipf("the emulator rejects a malformed redrive policy (%v); the fake-based unit test covers it", err)
	}
	err = runOnce(t, c, worker.Config{QueueURL: q.URL})
	if err == nil || !strings.Contains(err.Error(), "redrive policy") {
		t.Errorf("Run = %v", err)
	}
}

// A heartbeat configuration that does not fit the queue's visibility timeout
// is a clear error at start-up.
func TestBadHeartbeatFailsRun(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 30 * time.Second})
	err := runOnce(t, c, worker.Config{QueueURL: q.URL, Heartbeat: visibility.Config{Interval: 20 * time.Second, MaxLifetime: 13 * time.Hour}})
	if err == nil || !strings.Contains(err.Error(), "MaxLifetime 13h0m0s") || !strings.Contains(err.Error(), "DisableHeartbeat") {
		t.Errorf("Run = %v", err)
	}
	err = runOnce(t, c, worker.Config{QueueURL: q.URL, Heartbeat: visibility.Config{Interval: 20 * time.Second}})
	if err == nil || !strings.Contains(err.Error(), "Interval 20s is not below Threshold 15s") {
		t.Errorf("Run = %v", err)
	}
}

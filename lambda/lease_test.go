package lambda_test

// A record's lease without the heartbeat, on the emulator.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// receiveDefault receives the one message of the queue at url with the
// queue's own visibility timeout, as the event source mapping does.
func receiveDefault(c *sqs.Client, url string) ([]types.Message, error) {
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) > 0 {
			return out.Messages, nil
		}
	}
	return nil, errors.New("no message received")
}

// Without the heartbeat, a record whose handler returns after the queue's
// visibility timeout (from the invocation's start: the latest its receive
// can have been) no longer holds its message: SQS may have handed it to
// another invocation, which may have handled it. The outcome is left to SQS,
// as the worker leaves it: a Permanent failure then is not moved to the
// dead-letter queue. Before, the function moved it there, and deleted the
// original with its stale receipt handle, while another consumer had
// handled the job: the dead-letter queue held a job that was done.
func TestEmulatorNoHeartbeatLeaseEndRespected(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 2 * time.Second})
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		time.Sleep(4 * time.Second) // past the 2 s lease
		return sqsworker.Permanent(errors.New("rejected by a dependency since"))
	})
	fn := newHandler(t, h, lambda.Config{Client: sq, DisableHeartbeat: true})
	localtest.Send(t, sq, q.URL, "", "job")
	msgs, err := receiveDefault(sq, q.URL)
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan error, 1)
	go func() { // another invocation takes the job once the lease ends, and handles it
		m, err := receiveDefault(sq, q.URL)
		if err == nil {
			_, err = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m[0].ReceiptHandle})
		}
		other <- err
	}()
	if _, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, msgs)); err != nil {
		t.Fatal(err)
	}
	if err := <-other; err != nil {
		t.Fatal(err)
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: another consumer handled the job after the lease ended", v+i+d)
	}
}

package dlq

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// A job without an idempotency key whose runtime died between its
// dead-letter copy and the delete of the original leaves two dead letters:
// the runtime's copy, whose failure metadata names the original, and the
// original itself, which SQS's redrive moved on its next receive, without
// metadata. Replayed, both run under the key the idempotency middleware's
// DefaultKey gave the original ("message-id:" and its ID), so that the job's
// effect is applied once. Before, the replay of the message SQS moved had
// no key and no metadata: its DefaultKey was its own new ID, and the effect
// ran twice.
func TestReplayKeepsTheOriginalsKey(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	ctx := context.Background()
	// The original, received (its ID is what DefaultKey gave it), then
	// moved by SQS's redrive.
	redrive(t, e.f, e.orders, "job", nil)
	dl, err := e.f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.ordersDLQ), VisibilityTimeout: 0})
	if err != nil || len(dl.Messages) != 1 {
		t.Fatalf("receive from the dead-letter queue: %v", err)
	}
	original := aws.ToString(dl.Messages[0].MessageId)
	if _, err := e.f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(e.ordersDLQ), ReceiptHandle: dl.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	// The runtime's copy of the same message.
	deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: original}, "job")
	q := openOrdersDLQ(t, e.f)
	if res, err := q.Replay(ctx, ReplayConfig{}); err != nil || res.Moved != 2 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	out, err := e.f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.orders), MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
	}
	for i := range out.Messages {
		m := sqsmsg.FromSDK(e.orders, &out.Messages[i])
		if k := idempotency.DefaultKey(m); k != "message-id:"+original {
			t.Errorf("replayed message %s runs under key %q, want message-id:%s: the job's effect would apply again", m.ID, k, original)
		}
	}
}

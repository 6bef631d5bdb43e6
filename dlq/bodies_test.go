package dlq_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/sdkhttptest"
)

// The calls of an *sqs.Client given to Open, or to CancelRedrive, send each
// request's body from a copy of their own (see package sdkhttp): after a
// round of operations, every body the transport got still reads whole.
func TestGivenClientSendsCopiedBodies(t *testing.T) {
	const base = "http://127.0.0.1:1/000000000000/"
	rec := &sdkhttptest.Recorder{Answers: map[string]string{
		// No QueueArn: the destination below is then not taken for the
		// dead-letter queue itself, whose attributes these are as well.
		"GetQueueAttributes":         `{"Attributes":{"ApproximateNumberOfMessages":"1"}}`,
		"ListDeadLetterSourceQueues": `{"queueUrls":["` + base + `orders"]}`,
		"ReceiveMessage":             `{"Messages":[{"MessageId":"m-1","ReceiptHandle":"r-1","Body":"job"}]}`,
		"SendMessage":                `{"MessageId":"n-1"}`,
		"DeleteMessage":              `{}`,
	}}
	c := sdkhttptest.SQS(rec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Force: the canned ListDeadLetterSourceQueues answers for every queue,
	// so that the destination below looks like a dead-letter queue too.
	q, err := dlq.Open(ctx, c, base+"orders-dlq", dlq.Config{Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Target(ctx, "billing"); err == nil {
		t.Error("Target resolved a name through a network that is down")
	}
	if _, err := q.Scan(ctx, dlq.ScanConfig{Max: 1}); err == nil {
		t.Error("Scan released its messages through a network that is down")
	}
	res, err := q.Replay(ctx, dlq.ReplayConfig{To: base + "orders", Limit: 1})
	if err != nil || res.Moved != 1 {
		t.Errorf("Replay: %d moved, %v; want 1, nil", res.Moved, err)
	}
	if err := q.Purge(ctx, dlq.PurgeConfig{}); err == nil {
		t.Error("Purge through a network that is down succeeded")
	}
	if _, err := q.Redrives(ctx); err == nil {
		t.Error("Redrives through a network that is down succeeded")
	}
	if _, err := dlq.CancelRedrive(ctx, c, "handle", dlq.Audit{}); err == nil {
		t.Error("CancelRedrive through a network that is down succeeded")
	}
	ops := rec.CheckCopied(t)
	for _, op := range []string{"GetQueueAttributes", "ListDeadLetterSourceQueues", "GetQueueUrl", "ReceiveMessage",
		"ChangeMessageVisibilityBatch", "SendMessage", "DeleteMessage", "PurgeQueue", "ListMessageMoveTasks", "CancelMessageMoveTask"} {
		if !slices.Contains(ops, op) {
			t.Errorf("no %s call among %v", op, ops)
		}
	}
}

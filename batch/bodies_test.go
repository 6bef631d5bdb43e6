package batch_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/sdkhttptest"
	"github.com/sqsworker/sqsworker/producer"
)

// The calls of the *dynamodb.Client and the *sqs.Client given to New send
// each request's body from a copy of their own (see package sdkhttp):
// once a batch is created, a chunk counted and the progress read, every
// body the transport got still reads whole.
func TestGivenClientsSendCopiedBodies(t *testing.T) {
	const queue = "http://127.0.0.1:1/000000000000/chunks"
	rec := &sdkhttptest.Recorder{Answers: map[string]string{
		"DescribeTable":      `{"Table":{"KeySchema":[{"AttributeName":"id","KeyType":"HASH"}]}}`,
		"TransactWriteItems": `{}`,
		"UpdateItem":         `{}`,
		"GetItem":            `{}`,
		"BatchGetItem":       `{"Responses":{}}`,
		"SendMessageBatch":   `{"Successful":[{"Id":"0","MessageId":"c-0"}]}`,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := batch.New(ctx, sdkhttptest.DynamoDB(rec), sdkhttptest.SQS(rec), batch.Config{Table: "jobs", Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Create(ctx, batch.Spec{ID: "b-1", QueueURL: queue, Chunks: []producer.Message{{Body: "chunk"}},
		Callback: batch.Callback{QueueURL: queue, Body: "done"}})
	if err != nil {
		t.Fatal(err)
	}
	h := c.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	_ = h.HandleMessage(ctx, &sqsworker.Message{ID: "c-0", Body: "chunk", ReceiveCount: 1,
		MessageAttributes: map[string]sqsworker.MessageAttribute{batch.Attribute: {DataType: "String", StringValue: "b-1#0"}}})
	if _, err := c.Get(ctx, "b-1"); err == nil {
		t.Error("Get found a batch the table does not hold")
	}
	ops := rec.CheckCopied(t)
	t.Logf("calls: %v", ops)
	for _, op := range []string{"DescribeTable", "GetQueueAttributes", "BatchGetItem", "TransactWriteItems", "SendMessageBatch", "UpdateItem", "GetItem"} {
		if !slices.Contains(ops, op) {
			t.Errorf("no %s call among %v", op, ops)
		}
	}
}

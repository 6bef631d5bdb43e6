package producer_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sqsworker/sqsworker/internal/sdkhttp/sdkhttptest"
	"github.com/sqsworker/sqsworker/producer"
)

// The calls of an *sqs.Client given to a Producer send each request's body
// from a copy of their own (see package sdkhttp): every body the transport
// got still reads whole once the calls have returned.
func TestGivenClientSendsCopiedBodies(t *testing.T) {
	rec := &sdkhttptest.Recorder{Answers: map[string]string{
		"GetQueueAttributes": `{"Attributes":{"MaximumMessageSize":"262144"}}`,
	}}
	p, err := producer.New(sdkhttptest.SQS(rec), producer.Config{QueueURL: "http://127.0.0.1:1/000000000000/orders"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := p.Send(ctx, producer.Message{Body: "one"}); err == nil {
		t.Error("Send through a network that is down succeeded")
	}
	if _, err := p.SendBatch(ctx, []producer.Message{{Body: "two"}, {Body: "three"}}); err == nil {
		t.Error("SendBatch through a network that is down succeeded")
	}
	want := []string{"GetQueueAttributes", "SendMessage", "SendMessageBatch"}
	if ops := rec.CheckCopied(t); !slices.Equal(ops, want) {
		t.Errorf("calls %v, want %v", ops, want)
	}
}

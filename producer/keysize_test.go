package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
)

// claimingStore is an idempotency store whose claims all succeed.
type claimingStore struct{}

func (claimingStore) Claim(context.Context, string, string, time.Time, idempotency.Receive) (string, *idempotency.Record, error) {
	return "token", nil, nil
}
func (claimingStore) Complete(context.Context, string, string, []byte) error       { return nil }
func (claimingStore) Release(context.Context, string, string) error                { return nil }
func (claimingStore) ExtendLease(context.Context, string, string, time.Time) error { return nil }

// guarded returns what the idempotency middleware makes of the message at
// the head of a Fake's queue: nil when the handler ran.
func guarded(t *testing.T, f *sqstest.Fake, url string) error {
	t.Helper()
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receiving: %d messages, %v", len(out.Messages), err)
	}
	guard, err := idempotency.New(claimingStore{}, idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := guard.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran = true; return nil }))
	err = h.HandleMessage(context.Background(), sqsmsg.FromSDK(url, &out.Messages[0]))
	if err == nil && !ran {
		t.Fatal("the middleware returned nil without running the handler")
	}
	return err
}

// An idempotency key longer than the idempotency middleware takes
// (idempotency.MaxKeySize) is refused before sending, as the key given in
// Message.IdempotencyKey or in the idempotency-key attribute (a Binary one
// counts as the middleware reads it: "binary:" and its bytes in hex).
// Before, it was sent, and the middleware failed its job as Permanent on
// its first receive: a job dead-lettered for a key the producer could have
// refused. A key of MaxKeySize is sent and its job runs.
func TestSendRefusesKeyOverMiddlewareLimit(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", idempotency.MaxKeySize+1)
	binLong := make([]byte, (idempotency.MaxKeySize-len("binary:"))/2+1)
	for name, m := range map[string]producer.Message{
		"IdempotencyKey":   {Body: "job", IdempotencyKey: long},
		"String attribute": {Body: "job", Attributes: map[string]sqsworker.MessageAttribute{producer.IdempotencyKeyAttribute: {DataType: "String", StringValue: long}}},
		"Binary attribute": {Body: "job", Attributes: map[string]sqsworker.MessageAttribute{producer.IdempotencyKeyAttribute: {DataType: "Binary", BinaryValue: binLong}}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := sqstest.NewFake()
			url := f.CreateQueue("jobs", nil)
			p := newProducer(t, f, url)
			want := fmt.Sprintf("over the idempotency middleware's limit of %d", idempotency.MaxKeySize)
			if _, err := p.Send(context.Background(), m); err == nil || !strings.Contains(err.Error(), want) {
				var perm *sqsworker.PermanentError
				if err == nil {
					err = guarded(t, f, url)
				}
				t.Errorf("Send: %v (permanent: %t); want an error saying %q", err, errors.As(err, &perm), want)
			}
			res, _ := p.SendBatch(context.Background(), []producer.Message{m})
			if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), want) {
				t.Errorf("SendBatch: %+v; want an error saying %q", res[0], want)
			}
		})
	}

	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p := newProducer(t, f, url)
	if _, err := p.Send(context.Background(), producer.Message{Body: "job", IdempotencyKey: long[1:]}); err != nil {
		t.Fatalf("Send with a key of MaxKeySize: %v", err)
	}
	if err := guarded(t, f, url); err != nil {
		t.Errorf("a key of MaxKeySize: the middleware returned %v, want the job run", err)
	}
}

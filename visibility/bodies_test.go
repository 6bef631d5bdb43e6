package visibility_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/sdkhttptest"
	"github.com/sqsworker/sqsworker/visibility"
)

// The calls of an *sqs.Client given to an Extender send each request's body
// from a copy of their own (see package sdkhttp): every body the transport
// got still reads whole once the round has returned.
func TestGivenClientSendsCopiedBodies(t *testing.T) {
	rec := &sdkhttptest.Recorder{}
	e, err := visibility.New(sdkhttptest.SQS(rec), visibility.Config{
		QueueURL: "http://127.0.0.1:1/000000000000/orders", VisibilityTimeout: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Received long enough ago that its lease is due in the round below.
	m := &sqsworker.Message{ID: "m-1", ReceiptHandle: "r-1"}
	_, l := e.Track(context.Background(), m, time.Now().Add(-29*time.Second))
	defer l.Release()
	e.Round(context.Background())
	if ops := rec.CheckCopied(t); !slices.Equal(ops, []string{"ChangeMessageVisibilityBatch"}) {
		t.Errorf("calls %v, want one ChangeMessageVisibilityBatch", ops)
	}
}

package batch_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Middleware inside the idempotency middleware, whose handler's effect is a
// write added to the idempotency record's transaction (AddWrites), which
// commits only after the chunk is counted. The first commit is refused (a
// condition of the handler's own: optimistic locking), the retry's would
// apply. Before, the first run counted the chunk and sent the completion
// although its effect was refused, and the retry found the chunk counted
// and never applied it: a batch completed with an effect lost. Now such a
// chunk is Unavailable (ErrGuardOutside, naming the fix, WithIdempotency):
// never counted without its effect, nor recorded failed, nor dead-lettered;
// it waits as for a dependency down. With WithIdempotency the same handler
// is counted with its effect, once.
func TestMiddlewareInsideGuard(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("inside", 1)); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.NewDynamoStore(ctx, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		// The effect: one more on an item that must exist.
		return idempotency.AddWrites(ctx, ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
			TableName: &e.table, Key: keyOf("effect#inside"),
			UpdateExpression:          aws.String("ADD n :one"),
			ConditionExpression:       aws.String("attribute_exists(id)"),
			ExpressionAttributeValues: vals(":one", "N:1"),
		}})
	})
	h := guard.Middleware(e.coord.Middleware(work))
	m := receive(t, e.sqs, e.work, 1)[0]
	err = h.HandleMessage(ctx, m)
	var un *sqsworker.UnavailableError
	if !errors.As(err, &un) || !errors.Is(err, batch.ErrGuardOutside) || !strings.Contains(err.Error(), "WithIdempotency") {
		t.Errorf("Middleware inside the guard, a handler adding writes: %v, want Unavailable, ErrGuardOutside, naming WithIdempotency", err)
	}
	p := progress(t, e.coord, "inside")
	if p.Done != 0 || p.Completed || !p.Notified.IsZero() {
		t.Errorf("after its effect was refused: %+v, want the chunk not counted", p)
	}
	if p.Failed != 0 {
		t.Errorf("after its effect was refused: %+v, want the chunk not recorded failed: it waits", p)
	}
	if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
		"id": &ddbtypes.AttributeValueMemberS{Value: "effect#inside"}, "n": &ddbtypes.AttributeValueMemberN{Value: "0"},
	}}); err != nil {
		t.Fatal(err)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 0 {
		t.Errorf("%d completion jobs for a batch whose chunk's effect was not applied", n)
	}
	// Replayed, with the fix: counted with its effect, once.
	fixed := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(work)
	r := again(m)
	r.MessageAttributes = map[string]sqsworker.MessageAttribute{"sqsworker.replays": {DataType: "Number", StringValue: "1"}}
	for k, v := range m.MessageAttributes {
		r.MessageAttributes[k] = v
	}
	if err := fixed.HandleMessage(ctx, r); err != nil {
		t.Fatalf("replayed with WithIdempotency: %v", err)
	}
	if err := fixed.HandleMessage(ctx, again(r)); err != nil {
		t.Fatalf("a duplicate: %v", err)
	}
	if got := item(t, e.db, e.table, "effect#inside")["n"]; got != "1" {
		t.Errorf("effect applied %s times, want 1", got)
	}
	if p := progress(t, e.coord, "inside"); p.Done != 1 || p.Failed != 0 || p.Notified.IsZero() {
		t.Errorf("after the replay: %+v, want the chunk counted and the completion sent", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// The same on the emulators, under a worker (maxReceiveCount 2): the chunk
// is tried past the last receive its redrive policy allows, never
// dead-lettered, counted or recorded failed; a worker with the handler
// composed as it should be then counts it with its effect, once, and sends
// the batch's completion.
func TestEmulatorMiddlewareInsideGuard(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 2)
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("inside", 1)); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.NewDynamoStore(ctx, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var attempts atomic.Int64
	work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		attempts.Add(1)
		return idempotency.AddWrites(ctx, ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
			TableName: &e.table, Key: keyOf("effect#inside"),
			UpdateExpression: aws.String("ADD n :one"), ExpressionAttributeValues: vals(":one", "N:1"),
		}})
	})
	e.runWorker(t, guard.Middleware(e.coord.Middleware(work)), "the chunk tried three times", func() bool { return attempts.Load() >= 3 })
	if visible, inFlight, delayed := localtest.Depth(t, e.sqs, e.chunks.DLQURL); visible+inFlight+delayed != 0 {
		t.Fatalf("%d dead-lettered, want none: the composition is wrong, not the chunk", visible+inFlight+delayed)
	}
	p := progress(t, e.coord, "inside")
	if p.Done != 0 || p.Failed != 0 || !p.Notified.IsZero() {
		t.Errorf("progress %+v, want the chunk neither counted nor failed", p)
	}
	if got := item(t, e.db, e.table, "effect#inside"); got != nil {
		t.Errorf("effect applied: %v", got)
	}
	// Deployed again, composed as it should be.
	fixed := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(work)
	// Until the completion is sent: on the last receive its redrive policy
	// allows, the chunk is counted and then hands the completion to a
	// copy of itself, which a worker stopped at the count would leave to
	// the next one.
	e.runWorker(t, fixed, "the chunk counted, the completion sent", func() bool {
		p := progress(t, e.coord, "inside")
		return p.Done == 1 && !p.Notified.IsZero()
	})
	if got := item(t, e.db, e.table, "effect#inside")["n"]; got != "1" {
		t.Errorf("effect applied %s times, want 1", got)
	}
	if msgs := localtest.ReceiveAll(t, e.sqs, e.callbacks, time.Second, time.Minute); len(msgs) != 1 {
		t.Errorf("%d completion jobs, want 1", len(msgs))
	}
	if visible, inFlight, delayed := localtest.Depth(t, e.sqs, e.chunks.DLQURL); visible+inFlight+delayed != 0 {
		t.Errorf("%d dead-lettered, want none", visible+inFlight+delayed)
	}
}

package batch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Middleware inside the idempotency middleware, whose handler's effect is a
// write added to the idempotency record's transaction (AddWrites), which
// commits only after the chunk is counted. The first commit is refused (a
// condition of the handler's own: optimistic locking), the retry's would
// apply. Before, the first run counted the chunk and sent the completion
// although its effect was refused, and the retry found the chunk counted
// and never applied it: a batch completed with an effect lost. Now such a
// chunk fails for good, naming the fix (WithIdempotency), and is recorded
// failed: never counted without its effect. With WithIdempotency the same
// handler is counted with its effect, once.
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
	var perm *sqsworker.PermanentError
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "WithIdempotency") {
		t.Errorf("Middleware inside the guard, a handler adding writes: %v, want a Permanent error naming WithIdempotency", err)
	}
	p := progress(t, e.coord, "inside")
	if p.Done != 0 || p.Completed || !p.Notified.IsZero() {
		t.Errorf("after its effect was refused: %+v, want the chunk not counted", p)
	}
	if p.Failed != 1 || len(p.FailedChunks) != 1 || !strings.Contains(p.FailedChunks[0].Error, "WithIdempotency") {
		t.Errorf("after its effect was refused: %+v, want the chunk recorded failed with the fix", p)
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

// The same in a worker on the local SQS: the chunk is dead-lettered at once
// with the fix as its reason, recorded failed, never counted, and no
// completion job is sent. Before, the chunk was counted and the completion
// sent, its effect refused and never applied.
func TestEmulatorMiddlewareInsideGuard(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 3)
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
	h := guard.Middleware(e.coord.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
			TableName: &e.table, Key: keyOf("effect#inside"),
			UpdateExpression: aws.String("ADD n :one"), ExpressionAttributeValues: vals(":one", "N:1"),
			ConditionExpression: aws.String("attribute_exists(id)"), // refused: the item is made later
		}})
	})))
	e.runWorker(t, h, "the chunk dead-lettered", func() bool {
		visible, inFlight, delayed := localtest.Depth(t, e.sqs, e.chunks.DLQURL)
		return visible+inFlight+delayed == 1
	})
	dead := localtest.ReceiveAll(t, e.sqs, e.chunks.DLQURL, time.Second, time.Minute)
	if len(dead) != 1 {
		t.Fatalf("%d dead-lettered messages, want 1", len(dead))
	}
	if f, ok := sqsworker.ParseFailure(sqsmsg.FromSDK(e.chunks.DLQURL, &dead[0]).MessageAttributes); !ok || !strings.Contains(f.Error, "WithIdempotency") || f.Attempts != 1 {
		t.Errorf("dead-lettered with %+v, want the fix as its reason on its first attempt", f)
	}
	p := progress(t, e.coord, "inside")
	if p.Done != 0 || p.Failed != 1 || !p.Notified.IsZero() {
		t.Errorf("progress %+v, want the chunk failed, not counted", p)
	}
	if got := item(t, e.db, e.table, "effect#inside"); got != nil {
		t.Errorf("effect applied: %v", got)
	}
	if msgs := localtest.ReceiveAll(t, e.sqs, e.callbacks, time.Second, time.Minute); len(msgs) != 0 {
		t.Errorf("%d completion jobs", len(msgs))
	}
}

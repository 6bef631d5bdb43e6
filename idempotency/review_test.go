package idempotency_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A PayloadHash that returns raw digest bytes (not valid UTF-8), on
// DynamoDB Local: a duplicate of a completed job, seen by another process
// (a Guard of its own), is acknowledged without running. DynamoDB stored
// the digest altered (each invalid byte as U+FFFD), never equal to the
// duplicate's, which was dead-lettered as a reused key.
func TestRawPayloadHashMatchesItself(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	store := newStore(t, c, idempotency.StoreConfig{})
	raw := func(m *sqsworker.Message) string { sum := sha256.Sum256([]byte(m.Body)); return string(sum[:]) }
	var runs atomic.Int64
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil })
	for i := range 2 { // two processes
		g, err := idempotency.New(store, idempotency.Config{PayloadHash: raw})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Middleware(h).HandleMessage(context.Background(), msg("order-1", `{"amount":10}`)); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want 1", n)
	}
}

// A TTL given as a number of seconds (86400, which time.Duration reads as
// 86.4µs) is refused, naming the fix. It kept no duplicate away.
func TestTTLInSecondsRefused(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	_, err := idempotency.NewDynamoStore(context.Background(), c, idempotency.StoreConfig{Table: "any", TTL: 86400})
	if err == nil || !strings.Contains(err.Error(), "under a second") || !strings.Contains(err.Error(), "24 * time.Hour") {
		t.Errorf("err = %v, want the TTL refused, naming the fix", err)
	}
}

// A key held in the table by an item that is not an idempotency record
// (another user of the table writing the same keys), on DynamoDB Local:
// the job fails as Permanent, naming KeyPrefix. It was postponed on every
// receive for as long as the item lived, days, each postponement a receive
// spent.
func TestForeignItemUnderTheKey(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	table := localtest.UniqueName(t, false)
	ctx := context.Background()
	if err := idempotency.CreateTable(ctx, c, idempotency.StoreConfig{Table: table}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, c, table)
	store, err := idempotency.NewDynamoStore(ctx, c, idempotency.StoreConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	expiry := strconv.FormatInt(time.Now().Add(24*time.Hour).Unix(), 10)
	if _, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"id": &types.AttributeValueMemberS{Value: "batch#report-7"}, "expiry": &types.AttributeValueMemberN{Value: expiry},
	}}); err != nil {
		t.Fatal(err)
	}
	g, err := idempotency.New(store, idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	err = g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil })).
		HandleMessage(ctx, msg("batch#report-7", "{}"))
	var p *sqsworker.PermanentError
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "KeyPrefix") {
		t.Errorf("err = %v, want a Permanent error naming KeyPrefix", err)
	}
	if runs.Load() != 0 {
		t.Error("the handler ran")
	}
}

// ownStore is a Store of a user's own: here one that hands every call to a
// DynamoStore, without being one.
type ownStore struct{ s *idempotency.DynamoStore }

func (o ownStore) Claim(ctx context.Context, key, hash string, until time.Time, by idempotency.Receive) (string, *idempotency.Record, error) {
	return o.s.Claim(ctx, key, hash, until, by)
}
func (o ownStore) Complete(ctx context.Context, key, token string, result []byte) error {
	return o.s.Complete(ctx, key, token, result)
}
func (o ownStore) Release(ctx context.Context, key, token string) error {
	return o.s.Release(ctx, key, token)
}
func (o ownStore) ExtendLease(ctx context.Context, key, token string, until time.Time) error {
	return o.s.ExtendLease(ctx, key, token, until)
}

// A Guard with a cache, over a Store of one's own whose records last 2s, on
// DynamoDB Local: a key used again once its record has expired runs again.
// The Guard cached its own completion for 24 hours, a guess, and
// acknowledged the job without running it.
func TestOwnStoreCompletionNotCachedPastItsTTL(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	store := ownStore{newStore(t, c, idempotency.StoreConfig{TTL: 2 * time.Second})}
	g, err := idempotency.New(store, idempotency.Config{CacheSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	if err := h.HandleMessage(context.Background(), msg("report-1", "{}")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the record's TTL, and a second more
	if err := h.HandleMessage(context.Background(), msg("report-1", "{}")); err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the handler ran %d times, want 2: the key's record had expired", n)
	}
}

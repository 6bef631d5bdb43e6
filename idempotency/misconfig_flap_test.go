package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// On DynamoDB Local, the idempotency table answers while the handlers'
// writes go to a table that does not exist: every claim succeeds, every
// commit is refused for the configuration (Unavailable, ErrMisconfigured),
// and the misconfiguration is logged once, with no note between that the
// store "answers again".
func TestMissingWritesTableLoggedOnce(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	missing := localtest.UniqueName(t, false) + "-effects"
	var logs logBuffer
	guard, err := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(missing),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: m.ID}},
			UpdateExpression:          aws.String("ADD applied :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}})
	}))
	for i := range 4 {
		err := h.HandleMessage(context.Background(), msg(fmt.Sprint("k", i), "b"))
		if !sqsworker.IsUnavailable(err) || !errors.Is(err, idempotency.ErrMisconfigured) {
			t.Fatalf("job %d, its writes on a missing table: %v; want Unavailable matching ErrMisconfigured", i, err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 || strings.Contains(out, "answers again") {
		t.Errorf("after 4 commits on a missing table: %d errors logged, want one and no note that the store answers again:\n%s", n, out)
	}
}

// On DynamoDB Local, the ValidationExceptions a job causes are the job's,
// not the store's configuration: a write of the handler's that DynamoDB
// refuses as invalid fails the job (not Unavailable: it reaches the
// dead-letter queue after its receives, rather than wait forever behind
// the breaker), and a result too large for the record is left out.
func TestJobValidationNotMisconfiguration(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	effects := newStore(t, db, idempotency.StoreConfig{}).Config().Table // another table of the same key
	guard, err := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.DiscardHandler), MaxResultSize: 400 << 10})
	if err != nil {
		t.Fatal(err)
	}
	bad := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(effects),
			Key:                       map[string]types.AttributeValue{store.Config().KeyAttr: &types.AttributeValueMemberS{Value: m.ID}},
			UpdateExpression:          aws.String("ADD applied :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberS{Value: "not a number"}},
		}})
	}))
	err = bad.HandleMessage(context.Background(), msg("bad-write", "b"))
	if err == nil || sqsworker.IsUnavailable(err) || errors.Is(err, idempotency.ErrMisconfigured) {
		t.Errorf("a job whose write DynamoDB refuses as invalid: %v; want a failure of the job, not Unavailable", err)
	}
	big := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		idempotency.SetResult(ctx, make([]byte, 400<<10))
		return nil
	}))
	if err := big.HandleMessage(context.Background(), msg("big-result", "b")); err != nil {
		t.Errorf("a job whose result is too large for the record: %v; want done, without the result", err)
	}
}

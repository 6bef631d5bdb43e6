package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
)

// writesDeniedAPI accepts every request on the idempotency table and
// refuses every transaction with err: the handler's writes are on a table
// the role may not write to (or that does not exist).
type writesDeniedAPI struct {
	switchAPI
}

func (a *writesDeniedAPI) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, a.err
}

// Claims succeed while every commit of the handlers' writes is refused for
// the configuration (access denied on the writes' table): each job waits
// as Unavailable, and the misconfiguration is logged once, not once per job
// with a note that the store "answers again" between: a claim that
// succeeds says nothing of the commits.
func TestMisconfiguredCommitsLoggedOnceWhileClaimsSucceed(t *testing.T) {
	ctx := context.Background()
	api := &writesDeniedAPI{switchAPI{err: httpErr(400, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: dynamodb:UpdateItem on effects"})}}
	s, err := NewDynamoStore(ctx, api, StoreConfig{Table: "orders-idem"})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	g, _ := New(s, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return AddWrites(ctx, effect(m.ID))
	}))
	for i := range 5 {
		k := string(rune('a' + i))
		err := h.HandleMessage(ctx, &sqsworker.Message{ID: "id-" + k, Body: "b", MessageAttributes: map[string]sqsworker.MessageAttribute{
			KeyAttribute: {DataType: "String", StringValue: k}}})
		if !sqsworker.IsUnavailable(err) || !errors.Is(err, ErrMisconfigured) {
			t.Fatalf("commit refused for access: %v; want Unavailable matching ErrMisconfigured", err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 || strings.Contains(out, "answers again") {
		t.Errorf("after 5 commits refused for access: %d errors logged, want one and no note that the store answers again:\n%s", n, out)
	}
}

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
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// refusing is DynamoDB Local refusing every write once on is set, as
// DynamoDB refuses a role it denies, or credentials it does not accept.
type refusing struct {
	*dynamodb.Client
	on   atomic.Bool
	code string
}

func (r *refusing) refusal() error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "TransactWriteItems",
		Err: &smithy.GenericAPIError{Code: r.code, Message: "refused by the test", Fault: smithy.FaultClient}}
}

func (r *refusing) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if r.on.Load() {
		return nil, r.refusal()
	}
	return r.Client.TransactWriteItems(ctx, in, opts...)
}

func (r *refusing) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if r.on.Load() {
		return nil, r.refusal()
	}
	return r.Client.GetItem(ctx, in, opts...)
}

func (r *refusing) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if r.on.Load() {
		return nil, r.refusal()
	}
	return r.Client.BatchGetItem(ctx, in, opts...)
}

func (r *refusing) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if r.on.Load() {
		return nil, r.refusal()
	}
	return r.Client.UpdateItem(ctx, in, opts...)
}

// A chunk whose handler ran, and whose count DynamoDB then refused for the
// table or the caller (the table deleted or renamed after New, the role
// denied, the credentials refused), fails as unavailable, naming the fix:
// the runtimes' circuit breaker counts it, and it is never dead-lettered
// for a fault that is not its own. Dead-lettered, a replay would run its
// handler again. Before, a missing table was a permanent failure (the
// chunk dead-lettered on its first receive) and access denied an ordinary
// one (dead-lettered after its receives). Delivered again while the
// refusal lasts, it is not run again; once fixed, it is counted (its
// handler runs again: Middleware alone runs a chunk at least once, as its
// documentation says; WithIdempotency runs it once).
func TestRefusedCountIsNoChunksFault(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ code, says string }{
		{"ResourceNotFoundException", "does not exist (in the client's region and account): set Config.Table"},
		{"AccessDeniedException", "grant the role dynamodb:PutItem, dynamodb:UpdateItem, dynamodb:DeleteItem, dynamodb:GetItem and dynamodb:DescribeTable"},
		{"ExpiredTokenException", "does not accept the credentials"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, batch.Config{})
			db := &refusing{Client: e.db, code: tc.code}
			c, err := batch.New(context.Background(), db, e.sqs, batch.Config{Table: e.table, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := c.Create(ctx, e.spec("refused", 2)); err != nil {
				t.Fatal(err)
			}
			msgs := receive(t, e.sqs, e.work, 2)
			var fx effects
			// Refused from while the handler runs: its count is.
			h := c.Middleware(fx.handler(func(*sqsworker.Message) error { db.on.Store(true); return nil }))
			err = h.HandleMessage(ctx, msgs[0])
			if !sqsworker.IsUnavailable(err) || isPermanent(err) || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("a chunk whose count was refused: %v (unavailable %v, permanent %v); want unavailable, naming the fix %q",
					err, sqsworker.IsUnavailable(err), isPermanent(err), tc.says)
			}
			if err := h.HandleMessage(ctx, again(msgs[0])); !sqsworker.IsUnavailable(err) {
				t.Errorf("the chunk delivered again while refused: %v; want unavailable", err)
			}
			v0, _ := msgs[0].Attribute(batch.Attribute)
			if n := fx.get(v0); n != 1 {
				t.Errorf("while refused, the chunk ran %d times, want once", n)
			}
			db.on.Store(false)
			h = c.Middleware(fx.handler(nil))
			for _, m := range []*sqsworker.Message{again(again(msgs[0])), msgs[1]} {
				if err := h.HandleMessage(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			if p := progress(t, c, "refused"); p.Done != 2 {
				t.Errorf("progress %+v, want 2 done", p)
			}
		})
	}
}

// On DynamoDB Local: the table deleted after New. A chunk handled then
// fails as unavailable, naming the table and the fix, not as its own
// fault.
func TestDeletedTableIsNoChunksFaultOnEmulator(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("gone", 1)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 1)
	if _, err := e.db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(e.table)}); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, time.Minute, func() bool {
		_, err := e.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(e.table)})
		var api smithy.APIError
		return errors.As(err, &api) && api.ErrorCode() == "ResourceNotFoundException"
	}, "table %s deleted", e.table)
	var fx effects
	err := e.coord.Middleware(fx.handler(nil)).HandleMessage(ctx, msgs[0])
	if !sqsworker.IsUnavailable(err) || isPermanent(err) ||
		!strings.Contains(err.Error(), "table "+e.table+" does not exist") || !strings.Contains(err.Error(), "Config.Table") {
		t.Errorf("a chunk counted in a deleted table: %v (unavailable %v, permanent %v); want unavailable, naming the table and the fix",
			err, sqsworker.IsUnavailable(err), isPermanent(err))
	}
}

func isPermanent(err error) bool {
	var p *sqsworker.PermanentError
	return errors.As(err, &p)
}

// A TTL or a NotifyLease too short to work is refused with what it must
// cover. Before, a TTL of 14 (nanoseconds, meant as days) was taken: the
// batch's item expired at once, and each chunk was dead-lettered as of an
// unknown batch; a NotifyLease of 30 ns let every consumer send the
// completion job.
func TestTooShortDurationsAreRefused(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	for _, tc := range []struct {
		cfg  batch.Config
		want string
	}{
		{batch.Config{TTL: 14}, "TTL 14ns is under 1h0m0s"},
		{batch.Config{TTL: 30 * time.Minute}, "TTL 30m0s is under 1h0m0s: a batch's item must outlive its chunks"},
		{batch.Config{NotifyLease: 30}, "NotifyLease 30ns is under 1s: it must cover one SendMessage and one UpdateItem"},
	} {
		tc.cfg.Table = e.table
		if _, err := batch.New(context.Background(), e.db, e.sqs, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v; want %q", tc.cfg, err, tc.want)
		}
	}
}

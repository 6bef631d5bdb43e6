package batch_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// refusedWrite is a handler that adds a write whose condition always fails
// (an account that does not exist): the idempotency middleware's commit is
// cancelled by it, after the handler returned nil.
func refusedWrite(table string) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{
			TableName: &table, Key: keyOf("account#none"),
			ConditionExpression: aws.String("attribute_exists(id)"),
		}})
	})
}

// With the idempotency middleware, a chunk whose handler succeeded but
// whose writes DynamoDB refused at the commit (a condition of its own) fails
// for good: on its last attempt (Config.MaxReceiveCount), or turned
// Permanent by a middleware around the guard. The runtime dead-letters it,
// and the batch records it failed, listed with its error, as it records a
// handler's own failure: not left pending, where nothing would ever come to
// count it.
func TestCommitRefusedIsRecordedFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		permanent bool // a middleware around the guard makes the failure Permanent
		attempts  int  // the attempt the chunk fails on
	}{
		{name: "last-attempt", attempts: 2},
		{name: "permanent", permanent: true, attempts: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEnv(t, batch.Config{MaxReceiveCount: 2})
			ctx := context.Background()
			if err := e.coord.Create(ctx, e.spec("refused", 2)); err != nil {
				t.Fatal(err)
			}
			guard := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})
			if tc.permanent {
				store, err := idempotency.NewDynamoStore(ctx, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"})
				if err != nil {
					t.Fatal(err)
				}
				g, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
				if err != nil {
					t.Fatal(err)
				}
				guard = e.coord.WithIdempotency(func(next sqsworker.Handler) sqsworker.Handler {
					inner := g.Middleware(next)
					return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
						err := inner.HandleMessage(ctx, m)
						var tce *idempotency.TransactionCanceledError
						if errors.As(err, &tce) {
							return sqsworker.Permanent(err)
						}
						return err
					})
				})
			}
			h := guard(refusedWrite(e.table))
			m := receive(t, e.sqs, e.work, 1)[0]
			for m.ReceiveCount < tc.attempts {
				m = again(m)
			}
			err := h.HandleMessage(ctx, m)
			var tce *idempotency.TransactionCanceledError
			if !errors.As(err, &tce) {
				t.Fatalf("a chunk whose writes were refused: %v, want a *TransactionCanceledError", err)
			}
			p := progress(t, e.coord, "refused")
			if p.Failed != 1 || p.Pending != 1 || len(p.FailedChunks) != 1 || p.FailedChunks[0].Error == "" {
				t.Errorf("progress %+v, want the chunk recorded failed, with its error", p)
			}
		})
	}
}

// The same on the local SQS, run by a worker: the chunk whose writes are
// refused fails its two attempts, the worker dead-letters it, and the batch
// lists it failed; the other chunk is counted.
func TestEmulatorCommitRefusedIsRecordedFailed(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 2)
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("refused", 2)); err != nil {
		t.Fatal(err)
	}
	refused := refusedWrite(e.table)
	h := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if m.Body == "chunk-1" {
				return refused.HandleMessage(ctx, m)
			}
			return nil
		}))
	e.runWorker(t, h, "the refused chunk dead-lettered, the other counted", func() bool {
		visible, inFlight, delayed := localtest.Depth(t, e.sqs, e.chunks.DLQURL)
		p := progress(t, e.coord, "refused")
		return visible+inFlight+delayed == 1 && p.Done == 1
	})
	p := progress(t, e.coord, "refused")
	if p.Failed != 1 || p.Pending != 0 || len(p.FailedChunks) != 1 || p.FailedChunks[0].Index != 1 || p.FailedChunks[0].Attempts != 2 {
		t.Errorf("progress %+v, want chunk 1 recorded failed on its second attempt", p)
	}
}

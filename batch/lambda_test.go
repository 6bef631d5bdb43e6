package batch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// The middleware in the Lambda adapter: a batch's chunks arrive in SQS
// events, one fails its first attempt (reported as a batch item failure)
// and succeeds in the next invocation, one arrives again; each is counted
// once and one completion job is sent.
func TestLambda(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, guarded bool) {
		e := newFakeEnv(t, batch.Config{})
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("lambda", 4)); err != nil {
			t.Fatal(err)
		}
		var eff effects
		work := eff.handler(func(m *sqsworker.Message) error {
			if m.Body == "chunk-2" && m.ReceiveCount == 1 {
				return errors.New("flaky dependency")
			}
			return nil
		})
		h := e.coord.Middleware(work)
		if guarded {
			h = withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table}, idempotency.Config{})(work)
		}
		fn, err := lambda.NewHandler(h, lambda.Config{
			Client: e.sqs, Logger: quiet(),
			Backoff: sqsworker.BackoffFunc(func(int, error) time.Duration { return 0 }),
		})
		if err != nil {
			t.Fatal(err)
		}
		invoke := func(msgs []types.Message) int {
			t.Helper()
			resp, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("chunks"), msgs))
			if err != nil {
				t.Fatal(err)
			}
			return len(resp.BatchItemFailures)
		}
		recv := func() []types.Message {
			out, err := e.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: &e.work, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			})
			if err != nil {
				t.Fatal(err)
			}
			return out.Messages
		}
		first := recv()
		if len(first) != 4 {
			t.Fatalf("%d chunks received, want 4", len(first))
		}
		if n := invoke(first); n != 1 {
			t.Fatalf("%d batch item failures, want 1 (chunk 2)", n)
		}
		if n := invoke(first[:1]); n != 0 { // chunk 0 delivered again
			t.Fatalf("%d batch item failures for a duplicate", n)
		}
		if p := progress(t, e.coord, "lambda"); p.Done != 3 || p.Completed {
			t.Fatalf("after the first invocation: %+v", p)
		}
		again := recv()
		if len(again) != 1 || *again[0].Body != "chunk-2" {
			t.Fatalf("redelivered: %d messages", len(again))
		}
		if n := invoke(again); n != 0 {
			t.Fatalf("%d batch item failures on the retry", n)
		}
		p := progress(t, e.coord, "lambda")
		if p.Done != 4 || !p.Completed || p.Notified.IsZero() {
			t.Errorf("progress %+v", p)
		}
		if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
			t.Errorf("%d completion jobs, want 1", n)
		}
		if n := eff.get("lambda#0"); guarded && n != 1 {
			t.Errorf("chunk 0's effect applied %d times under the idempotency middleware", n)
		}
		if n, _, _ := e.sqs.Depth(e.work); n != 0 {
			t.Errorf("%d chunks left on the queue", n)
		}
	})
}

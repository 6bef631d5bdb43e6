package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The middleware works in Lambda as in the worker: two deliveries of one key,
// in two invocations, have one effect.
func TestLambdaDuplicatesHaveOneEffect(t *testing.T) {
	t.Parallel()
	guard, err := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var eff effects
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := m.Attribute(idempotency.KeyAttribute)
		eff.add(k)
		return nil
	}), guard.Middleware)
	f := sqstest.NewFake()
	url := f.CreateQueue("payments", nil)
	fn, err := lambda.NewHandler(h, lambda.Config{Client: f, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the producer sent it twice
		f.Send(url, "charge 10 EUR", func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]types.MessageAttributeValue{
				idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String("payment-77")},
			}
		})
		out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		resp, err := fn(context.Background(), sqstest.SQSEvent(sqstest.QueueARN("payments"), out.Messages))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("invocation: %v %v", resp, err)
		}
	}
	if got := eff.snapshot()["payment-77"]; got != 1 {
		t.Errorf("%d effects, want 1", got)
	}
	if s := guard.Stats(); s.Claimed != 1 || s.Duplicates != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// Transactional effects in Lambda: a job delivered in two invocations, whose
// handler adds its effect with AddWrites, applies it once.
func TestLambdaTransactionalEffect(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	guard, err := idempotency.New(newStore(t, db, idempotency.StoreConfig{}), idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := sqsworker.Chain(effectHandler(effects, &runs), guard.Middleware)
	f := sqstest.NewFake()
	url := f.CreateQueue("payments", nil)
	fn, err := lambda.NewHandler(h, lambda.Config{Client: f, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		f.Send(url, "charge 10 EUR", func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]types.MessageAttributeValue{
				idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String("payment-78")},
			}
		})
		out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		resp, err := fn(context.Background(), sqstest.SQSEvent(sqstest.QueueARN("payments"), out.Messages))
		if err != nil || len(resp.BatchItemFailures) != 0 {
			t.Fatalf("invocation: %v %v", resp, err)
		}
	}
	if n := applied(t, db, effects, "payment-78"); n != 1 || runs.Load() != 1 {
		t.Errorf("effect applied %d times, %d runs; want 1 and 1", n, runs.Load())
	}
	if s := guard.Stats(); s.Committed != 1 || s.Duplicates != 1 {
		t.Errorf("stats = %+v", s)
	}
}

// DynamoDB refusing connections from the moment a Lambda handler returns:
// the middleware's completion, retried, ends by the handler context's
// deadline, so that the function reports its batch before its own
// deadline (Lambda would stop it, and redeliver every record of the batch,
// one receive nearer the dead-letter queue); the record whose effect
// happened is not reported failed. The same for the writes of a handler
// run without idempotency (Config.Disabled), committed alone: the record
// is reported failed, its writes not committed. And for the release of a
// handler cut short by the deadline: one attempt, briefly. Before, the
// completion, commit or release was retried for 30s past the deadline.
func TestLambdaCompletionEndsByDeadline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		disabled bool
		cut      bool // the handler runs until its context ends
		failed   int  // records reported failed
	}{{"completion", false, false, 0}, {"writes-without-claim", true, false, 1}, {"release-of-cut-handler", false, true, 1}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			store, db, proxy := storeBehindProxy(t)
			effects := newEffectsTable(t, db)
			guard, err := idempotency.New(store, idempotency.Config{Disabled: c.disabled, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				if err := proxy.Refuse(); err != nil {
					return err
				}
				if c.cut {
					<-ctx.Done()
					return ctx.Err()
				}
				if c.disabled {
					return idempotency.AddWrites(ctx, effectWrite(effects, m.ID))
				}
				return nil
			}), guard.Middleware)
			f := sqstest.NewFake()
			url := f.CreateQueue("payments", nil)
			fn, err := lambda.NewHandler(h, lambda.Config{Client: f, SafetyMargin: 4 * time.Second, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			f.Send(url, "charge 10 EUR", func(in *sqs.SendMessageInput) {
				in.MessageAttributes = map[string]types.MessageAttributeValue{
					idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String("payment-79")},
				}
			})
			out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"},
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
			defer cancel()
			done := make(chan events.SQSEventResponse, 1)
			go func() {
				resp, _ := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("payments"), out.Messages))
				done <- resp
			}()
			resp := wait(t, done, "end of the invocation")
			if ctx.Err() != nil {
				t.Error("the function returned after its deadline: Lambda would have stopped it")
			}
			if len(resp.BatchItemFailures) != c.failed {
				t.Errorf("resp %v, want %d records reported failed", resp, c.failed)
			}
			if s := guard.Stats(); s.StoreErrors == 0 {
				t.Errorf("stats = %+v, want failed requests", s)
			}
		})
	}
}

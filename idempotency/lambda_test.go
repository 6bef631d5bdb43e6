package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/stopby"
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

// slowCommit is DynamoDB applying a commit 300 ms after it is sent, whether
// or not its caller still waits for the answer.
type slowCommit struct{ *dynamodb.Client }

func (s slowCommit) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		// Under way all the same: DynamoDB applies it.
	}
	out, err := s.Client.TransactWriteItems(context.WithoutCancel(ctx), in, opts...)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return out, err
}

// A handler that returns just before its deadline in a Lambda invocation
// with a safety margin under a second (800 ms), its commit taking 300 ms,
// on the fake SQS and DynamoDB Local: the work after the handler ends
// before the invocation stops waiting for the record (100 ms before it at
// this margin, so that a loaded machine does not blur the two), so that the record is settled
// by its outcome, not given up as a handler that ignores its context (whose
// record, reported failed with its visibility left alone, SQS moves to the
// dead-letter queue on its last receive, though its job was done). Sent
// again, the job is not run again. Before, the commit could run 250 ms past
// the handlers' deadline, past the invocation's give-up.
func TestLambdaJustInTimeCommitSettlesItsRecord(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	table := newStore(t, db, idempotency.StoreConfig{}).Config().Table
	effects := newEffectsTable(t, db)
	store, err := idempotency.NewDynamoStore(context.Background(), slowCommit{db}, idempotency.StoreConfig{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	h := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		runs.Add(1)
		if dl, ok := ctx.Deadline(); ok {
			time.Sleep(time.Until(dl) - 20*time.Millisecond) // done just in time
		}
		return idempotency.AddWrites(ctx, effectWrite(effects, "payment-80"))
	}))
	f := sqstest.NewFake()
	url := f.CreateQueue("payments", nil)
	var logs logBuffer
	fn, err := lambda.NewHandler(h, lambda.Config{Client: f, SafetyMargin: 800 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	f.Send(url, "charge 10 EUR", func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String("payment-80")},
		}
	})
	invoke := func(timeout time.Duration) events.SQSEventResponse {
		out, _ := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"}, VisibilityTimeout: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if len(out.Messages) != 1 {
			t.Fatalf("received %d messages, want 1", len(out.Messages))
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		resp, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("payments"), out.Messages))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	invoke(2 * time.Second)
	if strings.Contains(logs.String(), "ignores its context") {
		t.Errorf("a record whose handler returned was given up as one that ignores its context:\n%s", logs.String())
	}
	time.Sleep(1100 * time.Millisecond) // the first receive's visibility timeout, if the record was not released
	if resp := invoke(10 * time.Second); len(resp.BatchItemFailures) != 0 {
		t.Errorf("sent again: %v, want the record done", resp)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
	if n := applied(t, db, effects, "payment-80"); n != 1 {
		t.Errorf("the effect was applied %d times, want once", n)
	}
}

// A handler that returns when no time is left before the Lambda invocation
// stops waiting for its record (it ignored its context's deadline), on
// DynamoDB Local: its commit is not sent (it could land after the record is
// reported), and the job's error says so, not marked unavailable: no
// DynamoDB outage for the circuit breaker to count. It was sent with a
// context already ended, failed locally, and counted as an outage.
func TestNoTimeLeftToCommitIsNoOutage(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	effects := newEffectsTable(t, db)
	guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, effectWrite(effects, "payment-81"))
	}))
	past := time.Now().Add(-time.Second)
	ctx := stopby.With(context.Background(), past, past)
	m := &sqsworker.Message{ID: "m-81", Body: "charge", MessageAttributes: map[string]sqsworker.MessageAttribute{
		idempotency.KeyAttribute: {DataType: "String", StringValue: "payment-81"}}}
	err = h.HandleMessage(ctx, m)
	if err == nil || sqsworker.IsUnavailable(err) || !strings.Contains(err.Error(), "no time left") {
		t.Errorf("HandleMessage: %v; want the job's error, saying no time was left, not unavailable", err)
	}
	if n := applied(t, db, effects, "payment-81"); n != 0 {
		t.Errorf("the effect was applied %d times, want none", n)
	}
	if s := guard.Stats(); s.StoreErrors != 0 {
		t.Errorf("stats %+v: want no store error", s)
	}
}

package idempotency_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/worker"
)

func chargeCard(ctx context.Context, body string) error { return nil }

// A worker whose payments are charged once per idempotency key, however
// often their messages arrive.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewDynamoStore(ctx, dynamodb.NewFromConfig(cfg), idempotency.StoreConfig{
		Table: "payments-idempotency", // partition key "id" (S), TTL on "expiry"
	})
	if err != nil {
		log.Fatal(err) // names a missing table or a wrong key
	}
	guard, err := idempotency.New(store, idempotency.Config{CacheSize: 10000})
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(cfg), worker.Config{QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/payments"})
	if err != nil {
		log.Fatal(err)
	}
	pay := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return chargeCard(ctx, m.Body)
	})
	if err := w.Run(ctx, sqsworker.Chain(pay, guard.Middleware)); err != nil {
		log.Fatal(err)
	}
}

// A handler whose effect is a DynamoDB write adds it to its claim's
// completion: the debit and the completed idempotency record are committed
// in one transaction, or not at all. The ConditionCheck is the job's own
// business rule. It needs DynamoDB (DynamoDB Local will do) and a queue.
func ExampleAddWrites() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg)
	store, err := idempotency.NewDynamoStore(ctx, db, idempotency.StoreConfig{Table: "payments-idempotency"})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.New(store, idempotency.Config{})
	if err != nil {
		log.Fatal(err)
	}
	debit := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		var p struct {
			Account string `json:"account"`
			Cents   int    `json:"cents"`
		}
		if err := json.Unmarshal([]byte(m.Body), &p); err != nil {
			return sqsworker.Permanent(err)
		}
		key := map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: p.Account}}
		amount := &types.AttributeValueMemberN{Value: strconv.Itoa(p.Cents)}
		return idempotency.AddWrites(ctx, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String("accounts"), // same account and region as the idempotency table
			Key:                       key,
			UpdateExpression:          aws.String("SET balance = balance - :amount"),
			ConditionExpression:       aws.String("balance >= :amount"), // fails the job with a *TransactionCanceledError
			ExpressionAttributeValues: map[string]types.AttributeValue{":amount": amount},
		}})
	})
	w, err := worker.New(sqs.NewFromConfig(cfg), worker.Config{QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/debits"})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx, sqsworker.Chain(debit, guard.Middleware)); err != nil {
		log.Fatal(err)
	}
}

// An effect outside DynamoDB cannot join the transaction: the handler
// passes its idempotency key to a service that deduplicates requests, so
// that a job run again after a crash repeats its request instead of making
// a new one.
func ExampleKeyFromContext() {
	notify := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://payments.example.com/charges", strings.NewReader(m.Body))
		if err != nil {
			return sqsworker.Permanent(err)
		}
		if key, ok := idempotency.KeyFromContext(ctx); ok {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return sqsworker.Unavailable(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode >= 500 {
			return sqsworker.Unavailable(fmt.Errorf("payments: %s", resp.Status))
		}
		return nil
	})
	_ = notify // wrapped with guard.Middleware, as in the package example
}

// A failed condition of the handler's own writes is its business logic: a
// middleware outside the idempotency middleware decides what it means, here
// a Permanent failure (the dead-letter queue, with its reason) instead of
// retries.
func ExampleTransactionCanceledError() {
	refusalsArePermanent := func(next sqsworker.Handler) sqsworker.Handler {
		return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			err := next.HandleMessage(ctx, m)
			var cancelled *idempotency.TransactionCanceledError
			if errors.As(err, &cancelled) && cancelled.ConditionFailed(0) {
				return sqsworker.Permanent(err)
			}
			return err
		})
	}
	// What the idempotency middleware returns when the debit's condition
	// fails.
	guarded := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return &idempotency.TransactionCanceledError{Key: "debit-42", Reasons: []types.CancellationReason{{
			Code: aws.String("ConditionalCheckFailed"), Message: aws.String("The conditional request failed"),
		}}}
	})
	err := refusalsArePermanent(guarded).HandleMessage(context.Background(), &sqsworker.Message{ID: "m-1"})
	var permanent *sqsworker.PermanentError
	fmt.Println(errors.As(err, &permanent))
	fmt.Println(err)
	// Output:
	// true
	// permanent: idempotency: DynamoDB cancelled the writes of key "debit-42": write 0: ConditionalCheckFailed (The conditional request failed)
}

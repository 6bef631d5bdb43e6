package idempotency_test

import (
	"context"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
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

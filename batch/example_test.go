package batch_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/worker"
)

// A report split into chunks: the producer creates the batch, a worker
// runs the chunks (each chunk's effects, idempotency record and count in
// one transaction), and the completion job goes to the reports queue once
// every chunk has succeeded.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	db, queues := dynamodb.NewFromConfig(cfg), sqs.NewFromConfig(cfg)
	// The idempotency table holds the batches too.
	coord, err := batch.New(ctx, db, queues, batch.Config{Table: "jobs-idempotency"})
	if err != nil {
		log.Fatal(err) // names a missing table or a wrong key
	}

	// Producer side.
	spec := batch.Spec{
		ID:       "report-2026-12",
		QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/report-chunks",
		Callback: batch.Callback{
			QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/reports",
			Body:     `{"report":"2026-12","action":"assemble"}`,
		},
	}
	for from := 0; from < 100_000; from += 1000 {
		spec.Chunks = append(spec.Chunks, producer.Message{Body: fmt.Sprintf(`{"rows":[%d,%d]}`, from, from+999)})
	}
	if err := coord.Create(ctx, spec); err != nil {
		log.Fatal(err) // safe to call again with the same spec
	}

	// Consumer side (the same in lambda.Start).
	store, err := idempotency.NewDynamoStore(ctx, db, idempotency.StoreConfig{Table: "jobs-idempotency", KeyPrefix: "jobs"})
	if err != nil {
		log.Fatal(err)
	}
	guard, err := idempotency.New(store, idempotency.Config{})
	if err != nil {
		log.Fatal(err)
	}
	summarise := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return nil // summarise the rows; add DynamoDB writes with idempotency.AddWrites
	})
	w, err := worker.New(queues, worker.Config{QueueURL: spec.QueueURL})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Run(ctx, coord.WithIdempotency(guard.Middleware)(summarise)); err != nil {
		log.Fatal(err)
	}
}

// The keys and the attribute a batch's messages carry.
func ExampleParseChunk() {
	m := &sqsworker.Message{MessageAttributes: map[string]sqsworker.MessageAttribute{
		batch.Attribute:          {DataType: "String", StringValue: "report-2026-12#41"},
		idempotency.KeyAttribute: {DataType: "String", StringValue: batch.ChunkKey("report-2026-12", 41)},
	}}
	id, i, ok := batch.ParseChunk(m)
	fmt.Println(id, i, ok)
	fmt.Println(batch.ChunkKey(id, i))
	fmt.Println(batch.DoneKey(id))
	fmt.Println(batch.CheckID("report#12"))
	// Output:
	// report-2026-12 41 true
	// batch#report-2026-12#41
	// batch#report-2026-12#done
	// batch: batch ID "report#12": use letters, digits and _ . : / = + @ - only (not #, which separates the parts of keys)
}

package worker_test

import (
	"context"
	"log"
	"os/signal"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/worker"
)

// A worker process for ECS: it runs until the task is stopped (SIGTERM), then
// finishes its in-flight jobs before exiting. The SDK finds the endpoint,
// region and credentials in its usual places (AWS_ENDPOINT_URL_SQS points it
// at a local emulator).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	w, err := worker.New(sqs.NewFromConfig(cfg), worker.Config{
		QueueURL:    "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
		Concurrency: 32,
	})
	if err != nil {
		log.Fatal(err)
	}
	err = w.Run(ctx, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		log.Printf("job %s, attempt %d", m.ID, m.ReceiveCount)
		return nil
	}))
	if err != nil {
		log.Fatal(err)
	}
}

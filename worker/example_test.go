package worker_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
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

// One worker over a critical and a low queue: 8 handler slots, 2 of which
// only the critical queue may use; a slot that frees goes to the critical
// queue while it has messages, and the low queue's oldest message waits at
// most about an hour before the starvation guard gives it a share.
func ExampleMultiWorker() {
	f := sqstest.NewFake() // in memory; an *sqs.Client in production
	critical := f.CreateQueue("critical", nil)
	low := f.CreateQueue("low", nil)
	for range 20 {
		f.Send(low, "report")
	}
	for range 3 {
		f.Send(critical, "payment-failed")
	}

	w, err := worker.NewMulti(f, worker.MultiConfig{
		Concurrency: 8,
		Queues: []worker.QueueConfig{
			{Config: worker.Config{QueueURL: critical, WaitTime: time.Second}, Priority: 1, Reserved: 2},
			{Config: worker.Config{QueueURL: low, WaitTime: time.Second}, MaxAge: time.Hour},
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	var handled sync.Map // queue URL -> *atomic.Int64
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			n, _ := handled.LoadOrStore(m.QueueURL, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
			return nil
		}))
	}()
	for {
		s := w.Stats()
		if s[0].Deleted+s[1].Deleted == 23 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	for _, s := range w.Stats() {
		fmt.Printf("priority %d: %d handled, %d deleted\n", s.Priority, s.Succeeded, s.Deleted)
	}
	// Output:
	// priority 1: 3 handled, 3 deleted
	// priority 0: 20 handled, 20 deleted
}

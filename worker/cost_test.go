package worker_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/worker"
)

// stubSQS answers every receive at once with a pre-built batch of messages
// and accepts deletes and visibility changes at no cost, so that what a
// benchmark measures is the worker's own work: receive loop, dispatch,
// heartbeat tracking, handler call, settle and batched acknowledgement.
type stubSQS struct {
	batch   []types.Message
	deleted atomic.Int64
	// ok lists entries 0 to 9 as successful, for the answers to batch calls.
	ok  [10]types.DeleteMessageBatchResultEntry
	vok [10]types.ChangeMessageVisibilityBatchResultEntry
}

func newStubSQS() *stubSQS {
	s := &stubSQS{batch: make([]types.Message, 10)}
	for i := range s.ok {
		s.ok[i].Id = aws.String(strconv.Itoa(i))
		s.vok[i].Id = s.ok[i].Id
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for i := range s.batch {
		s.batch[i] = types.Message{
			MessageId: aws.String("m" + strconv.Itoa(i)), ReceiptHandle: aws.String("rh" + strconv.Itoa(i)),
			Body: aws.String(`{"job":1}`), MD5OfBody: aws.String("x"),
			Attributes: map[string]string{"ApproximateReceiveCount": "1", "SentTimestamp": now,
				"ApproximateFirstReceiveTimestamp": now, "SenderId": "AIDA"},
		}
	}
	return s
}

func (s *stubSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &sqs.ReceiveMessageOutput{Messages: s.batch[:in.MaxNumberOfMessages]}, nil
}

func (s *stubSQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	s.deleted.Add(int64(len(in.Entries)))
	return &sqs.DeleteMessageBatchOutput{Successful: s.ok[:len(in.Entries)]}, nil
}

func (s *stubSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return &sqs.ChangeMessageVisibilityBatchOutput{Successful: s.vok[:len(in.Entries)]}, nil
}

func (s *stubSQS) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"VisibilityTimeout": "30", "QueueArn": "arn:aws:sqs:us-east-1:000000000000:stub"}}, nil
}

func (s *stubSQS) GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return &sqs.GetQueueUrlOutput{}, nil
}

func (s *stubSQS) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return &sqs.SendMessageOutput{}, nil
}

// BenchmarkWorkerRuntimeCost measures the worker's own cost per message, with
// the heartbeat on (the default) and off, against a stub SQS that costs
// nothing: run with
// `go test -run '^$' -bench WorkerRuntimeCost -benchmem ./worker`. Besides
// the wall time per message (ns/op) it reports the process's CPU time per
// message (cpu-ns/msg), which is steadier on a shared machine.
func BenchmarkWorkerRuntimeCost(b *testing.B) {
	for _, hb := range []bool{true, false} {
		name := "heartbeat"
		if !hb {
			name = "no-heartbeat"
		}
		b.Run(name, func(b *testing.B) {
			s := newStubSQS()
			w, err := worker.New(s, worker.Config{
				QueueURL: "https://sqs.us-east-1.amazonaws.com/000000000000/stub", Concurrency: 80, WaitTime: time.Second,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), DisableHeartbeat: !hb,
			})
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan error, 1)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			go func() {
				done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
			}()
			for s.deleted.Load() < int64(b.N) {
				time.Sleep(100 * time.Microsecond)
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/msg")
			if err := w.Shutdown(context.Background()); err != nil {
				b.Fatal(err)
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

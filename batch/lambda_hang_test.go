package batch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// In a Lambda invocation, a chunk on the last receive its queue's redrive
// policy allows (2) succeeds, and DynamoDB then takes requests without
// answering (a partition): the count ends by the invocation's handlers'
// deadline, not countBudget (30s) later, so that the adapter releases the
// chunk in a fresh copy before the function answers. Nothing is
// dead-lettered; the copy runs and counts the chunk once DynamoDB answers
// again. Before, the count outlived the invocation: the chunk was reported
// failed with its visibility left alone (its handler still running, as if
// it ignored its context), and SQS moved it to the dead-letter queue on its
// next receive. On the fake SQS and on the local SQS, both with DynamoDB
// Local behind a fault proxy. The queue's visibility timeout is longer than
// the invocation, as Lambda asks of a mapping: a shorter one ends the
// record's lease while the invocation runs, and the record is then SQS's.
func TestLambdaCountEndsByTheDeadline(t *testing.T) {
	t.Parallel()
	for _, emulator := range []bool{false, true} {
		name := "fake"
		if emulator {
			name = "emulator"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			proxy := dynamoProxy(t)
			t.Cleanup(func() { _ = proxy.Pass() })
			db := localtest.NewDynamoDB(t)
			table := newTable(t, db)
			viaProxy := localtest.NewDynamoDB(t, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
			var (
				client lambda.API
				sq     interface {
					ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
				}
				work, dlq, arn string
				depth          func(url string) int
				visibleAgain   func(h *string)
			)
			if emulator {
				c := localtest.NewSQS(t)
				q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 5 * time.Second})
				client, sq, work, dlq, arn = c, c, q.URL, q.DLQURL, q.ARN
				depth = func(url string) int { v, f, d := localtest.Depth(t, c, url); return v + f + d }
				visibleAgain = func(h *string) {
					if _, err := c.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &work, ReceiptHandle: h}); err != nil {
						t.Fatal(err)
					}
				}
			} else {
				f := sqstest.NewFake()
				dlq = f.CreateQueue("chunks-dlq", nil)
				work = f.CreateQueue("chunks", map[string]string{"VisibilityTimeout": "5",
					"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("chunks-dlq") + `","maxReceiveCount":2}`})
				client, sq, arn = f, f, sqstest.QueueARN("chunks")
				depth = func(url string) int { v, fl, d := f.Depth(url); return v + fl + d }
				visibleAgain = func(h *string) {
					if _, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &work, ReceiptHandle: h}); err != nil {
						t.Fatal(err)
					}
				}
			}
			callbacks := work // the completion's queue does not matter here
			coord, err := batch.New(context.Background(), viaProxy, client.(batch.SQSAPI), batch.Config{Table: table, MaxReceiveCount: 2, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if err := coord.Create(ctx, batch.Spec{ID: "hang", QueueURL: work, Chunks: []producer.Message{{Body: "chunk-0"}},
				Callback: batch.Callback{QueueURL: callbacks, Body: "done"}}); err != nil {
				t.Fatal(err)
			}
			recv := func() []types.Message {
				t.Helper()
				for range 20 {
					out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &work, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
						MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
					if err != nil {
						t.Fatal(err)
					}
					if len(out.Messages) > 0 {
						return out.Messages
					}
				}
				return nil
			}
			first := recv() // its first attempt failed
			if len(first) != 1 {
				t.Fatalf("received %d chunks, want 1", len(first))
			}
			visibleAgain(first[0].ReceiptHandle)
			last := recv()
			if len(last) != 1 || last[0].Attributes["ApproximateReceiveCount"] != "2" {
				t.Fatalf("the chunk's last receive: %d messages", len(last))
			}
			var blackholed atomic.Bool
			fn, err := lambda.NewHandler(coord.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
				if !blackholed.Swap(true) { // DynamoDB stops answering
					if err := proxy.Blackhole(); err != nil {
						t.Error(err)
					}
				}
				return nil
			})), lambda.Config{Client: client, SafetyMargin: 2 * time.Second, DisableHeartbeat: true, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			ictx, cancel := context.WithTimeout(ctx, 4*time.Second)
			resp, err := fn(ictx, sqstest.SQSEvent(arn, last))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if err := proxy.Pass(); err != nil {
				t.Fatal(err)
			}
			if n := len(resp.BatchItemFailures); n != 0 {
				t.Errorf("%d batch item failures, want none: the chunk released in a fresh copy, its original deleted", n)
			}
			// The event source mapping: a failed record comes back after
			// its visibility timeout (5s), and SQS moves it then.
			time.Sleep(6 * time.Second)
			again := recv()
			if n := depth(dlq); n != 0 {
				t.Errorf("%d chunks dead-lettered, want none: no handler failed", n)
			}
			if len(again) != 1 {
				t.Fatalf("received %d messages after the invocation, want the chunk's fresh copy", len(again))
			}
			resp, err = fn(ctx, sqstest.SQSEvent(arn, again))
			if err != nil || len(resp.BatchItemFailures) != 0 {
				t.Fatalf("the copy's invocation: %v, %d failures", err, len(resp.BatchItemFailures))
			}
			if p := progress(t, coord, "hang"); p.Done != 1 || !p.Completed {
				t.Errorf("progress %+v, want the chunk counted", p)
			}
		})
	}
}

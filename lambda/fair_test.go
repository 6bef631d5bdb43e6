package lambda_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// A fair queue is a standard queue whose messages carry a group
// (MessageGroupId), which keeps no order: its records run as a standard
// queue's do, each on its own. Before, a record with a group was taken for
// a FIFO record, and the record behind a failed one in its group was
// released without running.
func TestFairQueueRecordsRunAsStandard(t *testing.T) {
	f := newFake("300")
	url := sqstest.QueueURL("orders")
	for _, b := range []string{"first", "second"} {
		f.Send(url, b)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("received %d of 2: %v", len(out.Messages), err)
	}
	for i := range out.Messages { // as SQS gives a fair queue's messages
		out.Messages[i].Attributes[sqsworker.AttrMessageGroupID] = "tenant-1"
	}
	var mu sync.Mutex
	ran := map[string]int{}
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		ran[m.Body]++
		mu.Unlock()
		if m.Body == "first" {
			return errors.New("first fails")
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, DisableHeartbeat: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("orders"), out.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if ran["second"] != 1 || len(resp.BatchItemFailures) != 1 {
		t.Errorf("second ran %d times, failures %v; want it run once and only the first failed", ran["second"], failedIDs(resp))
	}
}

// A FIFO queue's records whose queue is unknown (Config.QueueURL cannot
// map their eventSourceARN, and no queue has its name) are still FIFO
// records, by their eventSourceARN: the record behind a failed one in its
// group does not run. Its queue's name alone says so; before the queue's
// name decided, their group did.
func TestUnknownFIFOQueueRecordsKeepTheirOrder(t *testing.T) {
	f := newFake("300")
	url := sqstest.QueueURL("orders.fifo")
	for i, b := range []string{"first", "second"} {
		f.Send(url, b, func(in *sqs.SendMessageInput) {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(fmt.Sprint(i))
		})
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("received %d of 2: %v", len(out.Messages), err)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		ran[m.Body]++
		mu.Unlock()
		if m.Body == "first" {
			return errors.New("first fails")
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, DisableHeartbeat: true,
		QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("elsewhere.fifo"), out.Messages))
	if err != nil {
		t.Fatal(err)
	}
	if ran["second"] != 0 || len(resp.BatchItemFailures) != 2 {
		t.Errorf("second ran %d times, failures %v; want it not run, both reported failed", ran["second"], failedIDs(resp))
	}
}

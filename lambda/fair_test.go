package lambda_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// firstFails sends "first" then "second" to queue on f, in group "g" on a
// FIFO queue, receives both, and invokes a function whose handler fails
// "first", with the records as from arn. It returns the response and how
// many times "second" ran.
func firstFails(t *testing.T, f *sqstest.Fake, queue, arn string, cfg lambda.Config, edit func(*types.Message)) (events.SQSEventResponse, int) {
	t.Helper()
	url := sqstest.QueueURL(queue)
	for i, b := range []string{"first", "second"} {
		f.Send(url, b, func(in *sqs.SendMessageInput) {
			if strings.HasSuffix(queue, ".fifo") {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(fmt.Sprint(i))
			}
		})
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("received %d of 2: %v", len(out.Messages), err)
	}
	if edit != nil {
		for i := range out.Messages {
			edit(&out.Messages[i])
		}
	}
	var mu sync.Mutex
	second := 0
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.Body == "first" {
			return errors.New("first fails")
		}
		mu.Lock()
		second++
		mu.Unlock()
		return nil
	})
	cfg.Client, cfg.DisableHeartbeat = f, true
	fn := newHandler(t, h, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := fn(ctx, sqstest.SQSEvent(arn, out.Messages))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	return resp, second
}

// A fair queue is a standard queue whose messages carry a group
// (MessageGroupId), which keeps no order: its records run as a standard
// queue's do, each on its own. Before, a record with a group was taken for
// a FIFO record, and the record behind a failed one in its group was
// released without running.
func TestFairQueueRecordsRunAsStandard(t *testing.T) {
	resp, second := firstFails(t, newFake("300"), "orders", sqstest.QueueARN("orders"), lambda.Config{}, func(m *types.Message) {
		m.Attributes[sqsworker.AttrMessageGroupID] = "tenant-1" // as SQS gives a fair queue's messages
	})
	if second != 1 || len(resp.BatchItemFailures) != 1 {
		t.Errorf("second ran %d times, failures %v; want it run once and only the first failed", second, failedIDs(resp))
	}
}

// A FIFO queue's records whose queue is unknown (Config.QueueURL cannot
// map their eventSourceARN, and no queue has its name) are still FIFO
// records, by their eventSourceARN: the record behind a failed one in its
// group does not run. Its queue's name alone says so; before the queue's
// name decided, their group did.
func TestUnknownFIFOQueueRecordsKeepTheirOrder(t *testing.T) {
	cfg := lambda.Config{QueueURL: func(arn string) (string, error) { return "", fmt.Errorf("no mapping for %s", arn) }}
	resp, second := firstFails(t, newFake("300"), "orders.fifo", sqstest.QueueARN("elsewhere.fifo"), cfg, nil)
	if second != 0 || len(resp.BatchItemFailures) != 2 {
		t.Errorf("second ran %d times, failures %v; want it not run, both reported failed", second, failedIDs(resp))
	}
}

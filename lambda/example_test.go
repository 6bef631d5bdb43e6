package lambda_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// In a function's main, lambda.Start(handler, lambda.Config{}) is all there
// is. NewHandler gives the same function for tests: here against the
// in-memory SQS, with an event built from messages it really received.
func ExampleNewHandler() {
	client := sqstest.NewFake()
	url := client.CreateQueue("emails", nil)
	client.Send(url, "welcome@example.com")
	client.Send(url, "not-an-address")
	out, _ := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	event := sqstest.SQSEvent(sqstest.QueueARN("emails"), out.Messages)

	send := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "not-an-address" {
			return errors.New("smtp: 550 no such user")
		}
		return nil
	})
	fn, err := lambda.NewHandler(send, lambda.Config{
		Client: client,
		Logger: slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		panic(err)
	}
	resp, err := fn(context.Background(), event)
	fmt.Println("failed records:", len(resp.BatchItemFailures), "error:", err)
	fmt.Println("the failed one:", resp.BatchItemFailures[0].ItemIdentifier == *out.Messages[1].MessageId)
	// Output:
	// failed records: 1 error: <nil>
	// the failed one: true
}

package sqstest_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/sqstest"
)

// A queue is created, a message sent, received and deleted, all in memory.
func Example() {
	ctx := context.Background()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "30"})
	fmt.Println(url)

	_, err := f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("hello")})
	if err != nil {
		panic(err)
	}

	out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		panic(err)
	}
	m := out.Messages[0]
	fmt.Println(aws.ToString(m.Body), "received", m.Attributes["ApproximateReceiveCount"], "time(s)")

	del, err := f.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("0"), ReceiptHandle: m.ReceiptHandle},
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println("deleted:", len(del.Successful), "failed:", len(del.Failed))

	visible, inFlight, delayed := f.Depth(url)
	fmt.Println("left:", visible, inFlight, delayed)
	// Output:
	// https://sqs.us-east-1.amazonaws.com/000000000000/jobs
	// hello received 1 time(s)
	// deleted: 1 failed: 0
	// left: 0 0 0
}

// Failures are injected for whole calls, and for single entries of batch
// calls.
func ExampleFake_FailNext() {
	ctx := context.Background()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)

	f.FailNext(sqstest.OpReceiveMessage, &smithy.GenericAPIError{Code: "RequestThrottled", Message: "slow down"}, 1)
	_, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
	var ae smithy.APIError
	if errors.As(err, &ae) {
		fmt.Println("first receive:", ae.ErrorCode())
	}
	_, err = f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
	fmt.Println("second receive:", err)

	f.Send(url, "hello")
	out, _ := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
	f.FailEntries(sqstest.OpDeleteMessageBatch, "InternalError", false, 1)
	del, _ := f.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("0"), ReceiptHandle: out.Messages[0].ReceiptHandle},
	}})
	fmt.Println("delete:", aws.ToString(del.Failed[0].Code), "sender fault:", del.Failed[0].SenderFault)
	fmt.Println("receive calls:", f.Calls(sqstest.OpReceiveMessage))
	// Output:
	// first receive: RequestThrottled
	// second receive: <nil>
	// delete: InternalError sender fault: false
	// receive calls: 3
}

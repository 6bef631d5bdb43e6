package visibility_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// An Extender keeps a message invisible while its job runs. Here a round is
// made by hand; in a program Run makes one every Config.Interval.
func Example() {
	client := sqstest.NewFake() // an *sqs.Client in production
	url := client.CreateQueue("jobs", map[string]string{"VisibilityTimeout": "2"})
	client.Send(url, "render report 7")
	out, _ := client.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url})
	msg := &sqsworker.Message{ID: *out.Messages[0].MessageId, ReceiptHandle: *out.Messages[0].ReceiptHandle}

	ext, err := visibility.New(client, visibility.Config{
		QueueURL:          url,
		VisibilityTimeout: 2 * time.Second,
		Extension:         10 * time.Second,
		Threshold:         1500 * time.Millisecond,
		Interval:          500 * time.Millisecond,
	})
	if err != nil {
		panic(err)
	}
	ctx, lease := ext.Track(context.Background(), msg, time.Now())
	defer lease.Release()
	lease.OnExtend(func(until time.Time) { fmt.Println("extended") })

	time.Sleep(600 * time.Millisecond) // 1.4s left: due
	ext.Round(ctx)
	fmt.Println("calls:", ext.Stats().Calls, "lost:", errors.Is(context.Cause(ctx), visibility.ErrLeaseLost))
	// Output:
	// extended
	// calls: 1 lost: false
}

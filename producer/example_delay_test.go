package producer_test

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
)

// A job sent to run in 40 minutes: SQS delays it 15 minutes, the most it
// can, and the message carries the time it may run, which the worker and
// the Lambda adapter hold it back until. A delay of 15 minutes or less is
// SQS's own.
func ExampleProducer_SendAfter() {
	ctx := context.Background()
	clock := sqstest.NewClock(time.Now())
	f := sqstest.NewFake()
	f.Now = clock.Now
	url := f.CreateQueue("jobs", nil)
	p, err := producer.New(f, producer.Config{QueueURL: url})
	if err != nil {
		panic(err)
	}

	sentAt := time.Now()
	if _, err := p.SendAfter(ctx, 40*time.Minute, producer.Message{Body: `{"invoice":7}`, IdempotencyKey: "invoice-7"}); err != nil {
		panic(err)
	}
	if _, err := p.SendAfter(ctx, 10*time.Minute, producer.Message{Body: `{"invoice":8}`, IdempotencyKey: "invoice-8"}); err != nil {
		panic(err)
	}
	_, _, delayed := f.Depth(url)
	fmt.Println("delayed:", delayed)

	clock.Advance(15 * time.Minute)
	out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
	if err != nil {
		panic(err)
	}
	for _, m := range out.Messages {
		fmt.Println("after 15m:", aws.ToString(m.Body))
		a, long := m.MessageAttributes[sqsworker.AttrNotBefore]
		if !long {
			fmt.Println("  runs now: SQS's own delay is over")
			continue
		}
		nb, _ := strconv.ParseInt(aws.ToString(a.StringValue), 10, 64)
		fmt.Println("  held back until", time.UnixMilli(nb).Sub(sentAt).Round(time.Minute), "after it was sent")
	}

	err = producer.Validate(producer.Message{Body: "x", Delay: 400 * 24 * time.Hour}, false)
	fmt.Println(err)
	// Output:
	// delayed: 2
	// after 15m: {"invoice":7}
	//   held back until 40m0s after it was sent
	// after 15m: {"invoice":8}
	//   runs now: SQS's own delay is over
	// producer: invalid message: delay 9600h0m0s is over the longest delay of 365 days (sqsworker.MaxDelay): send the job later, or shorten the delay
}

package producer_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
)

// Jobs are sent in batches; each message's Result says whether it was sent,
// and a message SQS would refuse is reported without being sent. Here the
// in-memory sqstest.Fake stands in for the *sqs.Client.
func Example() {
	ctx := context.Background()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)

	p, err := producer.New(f, producer.Config{QueueURL: url})
	if err != nil {
		panic(err)
	}

	id, err := p.Send(ctx, producer.Message{
		Body:           `{"order":42}`,
		IdempotencyKey: "order-42",
		Attributes: map[string]sqsworker.MessageAttribute{
			"priority": {DataType: "Number", StringValue: "1"},
		},
	})
	fmt.Println("sent one:", id != "", err)

	msgs := []producer.Message{
		{Body: `{"order":43}`},
		{Body: `{"order":44}`, Delay: 30 * time.Second},
		{Body: `{"order":45}`, Delay: 2 * time.Minute},
		{Body: `{"order":46}`, Delay: -time.Hour},
	}
	res, err := p.SendBatch(ctx, msgs)
	for i, r := range res {
		fmt.Printf("message %d sent: %v\n", i, r.Err == nil)
	}
	fmt.Println(err)

	visible, _, delayed := f.Depth(url)
	fmt.Println("visible:", visible, "delayed:", delayed)
	// Output:
	// sent one: true <nil>
	// message 0 sent: true
	// message 1 sent: true
	// message 2 sent: true
	// message 3 sent: false
	// message 3: producer: invalid message: delay -1h0m0s is negative: use 0 to run the job at once
	// visible: 2 delayed: 2
}

// Validate names every problem of a message, before any request.
func ExampleValidate() {
	err := producer.Validate(producer.Message{Body: "", Delay: 5 * time.Second}, true)
	fmt.Println(err)
	// Output:
	// producer: invalid message: the body is empty
	// a FIFO queue needs a message group ID
	// FIFO queues take no per-message delay
}

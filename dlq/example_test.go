package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/sqstest"
)

// newQueues makes a queue "orders" whose redrive policy sends its dead
// letters to "orders-dlq", in an in-memory SQS, and dead-letters three
// messages the way the runtimes do: a copy with failure metadata.
func newQueues() (*sqstest.Fake, string, string) {
	f := sqstest.NewFake()
	dlqURL := f.CreateQueue("orders-dlq", nil)
	ordersURL := f.CreateQueue("orders", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":5}`, sqstest.QueueARN("orders-dlq")),
	})
	failedAt := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	for i, class := range []string{"upstream-unavailable", "invalid-order", "upstream-unavailable"} {
		attrs, _ := sqsworker.Failure{
			Error: class + ": boom", ErrorClass: class, Attempts: 1, FailedAt: failedAt.Add(time.Duration(i) * time.Minute),
			SourceQueue: ordersURL, MessageID: fmt.Sprintf("order-%d", i),
		}.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}})
		sdk := map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
		}
		f.Send(dlqURL, fmt.Sprintf(`{"order":%d}`, i), func(in *sqs.SendMessageInput) { in.MessageAttributes = sdk })
	}
	return f, ordersURL, dlqURL
}

// Scan reads a dead-letter queue with its failure metadata, and releases
// the messages.
func Example() {
	ctx := context.Background()
	f, _, _ := newQueues()

	q, err := dlq.Open(ctx, f, "orders-dlq", dlq.Config{})
	if err != nil {
		panic(err)
	}
	res, err := q.Scan(ctx, dlq.ScanConfig{})
	if err != nil {
		panic(err)
	}
	for _, m := range res.Messages {
		fmt.Println(m.OriginalID(), m.Failure.ErrorClass, m.Failure.FailedAt.Format(time.Kitchen), m.Verified())
	}
	fmt.Println(res.Coverage.Seen, "of about", res.Coverage.Approximate)
	visible, inFlight, _ := f.Depth(q.URL)
	fmt.Println("after the scan:", visible, "visible,", inFlight, "in flight")
	// Output:
	// order-0 upstream-unavailable 2:00PM true
	// order-1 invalid-order 2:01PM true
	// order-2 upstream-unavailable 2:02PM true
	// 3 of about 3
	// after the scan: 3 visible, 0 in flight
}

// A queue with a redrive policy of its own is a live source queue: it is
// refused before anything is received from it.
func ExampleOpen_notADeadLetterQueue() {
	ctx := context.Background()
	f, _, _ := newQueues()

	_, err := dlq.Open(ctx, f, "orders", dlq.Config{})
	fmt.Println(errors.Is(err, dlq.ErrNotDeadLetterQueue))
	fmt.Println(err)
	// Output:
	// true
	// orders is not a dead-letter queue: it has a redrive policy of its own (its messages go to orders-dlq after 5 receives): it is a source queue; receiving from a live queue would consume its messages, and purging it would lose them
}

// A dry run says what would move where; the replay moves one error class
// back to its source queue, at most 10 messages a second, and records
// each move.
func ExampleQueue_Replay() {
	ctx := context.Background()
	f, ordersURL, _ := newQueues()
	q, err := dlq.Open(ctx, f, "orders-dlq", dlq.Config{})
	if err != nil {
		panic(err)
	}
	cfg := dlq.ReplayConfig{
		Filter:    dlq.Filter{ErrorClasses: []string{"upstream-unavailable"}},
		PerSecond: 10,
		Audit: dlq.Audit{
			Caller: "arn:aws:iam::000000000000:role/nightly-replay",
			Record: func(_ context.Context, r dlq.AuditRecord) error {
				fmt.Println("audit:", r.Action, r.OriginalMessageID, "by", r.Caller)
				return nil
			},
		},
	}

	plan, err := q.Plan(ctx, cfg)
	if err != nil {
		panic(err)
	}
	for _, m := range plan.Messages {
		fmt.Println("would move", m.OriginalMessageID, "to", m.Destination == ordersURL)
	}

	res, err := q.Replay(ctx, cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("moved", res.Moved, "of", res.Scanned, "scanned; filter:", res.Filter)
	visible, _, _ := f.Depth(ordersURL)
	fmt.Println("orders holds", visible)
	// Output:
	// would move order-0 to true
	// would move order-2 to true
	// audit: replay-start order-0 by arn:aws:iam::000000000000:role/nightly-replay
	// audit: replay order-0 by arn:aws:iam::000000000000:role/nightly-replay
	// audit: replay-start order-2 by arn:aws:iam::000000000000:role/nightly-replay
	// audit: replay order-2 by arn:aws:iam::000000000000:role/nightly-replay
	// moved 2 of 3 scanned; filter: error-class="upstream-unavailable"
	// orders holds 2
}

// Filters combine: every condition set must hold.
func ExampleFilter() {
	now := time.Date(2026, 11, 29, 15, 0, 0, 0, time.UTC)
	since, _ := dlq.ParseTime("2h ago", now)
	f := dlq.Filter{
		ErrorClasses: []string{"upstream-unavailable", "rate-limited"},
		Attributes:   []dlq.Attribute{{Name: "tenant", Value: "acme"}},
		Since:        since,
		JSONFields:   []dlq.JSONField{{Path: "order.customer", Value: "c-42"}},
	}
	fmt.Println(f.Validate())
	fmt.Println(f)
	// Output:
	// <nil>
	// error-class in ("upstream-unavailable", "rate-limited") and attr tenant="acme" and failed at or after 2026-11-29T13:00:00Z and json order.customer="c-42"
}

// A runtime's dead-letter send whose reply was lost is sent again by the
// SDK: the dead-letter queue holds two copies of one job. A scan marks the
// second; a replay moves the job once and deletes the other copy.
func ExampleQueue_Replay_duplicateCopies() {
	ctx := context.Background()
	f, ordersURL, dlqURL := newQueues()
	attrs, _ := sqsworker.Failure{
		Error: "invalid-order: boom", ErrorClass: "invalid-order", Attempts: 1,
		FailedAt: time.Date(2026, 11, 29, 14, 1, 0, 0, time.UTC), SourceQueue: ordersURL, MessageID: "order-1",
	}.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}})
	sdk := map[string]types.MessageAttributeValue{}
	for k, v := range attrs {
		sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
	}
	f.Send(dlqURL, `{"order":1}`, func(in *sqs.SendMessageInput) { in.MessageAttributes = sdk }) // the SDK's second send

	q, err := dlq.Open(ctx, f, "orders-dlq", dlq.Config{})
	if err != nil {
		panic(err)
	}
	scan, err := q.Scan(ctx, dlq.ScanConfig{})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(scan.Messages), "messages,", scan.Duplicates, "duplicate")
	res, err := q.Replay(ctx, dlq.ReplayConfig{})
	if err != nil {
		panic(err)
	}
	fmt.Println("moved", res.Moved, "dropped", res.Duplicates, "of", res.Dropped[0].OriginalMessageID)
	visible, _, _ := f.Depth(ordersURL)
	left, _, _ := f.Depth(dlqURL)
	fmt.Println("orders:", visible, "orders-dlq:", left)
	// Output:
	// 4 messages, 1 duplicate
	// moved 3 dropped 1 of order-1
	// orders: 3 orders-dlq: 0
}

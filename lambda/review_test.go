package lambda_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// In a FIFO group, a record whose time has not come (ten minutes ahead)
// behind one that fails is released with the rest of its group, not held
// back: held, it stayed in flight for ten minutes, and SQS hands out no
// message of a group with one in flight, so that the failed record, at the
// group's head, came back ten minutes late rather than after its backoff
// (1s). On sqstest.Fake, which, as SQS, hands out several messages of one
// group in one receive (the emulator hands out one).
func TestFIFOHeldRecordBehindAFailureDoesNotLockTheGroup(t *testing.T) {
	t.Parallel()
	f := newFake("300")
	url := sqstest.QueueURL("orders.fifo")
	nb := strconv.FormatInt(time.Now().Add(10*time.Minute).UnixMilli(), 10)
	for i, body := range []string{"first", "later"} {
		f.Send(url, body, func(in *sqs.SendMessageInput) {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(strconv.Itoa(i))
			if body == "later" {
				in.MessageAttributes = map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: &nb}}
			}
		})
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("received %d of 2: %v", len(out.Messages), err)
	}
	fn := newHandler(t, sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.Body == "later" {
			t.Error("later ran before its time")
		}
		return errors.New("the dependency failed")
	}), lambda.Config{Client: f, DisableHeartbeat: true, Backoff: sqsworker.BackoffFunc(func(int, error) time.Duration { return time.Second })})
	invokeBy(t, fn, sqstest.SQSEvent(sqstest.QueueARN("orders.fifo"), out.Messages), 30*time.Second)
	time.Sleep(2 * time.Second) // the failed record's backoff
	again, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Messages) == 0 || aws.ToString(again.Messages[0].Body) != "first" {
		t.Errorf("after the backoff, received %d messages; want the group's failed head, first: the held record behind it locks the group", len(again.Messages))
	}
}

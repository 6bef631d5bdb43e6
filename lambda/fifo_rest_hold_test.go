package lambda_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// notBefore is the message attribute of a job to run at t.
func notBefore(t time.Time) map[string]types.MessageAttributeValue {
	return map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"),
		StringValue: aws.String(strconv.FormatInt(t.UnixMilli(), 10))}}
}

// fifoRestHandler fails "first" (to retry after its 1s backoff) and counts
// its runs; "later" must not run before its time.
func fifoRestHandler(t *testing.T, firstRuns *int) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if aws.ToString(&m.Body) == "first" {
			*firstRuns++
			return errors.New("first fails")
		}
		t.Errorf("record %q ran before its time", m.Body)
		return nil
	})
}

// In a FIFO group, a record whose time is an hour ahead, behind a record
// that failed (to retry after 1s), is released with the rest of its group,
// visible again at once, not held back by visibility for the hour: held
// back, it is in flight, which locks its group, and the failed record
// before it would wait the hour for its retry. It is held when its turn
// comes. Before, nothing of the group was received 3s on. The fake only:
// the local SQS hands out one message of a FIFO group at a time, so that a
// record is never in flight behind another of its group there.
func TestFIFORestNotHeldBehindFailedRecord(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := newFake("300")
		url := sqstest.QueueURL("orders.fifo")
		for i, b := range []string{"first", "later"} {
			f.Send(url, b, func(in *sqs.SendMessageInput) {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(strconv.Itoa(i))
				if b == "later" {
					in.MessageAttributes = notBefore(time.Now().Add(time.Hour))
				}
			})
		}
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
		if err != nil || len(out.Messages) != 2 {
			t.Fatalf("received %d of 2: %v", len(out.Messages), err)
		}
		runs := 0
		fn := newHandler(t, fifoRestHandler(t, &runs), lambda.Config{Client: f, DisableHeartbeat: true,
			Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("orders.fifo"), out.Messages))
		cancel()
		if err != nil || len(resp.BatchItemFailures) != 2 {
			t.Fatalf("invocation: %v, failures %v; want both failed", err, failedIDs(resp))
		}
		time.Sleep(3 * time.Second) // the failed record's backoff is over
		again, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Messages) == 0 || aws.ToString(again.Messages[0].Body) != "first" {
			t.Fatalf("received %d messages 3s on, want the failed record first, its backoff over (its group not locked by the record behind it)", len(again.Messages))
		}
	})
}

// A FIFO group the dispatch did not reach before the time to start records
// ended, whose first record's time is an hour ahead, is released with that
// record held back (by visibility, as its run would hold it: nothing of its
// group is before it), and the rest of the group behind it released.
// Received again at once, the group gives nothing: it waits for its first
// record's time.
func TestWaitingFIFOGroupHeadStillHeld(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := newFake("300")
		url := sqstest.QueueURL("orders.fifo")
		for i, s := range []struct{ group, body string }{{"a", "stall"}, {"b", "b-later"}, {"b", "b2"}} {
			f.Send(url, s.body, func(in *sqs.SendMessageInput) {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String(s.group), aws.String(strconv.Itoa(i))
				if s.body == "b-later" {
					in.MessageAttributes = notBefore(time.Now().Add(time.Hour))
				}
			})
		}
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
		if err != nil || len(out.Messages) != 3 {
			t.Fatalf("received %d of 3: %v", len(out.Messages), err)
		}
		release := make(chan struct{})
		h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			if m.Body == "stall" {
				<-release
				return nil
			}
			t.Errorf("record %q ran", m.Body)
			return nil
		})
		fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1, SafetyMargin: 2 * time.Second, DisableHeartbeat: true})
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		_, err = fn(ctx, sqstest.SQSEvent(sqstest.QueueARN("orders.fifo"), out.Messages))
		cancel()
		close(release)
		synctest.Wait()
		if err != nil {
			t.Fatal(err)
		}
		again, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range again.Messages {
			if g := aws.ToString(m.Body); g == "b-later" || g == "b2" {
				t.Errorf("%q received again at once: its group's first record, due in an hour, was not held back", g)
			}
		}
	})
}

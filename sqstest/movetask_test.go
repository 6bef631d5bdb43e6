package sqstest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/sqstest"
)

// A move task moves every visible message of a dead-letter queue back to
// the queue SQS's redrive moved it from, as a new message (new ID, new sent
// time, receive count from 0, no DeadLetterQueueSourceArn) that keeps its
// body, message attributes and trace header.
func TestMoveTaskBackToSource(t *testing.T) {
	f, clock := newFake(t)
	ctx := context.Background()
	dlq, src := newRedrivePair(f, map[string]string{"VisibilityTimeout": "10"})
	attrs := func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			"sqsworker.prior-attempts": {DataType: aws.String("Number"), StringValue: aws.String("7")},
		}
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			"AWSTraceHeader": {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793")},
		}
	}
	ids := []string{f.Send(src, "a", attrs), f.Send(src, "b", attrs)}
	recv(t, f, src, 10)
	clock.Advance(10 * time.Second)
	if got := recv(t, f, src, 10); len(got) != 0 { // both move to dlq
		t.Fatalf("received %d messages past maxReceiveCount", len(got))
	}
	dead := recv(t, f, dlq, 1) // "a" is in flight for 30s
	if len(dead) != 1 || aws.ToString(dead[0].Body) != "a" {
		t.Fatalf("dead-lettered %+v", dead)
	}
	clock.Advance(time.Minute)
	sent := clock.Now()
	out, err := f.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("dlq"))})
	if err != nil || aws.ToString(out.TaskHandle) == "" {
		t.Fatalf("StartMessageMoveTask: %v", err)
	}
	// "a" was in flight (visibility 30s, received a minute ago: visible
	// again), so both move.
	if v, fl, _ := f.Depth(dlq); v+fl != 0 {
		t.Errorf("dlq holds %d visible, %d in flight after the move", v, fl)
	}
	got := recv(t, f, src, 10)
	if len(got) != 2 {
		t.Fatalf("source queue has %d messages after the move, want 2", len(got))
	}
	for _, m := range got {
		id := aws.ToString(m.MessageId)
		if slices.Contains(ids, id) {
			t.Errorf("moved message kept its ID %s", id)
		}
		if m.Attributes["ApproximateReceiveCount"] != "1" || m.Attributes["SentTimestamp"] != millis(sent) ||
			m.Attributes["AWSTraceHeader"] == "" || m.Attributes["DeadLetterQueueSourceArn"] != "" {
			t.Errorf("moved message's system attributes %v", m.Attributes)
		}
		if a := m.MessageAttributes["sqsworker.prior-attempts"]; aws.ToString(a.StringValue) != "7" {
			t.Errorf("moved message's attributes %v: a move task keeps them all", m.MessageAttributes)
		}
	}
	tasks, err := f.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(sqstest.QueueARN("dlq"))})
	if err != nil || len(tasks.Results) != 1 {
		t.Fatalf("ListMessageMoveTasks: %v, %+v", err, tasks)
	}
	if r := tasks.Results[0]; aws.ToString(r.Status) != "COMPLETED" || r.ApproximateNumberOfMessagesMoved != 2 || r.TaskHandle != nil {
		t.Errorf("task %+v", r)
	}
}

// A message in flight stays; one sent to the dead-letter queue directly has
// no source to go back to and stays too, and the task fails; with a
// destination every visible message moves there.
func TestMoveTaskInFlightAndWithoutSource(t *testing.T) {
	f, clock := newFake(t)
	ctx := context.Background()
	dlq, _ := newRedrivePair(f, nil)
	other := f.CreateQueue("other", nil)
	f.Send(dlq, "held")
	f.Send(dlq, "direct")
	if got := recv(t, f, dlq, 1); len(got) != 1 || aws.ToString(got[0].Body) != "held" {
		t.Fatalf("received %+v", got)
	}
	if _, err := f.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("dlq"))}); err != nil {
		t.Fatal(err)
	}
	tasks, _ := f.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(sqstest.QueueARN("dlq"))})
	if r := tasks.Results[0]; aws.ToString(r.Status) != "FAILED" || r.ApproximateNumberOfMessagesMoved != 0 || aws.ToString(r.FailureReason) == "" {
		t.Errorf("task %+v", r)
	}
	if v, fl, _ := f.Depth(dlq); v != 1 || fl != 1 {
		t.Errorf("dlq: %d visible, %d in flight, want 1 and 1", v, fl)
	}
	clock.Advance(30 * time.Second)
	if _, err := f.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("dlq")),
		DestinationArn: aws.String(sqstest.QueueARN("other")), MaxNumberOfMessagesPerSecond: aws.Int32(5)}); err != nil {
		t.Fatal(err)
	}
	if b := bodies(recv(t, f, other, 10)); len(b) != 2 {
		t.Errorf("moved to other: %q", b)
	}
	tasks, _ = f.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(sqstest.QueueARN("dlq")), MaxResults: aws.Int32(10)})
	if len(tasks.Results) != 2 || aws.ToString(tasks.Results[0].Status) != "COMPLETED" || aws.ToString(tasks.Results[0].DestinationArn) != sqstest.QueueARN("other") {
		t.Errorf("tasks, newest first: %+v", tasks.Results)
	}
}

// What SQS refuses, the Fake refuses, with the same error codes.
func TestMoveTaskErrors(t *testing.T) {
	f, _ := newFake(t)
	ctx := context.Background()
	newRedrivePair(f, nil)
	f.CreateQueue("dlq.fifo", map[string]string{"FifoQueue": "true"})
	code := errorCode
	for _, tc := range []struct {
		in   sqs.StartMessageMoveTaskInput
		want string
	}{
		{sqs.StartMessageMoveTaskInput{}, "MissingParameter"},
		{sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("nope"))}, "ResourceNotFoundException"},
		{sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("src"))}, "InvalidParameterValue"},
		{sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("dlq")), DestinationArn: aws.String(sqstest.QueueARN("nope"))}, "ResourceNotFoundException"},
		{sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("dlq")), DestinationArn: aws.String(sqstest.QueueARN("dlq.fifo"))}, "InvalidParameterValue"},
		{sqs.StartMessageMoveTaskInput{SourceArn: aws.String(sqstest.QueueARN("dlq")), MaxNumberOfMessagesPerSecond: aws.Int32(501)}, "InvalidParameterValue"},
	} {
		if _, err := f.StartMessageMoveTask(ctx, &tc.in); code(err) != tc.want {
			t.Errorf("%+v: %v, want %s", tc.in, err, tc.want)
		}
	}
	if _, err := f.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String("h")}); code(err) != "ResourceNotFoundException" {
		t.Errorf("CancelMessageMoveTask: %v", err)
	}
	f.FailNext(sqstest.OpListMessageMoveTasks, errors.New("boom"), 1)
	if _, err := f.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(sqstest.QueueARN("dlq"))}); err == nil {
		t.Error("injected failure did not fail")
	}
	if n := f.Calls(sqstest.OpStartMessageMoveTask); n != 6 {
		t.Errorf("%d StartMessageMoveTask calls counted, want 6", n)
	}
}

// newRedrivePair creates the queue "dlq" and the queue "src", with attrs,
// whose redrive policy moves a message to dlq after one receive.
func newRedrivePair(f *sqstest.Fake, attrs map[string]string) (dlq, src string) {
	dlq = f.CreateQueue("dlq", nil)
	a := map[string]string{"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":1}`}
	for k, v := range attrs {
		a[k] = v
	}
	return dlq, f.CreateQueue("src", a)
}

// errorCode is err's SQS error code, or its text when it has none.
func errorCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return fmt.Sprint(err)
}

func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

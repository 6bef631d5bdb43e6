package lambda_test

// Records of a queue whose attributes the function cannot read
// (GetQueueAttributes refused: the role's policy, throttling at a cold
// start), on sqstest.Fake and on the emulator.

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A batch of ten records of a queue whose attributes cannot be read asks
// for them once, not once per record, and sets the failed records'
// visibility in one batched call. Before, each record read them again (ten
// refused reads, each retried by the SDK, adding to a throttling that may
// be why they were refused) and got an executor of its own, so that the
// failed records' visibility changes went in ten calls.
func TestUnreadableQueueReadOncePerInvocation(t *testing.T) {
	f := newFake("300")
	f.FailNext(sqstest.OpGetQueueAttributes, &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform: sqs:GetQueueAttributes"}, 1000)
	fn := newHandler(t, jobs, lambda.Config{Client: f, DisableHeartbeat: true})
	ev := received(t, f, "orders", "fail", "fail", "fail", "fail", "fail", "ok", "ok", "ok", "ok", "ok")
	reads, changes := f.Calls(sqstest.OpGetQueueAttributes), f.Calls(sqstest.OpChangeMessageVisibilityBatch)
	resp, err := fn(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := failedIDs(resp); len(got) != 5 {
		t.Errorf("failures %v, want the five failed records", got)
	}
	if n := f.Calls(sqstest.OpGetQueueAttributes) - reads; n != 1 {
		t.Errorf("%d reads of the queue's attributes for one invocation, want 1", n)
	}
	if n := f.Calls(sqstest.OpChangeMessageVisibilityBatch) - changes; n != 1 {
		t.Errorf("%d visibility change calls for five failed records of one queue, want 1", n)
	}
}

// deniedAttributes is an SQS client whose GetQueueAttributes is refused, as
// for a role without sqs:GetQueueAttributes; every other call goes through.
type deniedAttributes struct{ *sqs.Client }

func (deniedAttributes) GetQueueAttributes(context.Context, *sqs.GetQueueAttributesInput, ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "GetQueueAttributes",
		Err: &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform: sqs:GetQueueAttributes"}}
}

// On the emulator, with the queue's attributes refused: a record postponed
// without an attempt (RetryAfter with a nil error) on the last receive the
// redrive policy allows waits in a fresh copy, as it does when the
// function knows the policy. The function cannot tell a last receive from
// another, so it takes every one for a last. Before, it took an unknown
// policy for none: the record was made visible after its delay, and SQS
// moved it to the dead-letter queue on its next receive, though no handler
// failed.
func TestEmulatorUnreadableQueuePostponedOnLastReceive(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 30 * time.Second})
	var runs atomic.Int64
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		if runs.Add(1) == 1 {
			return sqsworker.RetryAfter(time.Second, nil)
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: deniedAttributes{sq}, DisableHeartbeat: true})
	localtest.Send(t, sq, q.URL, "", "job")
	resp, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, receiveLast(t, sq, q.URL)))
	if err != nil {
		t.Fatal(err)
	}
	again := receiveUpTo(t, sq, q.URL, 1, 20*time.Second)
	if len(again) != 1 {
		v, i, d := localtest.Depth(t, sq, q.DLQURL)
		t.Fatalf("the job did not come back (failures %v; %d in the dead-letter queue)", failedIDs(resp), v+i+d)
	}
	if n := again[0].Attributes["ApproximateReceiveCount"]; n != "1" {
		t.Errorf("came back with receive count %s, want a fresh copy's 1", n)
	}
	if resp, err := fn(context.Background(), sqstest.SQSEvent(q.ARN, again)); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("running the copy: %v %v", resp, err)
	}
	_, _ = sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: again[0].ReceiptHandle})
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

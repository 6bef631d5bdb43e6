package lambda_test

// Records of a queue whose attributes the function cannot read
// (GetQueueAttributes refused: the role's policy, throttling at a cold
// start), on sqstest.Fake.

import (
	"context"
	"testing"

	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
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

package lambda_test

// SQS unreachable from the function, on sqstest.Fake and on the emulator
// behind a fault proxy.

import (
	"context"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// hangingAttributes is an SQS client whose GetQueueAttributes hangs until
// its context ends, as a request to an SQS that swallows it does.
type hangingAttributes struct{ *sqstest.Fake }

func (h hangingAttributes) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A read of the queue's attributes that hangs (SQS unreachable from the
// function, while the event source mapping still receives) does not take
// the whole invocation: the records run with the configuration alone.
// Before, no handler ran and the function returned after its deadline:
// Lambda would time out every invocation of the batch until SQS
// dead-lettered records no handler ever saw.
func TestHangingAttributeReadDoesNotTakeInvocation(t *testing.T) {
	t.Parallel()
	f := newFake("30")
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran.Add(1); return nil })
	fn := newHandler(t, h, lambda.Config{Client: hangingAttributes{f}})
	ev := received(t, f, "orders", "a", "b")
	resp := invokeBy(t, fn, ev, 3*time.Second)
	if len(resp.BatchItemFailures) != 0 || ran.Load() != 2 {
		t.Errorf("failures %v, %d handlers ran; want both records handled", failedIDs(resp), ran.Load())
	}
}

// The same under the Lambda emulator, with the function's SQS endpoint
// behind a fault proxy that swallows every request: the function answers
// before its timeout, the successful record handled, the failed one
// reported failed (its visibility change cannot be made, so it comes back
// after the visibility timeout).
func TestRealInvocationSQSUnreachable(t *testing.T) {
	sq := localtest.NewSQS(t)
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rie := localtest.StartRIE(t, localtest.BuildBootstrap(t, examplePkg),
		"AWS_ENDPOINT_URL_SQS="+p.URL(), "AWS_LAMBDA_FUNCTION_TIMEOUT=5")
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 60 * time.Second})
	localtest.Send(t, sq, q.URL, "", "ok", "fail")
	msgs := receiveN(t, sq, q.URL, 2)
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	status, body := invoke(t, rie, sqstest.SQSEvent(q.ARN, msgs))
	var resp events.SQSEventResponse
	if err := json.Unmarshal(body, &resp); status != 200 || err != nil {
		t.Fatalf("status %d, body %q: want the batch response before the function's timeout", status, body)
	}
	var failed []string
	for _, f := range resp.BatchItemFailures {
		failed = append(failed, f.ItemIdentifier)
	}
	if want := idsOf(msgs, "fail"); !slices.Equal(failed, want) {
		t.Errorf("batchItemFailures %v, want the failed record only %v", failed, want)
	}
}

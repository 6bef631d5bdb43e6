package lambda_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// hungExtensions is a fake whose visibility changes, once armed, go
// unanswered until their context ends: SQS slow or unreachable.
type hungExtensions struct {
	*sqstest.Fake
	armed atomic.Bool
}

func (h *hungExtensions) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if h.armed.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return h.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// A record whose handler is cut by the handlers' deadline while an
// extension of it hangs does not hold the function past its own deadline:
// the lease's release waits for the extension no longer than the
// invocation allows (Lambda would stop the function, failing the whole
// batch).
func TestReleaseWithinInvocationDeadline(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := &hungExtensions{Fake: newFake("4")}
		start := time.Now()
		h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			time.Sleep(time.Until(start.Add(7900 * time.Millisecond)))
			f.armed.Store(true) // the extension sent at 8s hangs
			<-ctx.Done()
			return ctx.Err()
		})
		// Rounds every 2s extend the 4s lease by 4s; the handlers' deadline
		// is 8.5s, the function's 9.5s.
		fn := newHandler(t, h, lambda.Config{Client: f, SafetyMargin: 2 * time.Second,
			Heartbeat: visibility.Config{Threshold: 3 * time.Second, Interval: 2 * time.Second}})
		ev := received(t, f.Fake, "orders", "slow")
		deadline := start.Add(9500 * time.Millisecond)
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		resp, err := fn(ctx, ev)
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Errorf("invocation: %v, failed %v; want the record failed", err, failedIDs(resp))
		}
		if late := time.Since(deadline); late > 0 {
			t.Errorf("the function returned %s after its deadline", late)
		}
	})
}

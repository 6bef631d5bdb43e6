package batch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/sqstest"
)

// flakyAttributes fails the first GetQueueAttributes, then answers; it
// counts the calls.
type flakyAttributes struct {
	*sqstest.Fake
	calls int
}

func (f *flakyAttributes) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	f.calls++
	if f.calls == 1 {
		return nil, errors.New("throttled")
	}
	return f.Fake.GetQueueAttributes(ctx, in, opts...)
}

// A chunks' queue's limits are read once; a read that failed is not tried
// again for a minute (every completion on a last receive would call SQS
// otherwise), then is, and its answer kept.
func TestQueueLimitsReadOnceAndRetriedAfterAMinute(t *testing.T) {
	f := &flakyAttributes{Fake: sqstest.NewFake()}
	f.CreateQueue("chunks-dlq", nil)
	url := f.CreateQueue("chunks", map[string]string{"MaximumMessageSize": "262144",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("chunks-dlq") + `","maxReceiveCount":4}`})
	now := time.Now()
	c := &Coordinator{sqs: f, now: func() time.Time { return now }, cfg: Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	ctx := context.Background()
	if l := c.limits(ctx, url); l != (queueLimits{}) {
		t.Fatalf("a failed read: %+v, want nothing known", l)
	}
	if l := c.limits(ctx, url); l != (queueLimits{}) || f.calls != 1 {
		t.Fatalf("within the minute: %+v after %d calls, want nothing known and no call", l, f.calls)
	}
	now = now.Add(limitsRetryAfter)
	want := queueLimits{maxReceive: 4, maxSize: 262144}
	for range 3 {
		if l := c.limits(ctx, url); l != want {
			t.Fatalf("after the minute: %+v, want %+v", l, want)
		}
	}
	if f.calls != 2 {
		t.Errorf("%d calls, want 2: the answer kept", f.calls)
	}
}

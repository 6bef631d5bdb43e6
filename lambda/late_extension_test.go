package lambda_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// heldExtensions is a fake whose heartbeat extensions (the batch changes
// whose every entry sets extension seconds), once armed, land late: as an
// extension the SDK sends again after a throttle or a lost reply. A held
// extension lands as soon as a change of another length has landed, or
// when the call's own context ends.
type heldExtensions struct {
	*sqstest.Fake
	extension int32
	armed     atomic.Bool

	held, changed         chan struct{}
	heldOnce, changedOnce sync.Once
	mu                    sync.Mutex
	settled               map[string]bool // receipt handles given another change
	after                 atomic.Int32    // extensions of those landed after it
}

func (h *heldExtensions) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if !h.armed.Load() {
		return h.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
	}
	extension := len(in.Entries) > 0
	for _, e := range in.Entries {
		extension = extension && e.VisibilityTimeout == h.extension
	}
	if extension {
		h.heldOnce.Do(func() { close(h.held) })
		select {
		case <-h.changed:
		case <-ctx.Done():
		}
		out, err := h.Fake.ChangeMessageVisibilityBatch(context.WithoutCancel(ctx), in, opts...)
		h.mu.Lock()
		for _, e := range in.Entries {
			if h.settled[aws.ToString(e.ReceiptHandle)] {
				h.after.Add(1)
			}
		}
		h.mu.Unlock()
		return out, err
	}
	out, err := h.Fake.ChangeMessageVisibilityBatch(ctx, in, opts...)
	h.mu.Lock()
	for _, e := range in.Entries {
		h.settled[aws.ToString(e.ReceiptHandle)] = true
	}
	h.mu.Unlock()
	h.changedOnce.Do(func() { close(h.changed) })
	return out, err
}

// A record that fails with a short delay (1s) while an extension of it
// (60s) is still under way comes back after its delay: the adapter sets its
// visibility once the invocation's records are done, and the extension,
// landing after, would hide it for a minute. Another invocation keeps the
// shared heartbeat running meanwhile, so that the first one's leaving does
// not wait for the extension.
func TestFailedRecordNotHiddenByLateExtension(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := &heldExtensions{Fake: newFake("4"), extension: 60, held: make(chan struct{}), changed: make(chan struct{}),
			settled: map[string]bool{}}
		release := make(chan struct{})
		h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if m.Body == "keep" { // the other invocation
				<-release
				return nil
			}
			f.armed.Store(true)
			<-f.held
			return sqsworker.RetryAfter(time.Second, errors.New("rate limited"))
		})
		fn := newHandler(t, h, lambda.Config{Client: f, Heartbeat: visibility.Config{Extension: time.Minute,
			Threshold: 3 * time.Second, Interval: 1500 * time.Millisecond}})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(release)
		keep := received(t, f.Fake, "orders", "keep")
		wg.Go(func() { _, _ = fn(context.Background(), keep) })
		ev := received(t, f.Fake, "orders", "fail")
		resp, err := fn(context.Background(), ev)
		if err != nil || len(resp.BatchItemFailures) != 1 {
			t.Fatalf("invocation: %v, failed %v; want the record failed", err, failedIDs(resp))
		}
		time.Sleep(3 * time.Second)
		url := sqstest.QueueURL("orders")
		out, err := f.Fake.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url)})
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) != ev.Records[0].MessageId {
			t.Errorf("3s after the record failed with a 1s delay: %d messages, %v; want the record visible (a late extension hid it again?)", len(out.Messages), err)
		}
		if n := f.after.Load(); n != 0 {
			t.Errorf("%d extensions landed after the failed record's visibility change", n)
		}
	})
}

package lambda_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// A heartbeat setting that does not fit the queue's visibility timeout
// (made for 60 s, the queue since lowered to 20 s: Threshold 30 s) does
// not fail the invocation, which would fail every invocation alike and
// spend every record's receives toward the dead-letter queue: the records
// run without the heartbeat, and an error says what to fix.
func TestHeartbeatThatNoLongerFitsTheQueueRunsWithout(t *testing.T) {
	t.Parallel()
	f := newFake("20")
	var logs lockedBuffer
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1,
		Heartbeat: visibility.Config{Threshold: 30 * time.Second, Extension: time.Minute},
		Logger:    slog.New(slog.NewTextHandler(&logs, nil))})
	ev := received(t, f, "orders", "a", "b")
	resp, err := fn(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 || ran.Load() != 2 {
		t.Fatalf("invocation: %+v, %v, %d handled; want both records handled and none failed", resp, err, ran.Load())
	}
	if !strings.Contains(logs.String(), "Config.Heartbeat does not fit the queue's visibility timeout") {
		t.Errorf("no error naming the setting; logs:\n%s", logs.String())
	}
}

// lockedBuffer is a bytes.Buffer safe for the handlers' concurrent logs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With the heartbeat, a record settled early in an invocation that
// outlives the queue's visibility timeout (3 s here) stays invisible until
// the invocation ends: one done, until Lambda deletes it, else another
// poller would run it again; one failed, until its backoff is set, else it
// would come back before it. Then the failed record comes back after its
// backoff (1 s).
func TestSettledRecordsStayInvisibleUntilTheInvocationEnds(t *testing.T) {
	t.Parallel()
	f := newFake("3")
	url := sqstest.QueueURL("orders")
	visible := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "fail":
			return sqsworker.RetryAfter(time.Second, errors.New("rate limited"))
		case "slow":
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			visible, _, _ = f.Depth(url)
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1})
	ev := received(t, f, "orders", "fail", "done", "slow")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].MessageId {
		t.Fatalf("invocation: %v, failed %v; want the first record failed alone", err, failedIDs(resp))
	}
	if visible != 0 {
		t.Errorf("%d records visible 5 s into a 3 s visibility timeout, want none: the settled records kept invisible until the invocation ends", visible)
	}
	// What Lambda does: delete the records not reported failed.
	for _, r := range ev.Records[1:] {
		if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &r.ReceiptHandle}); err != nil {
			t.Fatalf("deleting %s: %v", r.Body, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for v, _, _ := f.Depth(url); v != 1; v, _, _ = f.Depth(url) {
		if time.Now().After(deadline) {
			t.Fatalf("%d records visible 10 s after the invocation, want the failed one back after its 1 s backoff", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A heartbeat setting wrong whatever the queue fails at once, when the
// handler is made (the cold start), not at each invocation.
func TestHeartbeatSettingWrongForEveryQueueFailsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := lambda.NewHandler(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		lambda.Config{Client: newFake("30"), Heartbeat: visibility.Config{Threshold: -time.Second, Extension: 1500 * time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "Threshold -1s is negative") || !strings.Contains(err.Error(), "Extension 1.5s") {
		t.Errorf("NewHandler: %v, want the negative Threshold and the Extension not in whole seconds named", err)
	}
	if _, err := lambda.NewHandler(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		lambda.Config{Client: newFake("30"), DisableHeartbeat: true, Heartbeat: visibility.Config{Threshold: -time.Second}}); err != nil {
		t.Errorf("with DisableHeartbeat: %v, want the heartbeat's settings unread", err)
	}
}

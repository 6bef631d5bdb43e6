package lambda_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
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

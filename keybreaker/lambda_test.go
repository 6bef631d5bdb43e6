package keybreaker_test

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The same handler and middleware in the Lambda adapter, invoked as an
// event source mapping would (batches of up to 10 received from the
// emulator, the records not reported failed deleted): the down endpoint is
// spared while its key is open, the healthy one's jobs delivered meanwhile,
// and once it is back every job is delivered once, none dead-lettered.
func TestWebhookEndpointDownOnLambda(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second, MaxReceiveCount: 2})
	up, down := newEndpoint(t), newEndpoint(t)
	down.down.Store(true)
	const failures, concurrency = 3, 4
	kb := newWebhookBreaker(t, failures)
	// The adapter's warnings and errors, told on failure: a waiting copy
	// that could not be sent, say, is logged, not returned.
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fn, err := lambda.NewHandler(kb.Middleware(deliver), lambda.Config{Client: c, Concurrency: concurrency, Logger: logger,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	downJobs := sendTo(t, c, q.URL, down.srv.URL, "down-", 20)
	upJobs := sendTo(t, c, q.URL, up.srv.URL, "up-", 20)

	// poll is one round of the event source mapping.
	poll := func() {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
		if err != nil || len(out.Messages) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := fn(ctx, sqstest.SQSEvent(q.ARN, out.Messages))
		if err != nil {
			t.Errorf("invocation: %v", err)
			return
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		for _, m := range out.Messages {
			if !failed[*m.MessageId] {
				_, _ = c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle})
			}
		}
	}
	pollUntil := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(120 * time.Second); !cond(); poll() {
			if time.Now().After(deadline) {
				v, f, d := localtest.Depth(t, c, q.URL)
				dv, df, dd := localtest.Depth(t, c, q.DLQURL)
				t.Logf("the adapter's warnings and errors:\n%s", logs.String())
				t.Fatalf("%s: not within 120 s; keybreaker %+v; delivered %d of %d to the down endpoint (%d calls), %d of %d to the other; queue %d visible, %d in flight, %d delayed; dead-letter queue %d visible, %d in flight, %d delayed",
					what, kb.Stats(), len(down.delivered()), len(downJobs), down.calls.Load(), len(up.delivered()), len(upJobs), v, f, d, dv, df, dd)
			}
		}
	}
	pollUntil("the healthy endpoint's jobs, and 3 probes of the other", func() bool {
		return len(up.delivered()) == len(upJobs) && kb.Stats().Probes >= 3
	})
	spared(t, down, kb, failures, concurrency)
	down.down.Store(false)
	pollUntil("the down endpoint's jobs once it is back", func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return len(down.delivered()) == len(downJobs) && v+f+d == 0
	})
	deliveredOnce(t, up, upJobs)
	deliveredOnce(t, down, downJobs)
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d jobs dead-lettered", v+f+d)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes, which keeps
// its last 64 KiB.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() > 64<<10 {
		rest := b.buf.Bytes()[b.buf.Len()-32<<10:]
		b.buf = *bytes.NewBuffer(append([]byte(nil), rest...))
	}
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package attempt_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker/internal/attempt"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// countAttempts counts the attempts of a request: it sits before Bound, in
// the finalize step after the retry middleware.
func countAttempts(n *atomic.Int64) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("countAttempts",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				n.Add(1)
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	}
}

// A send to the local SQS through a proxy that swallows requests for a
// while: its first attempt is ended after the bound, the SDK sends it
// again, and once the proxy passes traffic again the send is stored, once.
// Without a bound the first attempt waits as long as the request's context
// lives (here a minute, then the send fails unsent).
func TestSwallowedAttemptIsRetried(t *testing.T) {
	t.Parallel()
	direct := localtest.NewSQS(t)
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{})
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	var attempts atomic.Int64
	c := localtest.NewSQS(t, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
		o.RetryMaxAttempts = 10
		o.APIOptions = append(o.APIOptions, countAttempts(&attempts), attempt.Bound(500*time.Millisecond))
	})
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		proxy.Pass()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("job")}); err != nil {
		t.Fatalf("send: %v (after %v, %d attempts)", err, time.Since(start), attempts.Load())
	}
	if n := attempts.Load(); n < 2 {
		t.Errorf("%d attempts, want the swallowed one and at least one more", n)
	}
	got := localtest.ReceiveAll(t, direct, q.URL, time.Second, 30*time.Second)
	if len(got) != 1 {
		t.Errorf("%d messages in the queue, want the one send", len(got))
	}
	t.Logf("sent after %v in %d attempts", time.Since(start).Round(time.Millisecond), attempts.Load())
}

// An attempt ended by the bound is an error the SDK's retryer retries,
// and a timeout; the request's own context ending is not changed into one.
func TestTimeoutErrorIsRetryable(t *testing.T) {
	err := error(&attempt.TimeoutError{After: time.Second, Msg: "operation error SQS: SendMessage, context deadline exceeded"})
	var r interface{ RetryableError() bool }
	if !errors.As(err, &r) || !r.RetryableError() {
		t.Error("not retryable")
	}
	var c interface{ CanceledError() bool }
	if errors.As(err, &c) {
		t.Error("matches the SDK's cancelled request, which its retryer does not retry")
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Error("does not match context.DeadlineExceeded")
	}
}

package batch_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// beforeOp returns a client option that calls f before each request of the
// operation op whose input match accepts (before the SDK's retries, which
// repeat the request without calling f again).
func beforeOp(op string, match func(in any) bool, f func()) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("review-hook",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if awsmiddleware.GetOperationName(ctx) == op && match(in.Parameters) {
						f()
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	}
}

// The reply to the update that takes the lease on sending the completion is
// lost: the SDK's retry finds the lease held, by this very run. The run
// sends the completion at once, rather than taking itself for another
// holder and putting its chunk off until its own lease ends.
func TestLostLeaseReply(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	proxy, err := faultproxy.New(strings.TrimPrefix(localtest.DynamoDBEndpoint(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	var armed, lost atomic.Bool
	isLease := func(in any) bool {
		u, ok := in.(*dynamodb.UpdateItemInput)
		return ok && strings.Contains(aws.ToString(u.UpdateExpression), ":until")
	}
	e := newFakeEnv(t, batch.Config{}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) },
		beforeOp("UpdateItem", isLease, func() {
			if armed.Load() && lost.CompareAndSwap(false, true) {
				if err := proxy.LoseReplies(1); err != nil {
					t.Error(err)
				}
			}
		}))
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("lostlease", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	h := e.coord.Middleware(new(effects).handler(nil))
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	before := proxy.Stats().LostReplies
	err = h.HandleMessage(ctx, msgs[1])
	if n := proxy.Stats().LostReplies - before; n != 1 {
		t.Fatalf("%d replies lost, want 1", n)
	}
	if err != nil {
		t.Fatalf("the last chunk, whose lease reply was lost: %v, want the completion sent in this run", err)
	}
	p := progress(t, e.coord, "lostlease")
	if p.Notified.IsZero() {
		t.Errorf("completion not marked sent: %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// The chunk whose run holds the lease on sending the completion comes back
// while the lease holds: it is put off (sqsworker.RetryAfter with a nil
// error), not failed. A failure would count toward the dead-letter queue:
// on its last attempt the runtime would dead-letter the one message bound to
// send the completion, and the batch would never complete.
func TestHeldLeaseIsNotAFailure(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("heldlease", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	h := e.coord.Middleware(new(effects).handler(nil))
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	// chunk 1 counts and takes the lease; its send fails, and the lease
	// is left as a holder that died leaves it.
	e.sqs.FailNext("SendMessage", errors.New("injected"), 1)
	if err := h.HandleMessage(ctx, msgs[1]); err == nil {
		t.Fatal("the send did not fail")
	}
	_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.table, Key: keyOf("batch#heldlease"),
		UpdateExpression:          aws.String("SET notify_token = :t, notify_until = :u, notify_chunk = :c"),
		ExpressionAttributeValues: vals(":t", "S:dead", ":u", "N:"+strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10), ":c", "N:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	last := again(again(msgs[1])) // its last attempt
	err = h.HandleMessage(ctx, last)
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Err != nil || sqsworker.IsUnavailable(err) {
		t.Fatalf("the holder's chunk while its lease holds: %v, want a postponement (RetryAfter with a nil error)", err)
	}
}

package batch_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
)

// On DynamoDB Local behind a test proxy that takes requests and never
// answers from the read of the batch that follows a chunk's count: the
// chunk's run fails within Config.RequestTimeout (the attempt cut short
// ends the request: 0.5s, not three attempts' 1.5s), unavailable
// (counted by the circuit breaker, never dead-lettered), rather than wait
// for as long as its context lives (none here; up to 12 hours under the
// worker's heartbeat). Delivered again once DynamoDB answers, it is
// counted once and completes the batch.
func TestSwallowedRequestsAreBounded(t *testing.T) {
	t.Parallel()
	proxy := dynamoProxy(t)
	t.Cleanup(func() { _ = proxy.Pass() })
	var armed atomic.Bool
	isBatchRead := func(in any) bool {
		g, ok := in.(*dynamodb.GetItemInput)
		return ok && g.ProjectionExpression != nil && armed.Load()
	}
	e := newFakeEnv(t, batch.Config{RequestTimeout: 500 * time.Millisecond, NotifyLease: 2 * time.Second},
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) },
		beforeOp("GetItem", isBatchRead, func() { _ = proxy.Blackhole() }))
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("swallowed", 1)); err != nil {
		t.Fatal(err)
	}
	m := receive(t, e.sqs, e.work, 1)[0]
	var eff effects
	h := e.coord.Middleware(eff.handler(func(*sqsworker.Message) error { armed.Store(true); return nil }))
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- h.HandleMessage(ctx, m) }()
	select {
	case err := <-done:
		if !sqsworker.IsUnavailable(err) {
			t.Errorf("after %v: %v, want unavailable", time.Since(start).Round(time.Millisecond), err)
		}
		t.Logf("returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(60 * time.Second):
		_ = proxy.Pass()
		<-done
		t.Fatal("the chunk's run still waited on a DynamoDB that never answers after 60s")
	}
	armed.Store(false)
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	if err := h.HandleMessage(ctx, again(m)); err != nil {
		t.Fatal(err)
	}
	if p := progress(t, e.coord, "swallowed"); p.Done != 1 || !p.Completed || p.Notified.IsZero() || eff.get("swallowed#0") != 1 {
		t.Errorf("progress %+v, handler ran %d times; want 1 done, the completion sent, one run", p, eff.get("swallowed#0"))
	}
}

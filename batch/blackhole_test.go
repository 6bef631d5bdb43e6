package batch_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// isMarkSent reports whether in is the update that marks a completion sent.
func isMarkSent(in any) bool {
	u, ok := in.(*dynamodb.UpdateItemInput)
	return ok && strings.Contains(aws.ToString(u.UpdateExpression), ":id")
}

// blackholeAtMarkSent returns the client options that send through proxy
// and blackhole it when the completion is about to be marked sent (once
// armed): DynamoDB then takes requests and never answers, as in a network
// partition.
func blackholeAtMarkSent(t *testing.T, proxy *faultproxy.Proxy, armed *atomic.Bool) []func(*dynamodb.Options) {
	return []func(*dynamodb.Options){
		func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) },
		beforeOp("UpdateItem", isMarkSent, func() {
			if armed.Load() {
				if err := proxy.Blackhole(); err != nil {
					t.Error(err)
				}
			}
		}),
	}
}

// DynamoDB stops answering (a partition: requests taken, never answered)
// just after the completion job was sent: the chunk's run, whose context
// the runtime then ends (its shutdown deadline), returns within the
// completion's lease (Config.NotifyLease), not when DynamoDB answers again.
// Before, marking the completion sent ignored every deadline, and the run
// (and the worker's shutdown, which waits for it) hung for the whole
// outage. The completion was sent once.
func TestMarkSentBoundedWhenDynamoDBHangs(t *testing.T) {
	t.Parallel()
	proxy := dynamoProxy(t)
	var armed atomic.Bool
	e := newFakeEnv(t, batch.Config{NotifyLease: 2 * time.Second}, blackholeAtMarkSent(t, proxy, &armed)...)
	t.Cleanup(func() { _ = proxy.Pass() })
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("hang", 1)); err != nil {
		t.Fatal(err)
	}
	h := e.coord.Middleware(new(effects).handler(nil))
	m := receive(t, e.sqs, e.work, 1)[0]
	armed.Store(true)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.HandleMessage(rctx, m) }()
	for proxy.Mode() != faultproxy.Blackhole {
		select {
		case err := <-done:
			t.Fatalf("the run ended before marking the completion sent: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel() // the runtime cuts the run short
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("the run: %v, want nil (the chunk is counted, its completion sent)", err)
		}
	case <-time.After(2 * time.Minute):
		_ = proxy.Pass()
		<-done
		t.Fatal("the run still waited on DynamoDB two minutes after its context ended")
	}
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// sendFails is an SQS client whose SendMessage (the completion's) calls
// before, then fails.
type sendFails struct {
	*sqstest.Fake
	before func()
}

func (s *sendFails) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.before()
	return nil, errors.New("connection reset by peer")
}

// Sending the completion fails, and DynamoDB stops answering as the lease
// on sending it is released: the chunk's run returns its Unavailable error
// within the lease (Config.NotifyLease), once its context has ended, not
// when DynamoDB answers again.
func TestReleaseLeaseBoundedWhenDynamoDBHangs(t *testing.T) {
	t.Parallel()
	proxy := dynamoProxy(t)
	e := newFakeEnv(t, batch.Config{}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
	t.Cleanup(func() { _ = proxy.Pass() })
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("hang", 1)); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	q := &sendFails{Fake: e.sqs, before: func() {
		if err := proxy.Blackhole(); err != nil {
			t.Error(err)
		}
		cancel() // the runtime cuts the run short meanwhile
	}}
	coord, err := batch.New(ctx, localtest.NewDynamoDB(t, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) }), q,
		batch.Config{Table: e.table, NotifyLease: 2 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h := coord.Middleware(new(effects).handler(nil))
	done := make(chan error, 1)
	go func() { done <- h.HandleMessage(rctx, receive(t, e.sqs, e.work, 1)[0]) }()
	select {
	case err := <-done:
		if !sqsworker.IsUnavailable(err) {
			t.Errorf("the run: %v, want an Unavailable error", err)
		}
	case <-time.After(2 * time.Minute):
		_ = proxy.Pass()
		<-done
		t.Fatal("the run still waited on DynamoDB two minutes after its context ended")
	}
}

// The same in a worker on the local SQS: DynamoDB stops answering just after
// the completion job was sent, and the worker is stopped. Its Run returns
// once its shutdown deadline has passed and the completion's lease with it,
// not when DynamoDB answers again; the completion was sent once, and the
// chunk, counted, is not run again by the next worker.
func TestEmulatorShutdownWhenDynamoDBHangs(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 5)
	proxy := dynamoProxy(t)
	t.Cleanup(func() { _ = proxy.Pass() })
	var armed atomic.Bool
	db := localtest.NewDynamoDB(t, blackholeAtMarkSent(t, proxy, &armed)...)
	coord, err := batch.New(context.Background(), db, e.sqs, batch.Config{Table: e.table, NotifyLease: 2 * time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if err := coord.Create(context.Background(), e.spec("hang", 1)); err != nil {
		t.Fatal(err)
	}
	var eff effects
	w, err := worker.New(e.sqs, worker.Config{QueueURL: e.work, WaitTime: time.Second, DisableDepth: true,
		ShutdownTimeout: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, coord.Middleware(eff.handler(nil))) }()
	localtest.Eventually(t, 2*time.Minute, func() bool { return proxy.Mode() == faultproxy.Blackhole }, "the completion sent")
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		_ = proxy.Pass()
		<-done
		t.Fatal("the worker still stopping two minutes after its shutdown deadline")
	}
	armed.Store(false)
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	// Acknowledged by the first worker, or come back to the next one,
	// which finds it counted: the chunk ran once, and its completion
	// came once.
	e.runWorker(t, coord.Middleware(eff.handler(nil)), "the chunk acknowledged", func() bool {
		visible, inFlight, delayed := localtest.Depth(t, e.sqs, e.work)
		return visible+inFlight+delayed == 0
	})
	if n := eff.get("hang#0"); n != 1 {
		t.Errorf("the chunk ran %d times, want 1", n)
	}
	if msgs := localtest.ReceiveAll(t, e.sqs, e.callbacks, time.Second, time.Minute); len(msgs) != 1 {
		t.Errorf("%d completion jobs, want 1", len(msgs))
	}
}

// On DynamoDB Local behind a test proxy that takes requests and never
// answers from the read of the batch that follows a chunk's count: the
// chunk's run fails once the SDK's attempts are spent, each given up at
// Config.RequestTimeout and sent again (0.5s each, with the retryer's
// backoff between them), unavailable
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

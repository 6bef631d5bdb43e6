package executor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// refusedDelete is the acker of a runtime whose delete, after the waiting
// copy was sent, meets SQS refusing connections (the test's fault proxy),
// as after a crash between the two: the original stays.
type refusedDelete struct {
	t     *testing.T
	api   *sqs.Client // through proxy
	proxy *faultproxy.Proxy
	url   string
	err   error
}

func (a *refusedDelete) Delete(j *executor.Job) {
	defer j.Done()
	if err := a.proxy.Refuse(); err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, a.err = a.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &a.url, ReceiptHandle: &j.Msg.ReceiptHandle})
	if err := a.proxy.Pass(); err != nil {
		a.t.Fatal(err)
	}
}

func (a *refusedDelete) Retry(j *executor.Job, _ time.Duration) {
	j.Done()
	a.t.Error("retried, want a copy")
}
func (a *refusedDelete) Abandon(j *executor.Job) { j.Done(); a.t.Error("abandoned") }

// A replayed job (no idempotency-key attribute: the idempotency
// middleware's DefaultKey is the first message's ID, from the failure
// metadata the replay keeps) fails with a "24-hour" backoff; its waiting
// copy is sent through the test's fault proxy, which then refuses the
// original's delete. The original comes back and succeeds; the copy comes
// a "day" later. Under the idempotency middleware on DynamoDB Local the
// effect is applied once: the copy carries the original's key. Before, the
// copy was keyed by the replayed message's own ID, and the effect ran
// twice.
func TestEmulatorCopyOfAReplayedJobKeepsItsKey(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	useEmuSteps(t)
	day := 2 * emuSteps.Visibility
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	cfg := idempotency.StoreConfig{Table: localtest.UniqueName(t, false)}
	if err := idempotency.CreateTable(ctx, db, cfg); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, cfg.Table)
	store, err := idempotency.NewDynamoStore(ctx, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := idempotency.Middleware(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	direct := localtest.NewSQS(t)
	proxied := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 2 * time.Second})

	var mu sync.Mutex
	var effects []string
	h := mw(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if m.ReceiveCount == 1 {
			return sqsworker.RetryAfter(day, errors.New("webhook endpoint down"))
		}
		mu.Lock()
		effects = append(effects, idempotency.DefaultKey(m))
		mu.Unlock()
		return nil
	}))

	// The replayed job, as `dlq replay` leaves it.
	f := sqsworker.Failure{Error: "boom", ErrorClass: "error", Attempts: 3, SourceQueue: q.URL, MessageID: "first-message-id"}
	attrs, _ := f.AddTo(nil)
	if _, err := direct.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(`{"order":42}`),
		MessageAttributes: sqsmsg.ToSDKAttributes(attrs)}); err != nil {
		t.Fatal(err)
	}
	out, err := direct.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 5, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
	}
	ex := &executor.Executor{
		Handler: h,
		Policy: outcome.Policy{Backoff: sqsworker.ExponentialBackoff{}, MaxReceiveCount: 3, HasDLQ: true,
			RedriveMaxReceiveCount: 3},
		Mover:    &queue.Mover{API: direct, URL: q.DLQURL},
		Counters: &executor.Counters{},
		Metrics:  metrics.Nop{},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Requeue:  executor.Requeue{API: proxied, URL: q.URL},
	}
	ack := &refusedDelete{t: t, api: proxied, proxy: proxy, url: q.URL}
	ex.Run(&executor.Job{Msg: sqsmsg.FromSDK(q.URL, &out.Messages[0]), ReceivedAt: time.Now(), Ctx: ctx}, ack)
	if ack.err == nil {
		t.Fatal("the original's delete went through the refusing proxy")
	}
	if n := ex.Counters.Requeued.Load(); n != 1 {
		t.Fatalf("%d waiting copies sent, want 1", n)
	}

	// A runtime goes on: the original comes back, then the copy.
	api := &counting{Client: direct}
	var r ran
	inner := r.handler(nil)
	stop := runtimes["worker"](t, api, q, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_ = inner.HandleMessage(ctx, m)
		return h.HandleMessage(ctx, m)
	}))
	localtest.Eventually(t, day+30*time.Second, func() bool {
		v, i, d := localtest.Depth(t, direct, q.URL)
		return len(r.get()) >= 2 && v+i+d == 0
	}, "the original and its copy did not both run")
	time.Sleep(time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(effects) != 1 {
		t.Errorf("the effect ran %d times (keys %q) for %d deliveries, want once", len(effects), effects, len(r.get()))
	}
	if v, i, d := localtest.Depth(t, direct, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered", v+i+d)
	}
}

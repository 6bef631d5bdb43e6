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

// keyedReplay is a replayed job on the emulator, as `dlq replay` leaves
// it: no idempotency-key attribute, so the idempotency middleware's
// DefaultKey is the first message's ID, from the failure metadata the
// replay keeps. Its handler runs under the middleware on DynamoDB Local and
// records the key of each effect; its acker's delete meets SQS refusing
// connections, as after a crash.
type keyedReplay struct {
	direct, proxied *sqs.Client
	q               localtest.Queue
	h               sqsworker.Handler
	job             *executor.Job // received once
	ack             *refusedDelete

	mu      sync.Mutex
	effects []string // the key of each effect
}

// newKeyedReplay sends the replayed job to a queue of maxReceive receives
// and receives it. fail, if it returns an error, fails a delivery before its
// effect.
func newKeyedReplay(t *testing.T, maxReceive int, fail func(*sqsworker.Message) error) *keyedReplay {
	t.Helper()
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	ctx := context.Background()
	mw := idempotencyOnDynamoDB(t, localtest.NewDynamoDB(t))
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	k := &keyedReplay{direct: localtest.NewSQS(t), proxied: localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })}
	k.q = localtest.NewQueue(t, k.direct, localtest.QueueOptions{MaxReceiveCount: maxReceive, VisibilityTimeout: 2 * time.Second})
	k.ack = &refusedDelete{t: t, api: k.proxied, proxy: proxy, url: k.q.URL}
	k.h = mw(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if err := fail(m); err != nil {
			return err
		}
		k.mu.Lock()
		k.effects = append(k.effects, idempotency.DefaultKey(m))
		k.mu.Unlock()
		return nil
	}))

	f := sqsworker.Failure{Error: "boom", ErrorClass: "error", Attempts: 3, SourceQueue: k.q.URL, MessageID: "first-message-id"}
	attrs, _ := f.AddTo(nil)
	if _, err := k.direct.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &k.q.URL, MessageBody: aws.String(`{"order":42}`),
		MessageAttributes: sqsmsg.ToSDKAttributes(attrs)}); err != nil {
		t.Fatal(err)
	}
	out, err := k.direct.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &k.q.URL, WaitTimeSeconds: 5, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
	}
	k.job = &executor.Job{Msg: sqsmsg.FromSDK(k.q.URL, &out.Messages[0]), ReceivedAt: time.Now(), Ctx: ctx}
	return k
}

// executor returns the executor of the job's queue: maxReceive attempts,
// dead-letter moves, and waiting copies sent through the proxy.
func (k *keyedReplay) executor(maxReceive int) *executor.Executor {
	return &executor.Executor{
		Handler: k.h,
		Policy: outcome.Policy{Backoff: sqsworker.ExponentialBackoff{}, MaxReceiveCount: maxReceive, HasDLQ: true,
			RedriveMaxReceiveCount: maxReceive},
		Mover:    &queue.Mover{API: k.direct, URL: k.q.DLQURL},
		Counters: &executor.Counters{},
		Metrics:  metrics.Nop{},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Requeue:  executor.Requeue{API: k.proxied, URL: k.q.URL},
	}
}

// runOnce runs a worker on the queue until two deliveries ran and the queue
// is empty (within the given time), and reports an error unless the effect
// ran once.
func (k *keyedReplay) runOnce(t *testing.T, within time.Duration, what string) {
	t.Helper()
	api := &counting{Client: k.direct}
	var r ran
	inner := r.handler(nil)
	stop := runtimes["worker"](t, api, k.q, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_ = inner.HandleMessage(ctx, m)
		return k.h.HandleMessage(ctx, m)
	}))
	localtest.Eventually(t, within, func() bool {
		v, i, d := localtest.Depth(t, k.direct, k.q.URL)
		return len(r.get()) >= 2 && v+i+d == 0
	}, what)
	time.Sleep(time.Second)
	stop()
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.effects) != 1 {
		t.Errorf("the effect ran %d times (keys %q) for %d deliveries, want once", len(k.effects), k.effects, len(r.get()))
	}
}

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
	t.Parallel()
	useEmuSteps(t)
	day := 2 * emuSteps.Visibility
	k := newKeyedReplay(t, 3, func(m *sqsworker.Message) error {
		if m.ReceiveCount == 1 {
			return sqsworker.RetryAfter(day, errors.New("webhook endpoint down"))
		}
		return nil
	})
	ex := k.executor(3)
	ex.Run(k.job, k.ack)
	if k.ack.err == nil {
		t.Fatal("the original's delete went through the refusing proxy")
	}
	if n := ex.Counters.Requeued.Load(); n != 1 {
		t.Fatalf("%d waiting copies sent, want 1", n)
	}

	// A runtime goes on: the original comes back, then the copy.
	k.runOnce(t, day+30*time.Second, "the original and its copy did not both run")
	if v, i, d := localtest.Depth(t, k.direct, k.q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered", v+i+d)
	}
}

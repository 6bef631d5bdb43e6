package executor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A replayed job (no idempotency-key attribute: the idempotency
// middleware's DefaultKey is the first message's ID, from the failure
// metadata the replay keeps) fails for good and is dead-lettered by the
// runtime, whose delete of it then meets SQS refusing connections (the
// test's fault proxy), as after a crash. The job comes back and succeeds;
// the dead letter is replayed as well. Under the idempotency middleware on
// DynamoDB Local the effect is applied once: the dead-letter copy keeps the
// job's key. Before, its new failure metadata named the replayed message,
// whose own ID then keyed the replay, and the effect ran twice.
func TestEmulatorDeadLetterOfAReplayedJobKeepsItsKey(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
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
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{MaxReceiveCount: 5, VisibilityTimeout: 2 * time.Second})

	var calls atomic.Int32
	var mu sync.Mutex
	var effects []string
	h := mw(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if calls.Add(1) == 1 {
			return sqsworker.Permanent(errors.New("bad order"))
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
		Handler:  h,
		Policy:   outcome.Policy{Backoff: sqsworker.ExponentialBackoff{}, MaxReceiveCount: 5, HasDLQ: true, RedriveMaxReceiveCount: 5},
		Mover:    &queue.Mover{API: direct, URL: q.DLQURL},
		Counters: &executor.Counters{},
		Metrics:  metrics.Nop{},
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	ack := &refusedDelete{t: t, api: proxied, proxy: proxy, url: q.URL}
	ex.Run(&executor.Job{Msg: sqsmsg.FromSDK(q.URL, &out.Messages[0]), ReceivedAt: time.Now(), Ctx: ctx}, ack)
	if ack.err == nil || ex.Counters.DeadLettered.Load() != 1 {
		t.Fatalf("delete error %v, %d dead-lettered: want a refused delete after one dead-letter copy", ack.err, ex.Counters.DeadLettered.Load())
	}

	// The operator replays the dead letter; a runtime goes on.
	dq, err := dlq.Open(ctx, direct, q.DLQURL, dlq.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := dq.Replay(ctx, dlq.ReplayConfig{To: q.URL}); err != nil || res.Moved != 1 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	api := &counting{Client: direct}
	var r ran
	inner := r.handler(nil)
	stop := runtimes["worker"](t, api, q, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_ = inner.HandleMessage(ctx, m)
		return h.HandleMessage(ctx, m)
	}))
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, i, d := localtest.Depth(t, direct, q.URL)
		return len(r.get()) >= 2 && v+i+d == 0
	}, "the job and its replayed dead letter did not both run")
	time.Sleep(time.Second)
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(effects) != 1 {
		t.Errorf("the effect ran %d times (keys %q) for %d deliveries, want once", len(effects), effects, len(r.get()))
	}
}

package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

// sendEachTwice sends n messages keyed order-0000, order-0001, …, then
// each of them again, and returns the keys.
func sendEachTwice(t *testing.T, c *sqs.Client, url string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-%04d", i)
	}
	sendKeyed(t, c, url, keys)
	sendKeyed(t, c, url, keys)
	return keys
}

// sendKeyed sends one message per key, in batches of ten, with the key in the
// idempotency-key attribute and the body "body-KEY".
func sendKeyed(t *testing.T, c *sqs.Client, url string, keys []string) {
	t.Helper()
	for start := 0; start < len(keys); start += 10 {
		in := &sqs.SendMessageBatchInput{QueueUrl: &url}
		for i, k := range keys[start:min(start+10, len(keys))] {
			in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("body-" + k),
				MessageAttributes: map[string]types.MessageAttributeValue{
					idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(k)},
				},
			})
		}
		out, err := c.SendMessageBatch(context.Background(), in)
		if err != nil || len(out.Failed) > 0 {
			t.Fatalf("sending: %v %v", err, out)
		}
	}
}

// effects counts the side effects of handlers, by key.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) add(k string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == nil {
		e.n = map[string]int{}
	}
	e.n[k]++
}

func (e *effects) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.n))
	for k, v := range e.n {
		out[k] = v
	}
	return out
}

// runWorker runs a worker until the test ends.
func runWorker(t *testing.T, c *sqs.Client, cfg worker.Config, h sqsworker.Handler) *worker.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.WaitTime == 0 {
		cfg.WaitTime = time.Second
	}
	w, err := worker.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), h) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return w
}

func drained(t *testing.T, c *sqs.Client, url string) bool {
	v, f, d := localtest.Depth(t, c, url)
	return v+f+d == 0
}

// End to end: 1,000 messages each sent twice, some also redelivered because
// their handler outlives the visibility timeout, produce exactly 1,000
// effects.
func TestWorkerEndToEndExactlyOnceEffects(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second})
	// Duplicates of running jobs are postponed until the claim's lease
	// (the handler's deadline plus the grace) ends: both short, so that
	// they come back soon.
	guard, err := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{ClaimGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	keys := sendEachTwice(t, sq, q.URL, n)
	var eff effects
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := m.Attribute(idempotency.KeyAttribute)
		if k[len(k)-2:] == "00" && m.ReceiveCount == 1 {
			time.Sleep(3 * time.Second) // outlives the 2s visibility timeout: redelivered meanwhile
		}
		eff.add(k)
		return nil
	}), guard.Middleware)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 50, DisableHeartbeat: true, HandlerTimeout: 10 * time.Second,
		Backoff: sqsworker.ExponentialBackoff{Base: 500 * time.Millisecond, Cap: 2 * time.Second}}, h)
	localtest.Eventually(t, 180*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained")
	got := eff.snapshot()
	total := 0
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("%s: %d effects", k, got[k])
		}
		total += got[k]
	}
	gs := guard.Stats()
	t.Logf("%d effects; worker %+v; idempotency %+v", total, w.Stats(), gs)
	if gs.Claimed != n || gs.Duplicates < n {
		t.Errorf("idempotency stats = %+v, want %d claims and at least %d duplicates", gs, n, n)
	}
}

// With the worker's heartbeat, the claim's lease moves with the message's
// visibility: a duplicate arriving after the first visibility timeout is
// postponed, not run. The job outlasts the 5 s a duplicate waits for a
// handler of its key in the same process, so that the duplicate meets the
// claim.
func TestClaimLeaseFollowsHeartbeat(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second})
	store := newStore(t, db, idempotency.StoreConfig{})
	// A grace shorter than a heartbeat round: the claim must follow the
	// heartbeat to hold past the first visibility deadline, and the
	// postponed duplicate comes back soon after the job.
	guard, _ := idempotency.New(store, idempotency.Config{ClaimGrace: 100 * time.Millisecond})
	var eff effects
	started := make(chan struct{}, 1)
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		select {
		case started <- struct{}{}:
		default:
		}
		time.Sleep(10 * time.Second)
		k, _ := m.Attribute(idempotency.KeyAttribute)
		eff.add(k)
		return nil
	}), guard.Middleware)
	hb := visibility.Config{Threshold: 1500 * time.Millisecond, Interval: 250 * time.Millisecond}
	runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 4, Heartbeat: hb}, h)
	sendKeyed(t, sq, q.URL, []string{"long"})
	<-started
	time.Sleep(3 * time.Second) // past the first 2s lease
	lease := leaseOf(t, db, store, "long")
	if until := time.Until(lease); until <= 0 {
		t.Errorf("claim's lease ended %s ago while its job still runs", -until)
	}
	sendKeyed(t, sq, q.URL, []string{"long"}) // the duplicate
	localtest.Eventually(t, 60*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained")
	if got := eff.snapshot()["long"]; got != 1 {
		t.Errorf("%d effects, want 1", got)
	}
	if s := guard.Stats(); s.InProgress == 0 || s.Duplicates != 1 || s.Waited != 0 {
		t.Errorf("stats = %+v, want the duplicate postponed, then acknowledged", s)
	}
}

// leaseOf reads a record's lease expiry straight from the table.
func leaseOf(t *testing.T, db *dynamodb.Client, s *idempotency.DynamoStore, key string) time.Time {
	t.Helper()
	table := s.Config().Table
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: key}}})
	if err != nil {
		t.Fatal(err)
	}
	n, ok := out.Item["lease_expiry"].(*ddbtypes.AttributeValueMemberN)
	if !ok {
		t.Fatalf("record %v has no lease", out.Item)
	}
	ms, _ := strconv.ParseInt(n.Value, 10, 64)
	return time.UnixMilli(ms)
}

// DynamoDB stopped mid-run: handlers do not run while claims fail, messages
// are retried, nothing is lost, and work resumes when DynamoDB is back.
func TestDynamoDBOutage(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	proxy := localtest.StartProxy(t, localtest.DynamoDBEndpoint()[len("http://"):])
	db := localtest.NewDynamoDB(t, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
		o.RetryMaxAttempts = 1
	})
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 10 * time.Second})
	guard, _ := idempotency.New(newStore(t, db, idempotency.StoreConfig{}), idempotency.Config{})
	var eff effects
	var mu sync.Mutex
	cut := false
	ranWhileCut := 0
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		time.Sleep(50 * time.Millisecond)
		k, _ := m.Attribute(idempotency.KeyAttribute)
		mu.Lock()
		if cut {
			ranWhileCut++
		}
		mu.Unlock()
		eff.add(k)
		return nil
	}), guard.Middleware)
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%02d", i)
	}
	sendKeyed(t, sq, q.URL, keys)
	runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second}}, h)
	localtest.Eventually(t, 30*time.Second, func() bool { return len(eff.snapshot()) >= 10 }, "no progress before the outage")
	mu.Lock()
	cut = true
	mu.Unlock()
	proxy.Cut()
	time.Sleep(200 * time.Millisecond) // handlers that claimed before the cut finish
	mu.Lock()
	ranWhileCut = 0
	mu.Unlock()
	time.Sleep(3 * time.Second)
	mu.Lock()
	cut = false
	during := ranWhileCut
	mu.Unlock()
	proxy.Restore()
	localtest.Eventually(t, 90*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained after the outage")
	if during != 0 {
		t.Errorf("%d handlers ran while DynamoDB was unreachable", during)
	}
	got := eff.snapshot()
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("%s: %d effects", k, got[k])
		}
	}
	if s := guard.Stats(); s.StoreErrors == 0 {
		t.Errorf("stats = %+v: the outage was not seen", s)
	}
}

// End to end with transactional effects: 1,000 messages each sent twice,
// some redelivered while their first delivery runs, through the worker on
// the local SQS, with handlers that add their effect with AddWrites, and one
// commit reply in 25 lost on the way back (the SDK retries it): exactly
// 1,000 effects in DynamoDB.
func TestWorkerTransactionalEffectsExactlyOnce(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second})
	p := startFaultProxy(t)
	p.setRule(func(op string, n int) fault {
		if op == "TransactWriteItems" && n%25 == 0 {
			return dropResponse
		}
		return forward
	})
	db := localtest.NewDynamoDB(t)
	effectsTable := newEffectsTable(t, db)
	store, _ := proxiedStore(t, p, db)
	guard, err := idempotency.New(store, idempotency.Config{ClaimGrace: time.Second, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	keys := sendEachTwice(t, sq, q.URL, n)
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := idempotency.KeyFromContext(ctx)
		if k[len(k)-2:] == "00" && m.ReceiveCount == 1 {
			time.Sleep(3 * time.Second) // outlives the 2s visibility timeout: redelivered meanwhile
		}
		return idempotency.AddWrites(ctx, effectWrite(effectsTable, k))
	}), guard.Middleware)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 50, DisableHeartbeat: true, HandlerTimeout: 10 * time.Second,
		Backoff: sqsworker.ExponentialBackoff{Base: 500 * time.Millisecond, Cap: 2 * time.Second}}, h)
	localtest.Eventually(t, 180*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained")
	total := 0
	for _, k := range keys {
		got := applied(t, db, effectsTable, k)
		if got != 1 {
			t.Errorf("%s: effect applied %d times", k, got)
		}
		total += got
	}
	if c := itemCount(t, db, effectsTable); c != n {
		t.Errorf("%d items in the effects table, want %d", c, n)
	}
	gs := guard.Stats()
	t.Logf("%d effects; %d commit replies lost; worker %+v; idempotency %+v", total, p.faults("TransactWriteItems"), w.Stats(), gs)
	if gs.Committed != n || gs.Duplicates < n || p.faults("TransactWriteItems") == 0 {
		t.Errorf("idempotency stats = %+v, %d replies lost; want %d commits, at least %d duplicates, some replies lost", gs, p.faults("TransactWriteItems"), n, n)
	}
}

package batch_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTable creates an idempotency table of the test's own in DynamoDB Local.
func newTable(t testing.TB, db *dynamodb.Client) string {
	t.Helper()
	name := localtest.UniqueName(t, false)
	if err := idempotency.CreateTable(context.Background(), db, idempotency.StoreConfig{Table: name}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, name)
	return name
}

// fakeEnv is a batch over the in-memory SQS, counted in DynamoDB Local.
type fakeEnv struct {
	db              *dynamodb.Client
	table           string
	sqs             *sqstest.Fake
	work, callbacks string
	coord           *batch.Coordinator
}

func newFakeEnv(t testing.TB, cfg batch.Config, dbOpts ...func(*dynamodb.Options)) *fakeEnv {
	t.Helper()
	db := localtest.NewDynamoDB(t)
	e := &fakeEnv{db: db, table: newTable(t, db), sqs: sqstest.NewFake()}
	e.work = e.sqs.CreateQueue("chunks", nil)
	e.callbacks = e.sqs.CreateQueue("callbacks", nil)
	cfg.Table = e.table
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	client := db
	if len(dbOpts) > 0 {
		client = localtest.NewDynamoDB(t, dbOpts...)
	}
	c, err := batch.New(context.Background(), client, e.sqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.coord = c
	return e
}

// spec returns a batch of n chunks "chunk-<i>" to e.work, whose completion
// goes to e.callbacks.
func (e *fakeEnv) spec(id string, n int) batch.Spec {
	s := batch.Spec{ID: id, QueueURL: e.work, Callback: batch.Callback{QueueURL: e.callbacks, Body: `{"batch":"` + id + `"}`}}
	for i := range n {
		s.Chunks = append(s.Chunks, producer.Message{Body: "chunk-" + strconv.Itoa(i)})
	}
	return s
}

// receive receives up to n messages from url, with their attributes.
func receive(t testing.TB, api interface {
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
}, url string, n int) []*sqsworker.Message {
	t.Helper()
	var out []*sqsworker.Message
	for len(out) < n {
		res, err := api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: int32(min(10, n-len(out))), MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Messages) == 0 {
			break
		}
		for i := range res.Messages {
			out = append(out, sqsmsg.FromSDK(url, &res.Messages[i]))
		}
	}
	return out
}

// again returns a copy of m as SQS would deliver it again.
func again(m *sqsworker.Message) *sqsworker.Message {
	c := *m
	c.ReceiveCount++
	return &c
}

// effects counts the effects of chunks, by chunk attribute.
type effects struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *effects) handler(fail func(m *sqsworker.Message) error) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if fail != nil {
			if err := fail(m); err != nil {
				return err
			}
		}
		v, _ := m.Attribute(batch.Attribute)
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.n == nil {
			e.n = map[string]int{}
		}
		e.n[v]++
		return nil
	})
}

func (e *effects) get(v string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n[v]
}

// item reads an item of the table, its string and number attributes as
// strings; nil when there is none.
func item(t testing.TB, db *dynamodb.Client, table, id string) map[string]string {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: id}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return nil
	}
	m := map[string]string{}
	for k, v := range out.Item {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			m[k] = v.Value
		case *ddbtypes.AttributeValueMemberN:
			m[k] = v.Value
		case *ddbtypes.AttributeValueMemberNS:
			m[k] = strings.Join(v.Value, ",")
		}
	}
	return m
}

// progress returns the batch's progress, failing the test on an error.
func progress(t testing.TB, c *batch.Coordinator, id string) *batch.Progress {
	t.Helper()
	p, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// eachWay runs test as two parallel subtests: "own-transaction", where
// Middleware counts the chunk in its own transaction (guarded false), and
// "with-idempotency", where WithIdempotency commits the count with the
// idempotency record (guarded true).
func eachWay(t *testing.T, test func(t *testing.T, guarded bool)) {
	t.Helper()
	for _, guarded := range []bool{false, true} {
		name := "own-transaction"
		if guarded {
			name = "with-idempotency"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, guarded)
		})
	}
}

// withGuard returns c.WithIdempotency over an idempotency guard whose store
// is on db, with sc and cfg (its Logger quiet when nil; sc.Table as given).
func withGuard(t testing.TB, c *batch.Coordinator, db idempotency.DynamoAPI, sc idempotency.StoreConfig, cfg idempotency.Config) sqsworker.Middleware {
	t.Helper()
	store, err := idempotency.NewDynamoStore(context.Background(), db, sc)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	guard, err := idempotency.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c.WithIdempotency(guard.Middleware)
}

// dynamoProxy returns a fault proxy in front of DynamoDB Local, closed when
// the test ends; the test is skipped without DynamoDB Local.
func dynamoProxy(t testing.TB) *faultproxy.Proxy {
	t.Helper()
	localtest.RequireDynamoDB(t)
	proxy, err := faultproxy.ForEndpoint(localtest.DynamoDBEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	return proxy
}

// eachLostReplyWay runs test as three parallel subtests, each with a fault
// proxy in front of DynamoDB Local and viaProxy, the client option that
// sends through it: "own-transaction"; "own-transaction-own-retry", where
// viaProxy also turns the SDK's retries off, so that the middleware's own
// retry repeats the request with its token; and "with-idempotency"
// (guarded true).
func eachLostReplyWay(t *testing.T, test func(t *testing.T, guarded bool, proxy *faultproxy.Proxy, viaProxy func(*dynamodb.Options))) {
	t.Helper()
	for _, tc := range []struct {
		name             string
		guarded, noRetry bool
	}{
		{name: "own-transaction"},
		{name: "own-transaction-own-retry", noRetry: true},
		{name: "with-idempotency", guarded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			proxy := dynamoProxy(t)
			test(t, tc.guarded, proxy, func(o *dynamodb.Options) {
				o.BaseEndpoint = aws.String(proxy.URL())
				if tc.noRetry {
					o.RetryMaxAttempts = 1
				}
			})
		})
	}
}

// emulatorEnv is a batch on the local SQS, counted in DynamoDB Local: its
// chunks' queue dead-letters a chunk after maxReceive receives.
type emulatorEnv struct {
	sqs              *sqs.Client
	chunks, callback localtest.Queue
	fakeEnv
}

func newEmulatorEnv(t *testing.T, maxReceive int) *emulatorEnv {
	t.Helper()
	client := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	e := &emulatorEnv{sqs: client}
	e.db, e.table = db, newTable(t, db)
	e.chunks = localtest.NewQueue(t, client, localtest.QueueOptions{MaxReceiveCount: maxReceive, VisibilityTimeout: 5 * time.Second})
	e.callback = localtest.NewQueue(t, client, localtest.QueueOptions{})
	e.work, e.callbacks = e.chunks.URL, e.callback.URL
	c, err := batch.New(context.Background(), db, client, batch.Config{Table: e.table, MaxReceiveCount: maxReceive, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	e.coord = c
	return e
}

// runWorker runs a worker with h on e's chunks until cond holds (checked
// every 100ms, for up to two minutes), then stops it.
func (e *emulatorEnv) runWorker(t *testing.T, h sqsworker.Handler, what string, cond func() bool) {
	t.Helper()
	w, err := worker.New(e.sqs, worker.Config{
		QueueURL: e.work, Concurrency: 4, WaitTime: time.Second, DisableDepth: true,
		Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second},
		Logger:  quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, h) }()
	localtest.Eventually(t, 2*time.Minute, cond, "%s", what)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

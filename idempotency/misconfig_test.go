package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// logBuffer collects the log lines of handlers running at once.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The idempotency table deleted under a running worker (an operator's
// mistake, not the jobs'), on the emulators, with a redrive policy of
// maxReceiveCount 2: every claim fails as Unavailable, the circuit breaker
// opens, no message is dead-lettered however often the jobs are tried, one
// error names the table and the fix; once the table is created again every
// job runs, once.
func TestMissingTableWaitsNotDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	table := store.Config().Table
	if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
		t.Fatal(err)
	}
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 2})
	var logs logBuffer
	guard, err := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var eff effects
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := m.Attribute(idempotency.KeyAttribute)
		eff.add(k)
		return nil
	}), guard.Middleware)
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%d", i)
	}
	sendKeyed(t, sq, q.URL, keys)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second},
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 500 * time.Millisecond, MaxProbeInterval: time.Second}}, h)
	// Twice as many refused claims as jobs: without the breaker's pause
	// and the runtime's care on the last receive, the jobs' receive counts
	// would have passed maxReceiveCount.
	localtest.Eventually(t, 120*time.Second, func() bool { return guard.Stats().StoreErrors >= int64(2*len(keys)) },
		"claims not tried: %+v", guard.Stats())
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("while the table was missing: %d messages dead-lettered", v+f+d)
	}
	if s := w.Stats(); s.BreakerOpens == 0 || s.Succeeded != 0 {
		t.Errorf("while the table was missing: worker %+v; want the breaker opened, nothing succeeded", s)
	}
	if got := eff.snapshot(); len(got) != 0 {
		t.Errorf("handlers ran without a claim: %v", got)
	}
	if err := idempotency.CreateTable(ctx, db, store.Config()); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 120*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained after the table was created: %+v", w.Stats())
	got := eff.snapshot()
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("%s: %d effects, want 1", k, got[k])
		}
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 || !strings.Contains(out, table) || !strings.Contains(out, "create it") {
		t.Errorf("%d errors logged, want one naming table %s and the fix:\n%s", n, table, out)
	}
	t.Logf("worker %+v; idempotency %+v", w.Stats(), guard.Stats())
}

// The table recreated with another partition key under a running store,
// on DynamoDB Local: the claim's ValidationException is the table's
// configuration, not the job's: Unavailable, matching ErrMisconfigured,
// saying what the key must be; the handler does not run.
func TestWrongKeySchemaIsMisconfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	table := store.Config().Table
	if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
		t.Fatal(err)
	}
	if err := idempotency.CreateTable(ctx, db, idempotency.StoreConfig{Table: table, KeyAttr: "pk"}); err != nil {
		t.Fatal(err)
	}
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	ran := false
	err := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran = true; return nil })).
		HandleMessage(ctx, msg("schema", "payload"))
	if !sqsworker.IsUnavailable(err) || !errors.Is(err, idempotency.ErrMisconfigured) || !strings.Contains(err.Error(), `partition key must be the string attribute "id"`) || ran {
		t.Errorf("claim on a table keyed by another attribute: %v (ran %v); want Unavailable, ErrMisconfigured, naming the key", err, ran)
	}
}

// The process cannot get credentials for DynamoDB (the role to assume
// refuses them: STS AccessDenied inside the DynamoDB call's error), on the
// emulators, with a redrive policy of maxReceiveCount 2: every claim fails
// as Unavailable and misconfigured, naming the role; the circuit breaker
// opens; no message is dead-lettered; once credentials come back every job
// runs, once. Before, the error was the job's own: each claim spent a
// counted attempt and the jobs were dead-lettered.
func TestCredentialsNotGotWaitNotDeadLettered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	var fail atomic.Bool
	good := db.Options().Credentials
	denied := localtest.NewDynamoDB(t, func(o *dynamodb.Options) {
		o.Credentials = aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
			if fail.Load() {
				return aws.Credentials{}, &smithy.OperationError{ServiceID: "STS", OperationName: "AssumeRoleWithWebIdentity",
					Err: &smithy.GenericAPIError{Code: "AccessDenied", Message: "Not authorized to perform sts:AssumeRoleWithWebIdentity"}}
			}
			return good.Retrieve(ctx)
		})
	})
	deniedStore, err := idempotency.NewDynamoStore(ctx, denied, store.Config())
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 2})
	var logs logBuffer
	guard, err := idempotency.New(deniedStore, idempotency.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var eff effects
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := m.Attribute(idempotency.KeyAttribute)
		eff.add(k)
		return nil
	}), guard.Middleware)
	keys := make([]string, 6)
	for i := range keys {
		keys[i] = fmt.Sprintf("job-%d", i)
	}
	sendKeyed(t, sq, q.URL, keys)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second},
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 500 * time.Millisecond, MaxProbeInterval: time.Second}}, h)
	localtest.Eventually(t, 120*time.Second, func() bool { return guard.Stats().StoreErrors >= int64(2*len(keys)) },
		"claims not tried: %+v", guard.Stats())
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("while credentials could not be got: %d messages dead-lettered", v+f+d)
	}
	if s := w.Stats(); s.BreakerOpens == 0 || s.Succeeded != 0 {
		t.Errorf("while credentials could not be got: worker %+v; want the breaker opened, nothing succeeded", s)
	}
	fail.Store(false)
	localtest.Eventually(t, 120*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained once credentials came back: %+v", w.Stats())
	got := eff.snapshot()
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("%s: %d effects, want 1", k, got[k])
		}
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	if out := logs.String(); !strings.Contains(out, "could not get credentials") || !strings.Contains(out, "AccessDenied") {
		t.Errorf("the log does not say credentials could not be got:\n%s", out)
	}
}

// Two Guards of one DynamoDB table nested in one handler chain (two stores
// made for it, on DynamoDB Local): the inner runs the handler under the
// outer's claim, once, and its writes commit with it. It claimed the key
// again, found the outer claim, and postponed the job on every receive.
func TestNestedGuardsOfOneTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	outerStore := newStore(t, db, idempotency.StoreConfig{})
	innerStore, err := idempotency.NewDynamoStore(ctx, db, outerStore.Config())
	if err != nil {
		t.Fatal(err)
	}
	effects := newEffectsTable(t, db)
	outer, _ := idempotency.New(outerStore, idempotency.Config{})
	inner, _ := idempotency.New(innerStore, idempotency.Config{})
	var runs atomic.Int32
	h := outer.Middleware(inner.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		runs.Add(1)
		return idempotency.AddWrites(ctx, effectWrite(effects, "order-nested"))
	})))
	m := &sqsworker.Message{ID: "m-1", Body: "b", MessageAttributes: map[string]sqsworker.MessageAttribute{
		idempotency.KeyAttribute: {DataType: "String", StringValue: "order-nested"}}}
	if err := h.HandleMessage(ctx, m); err != nil || runs.Load() != 1 {
		t.Fatalf("%v, the handler ran %d times; want nil, once", err, runs.Load())
	}
	if n := applied(t, db, effects, "order-nested"); n != 1 {
		t.Errorf("the effect was applied %d times, want once", n)
	}
	// Sent again: a duplicate, not run.
	if err := h.HandleMessage(ctx, m); err != nil || runs.Load() != 1 {
		t.Errorf("again: %v, the handler ran %d times; want nil, once in all", err, runs.Load())
	}
}

// cutAfterPut is DynamoDB applying a claim whose caller's context was
// cancelled meanwhile (the runtime stopping): the PutItem lands, the caller
// sees its context's error.
type cutAfterPut struct{ *dynamodb.Client }

func (c cutAfterPut) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := c.Client.PutItem(context.WithoutCancel(ctx), in, opts...); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("operation error DynamoDB: PutItem: %w", context.Canceled)
}

// A claim written by DynamoDB while its caller was cut short is deleted,
// on DynamoDB Local: the message's next receive claims the key at once. It
// was left in place, holding the key until its lease ended (the visibility
// timeout and ClaimGrace later).
func TestClaimCutShortIsForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	cut, err := idempotency.NewDynamoStore(ctx, cutAfterPut{db}, store.Config())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cut.Claim(ctx, "order-cut", "h", time.Now().Add(time.Hour), idempotency.Receive{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim: %v, want the context's cancellation", err)
	}
	token, existing, err := store.Claim(ctx, "order-cut", "h", time.Now().Add(time.Hour), idempotency.Receive{})
	if err != nil || existing != nil || token == "" {
		t.Errorf("the next claim: token %q, existing %+v, %v; want the key free", token, existing, err)
	}
}

// noOldItem is a DynamoAPI that drops the record DynamoDB returns with a
// failed condition (ALL_OLD).
type noOldItem struct{ *dynamodb.Client }

func (c noOldItem) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := c.Client.PutItem(ctx, in, opts...)
	var failed *ddbtypes.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return nil, &ddbtypes.ConditionalCheckFailedException{Message: failed.Message}
	}
	return out, err
}

// A claim whose failed condition comes back without the record (a
// DynamoAPI wrapper that drops it), on DynamoDB Local, is the store's
// misconfiguration: unavailable, saying what to fix. It was read as
// another holder's claim with no lease, and the job postponed every second
// for ever.
func TestClaimAnswerWithoutRecordIsMisconfiguration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	if _, _, err := store.Claim(ctx, "order-held", "h", time.Now().Add(time.Hour), idempotency.Receive{}); err != nil {
		t.Fatal(err)
	}
	stripped, err := idempotency.NewDynamoStore(ctx, noOldItem{db}, store.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, existing, err := stripped.Claim(ctx, "order-held", "h", time.Now().Add(time.Hour), idempotency.Receive{})
	if !sqsworker.IsUnavailable(err) || !errors.Is(err, idempotency.ErrMisconfigured) || !strings.Contains(err.Error(), "ALL_OLD") {
		t.Errorf("Claim: existing %+v, %v; want unavailable, misconfigured, naming ALL_OLD", existing, err)
	}
}

// expiringOnce answers the first UpdateItem (a completion) with
// ExpiredTokenException, as during a credential rotation, then passes.
type expiringOnce struct {
	*dynamodb.Client
	calls atomic.Int32
}

func (c *expiringOnce) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if c.calls.Add(1) == 1 {
		return nil, &smithy.GenericAPIError{Code: "ExpiredTokenException", Message: "The security token included in the request is expired"}
	}
	return c.Client.UpdateItem(ctx, in, opts...)
}

// A completion refused once for an expired token (a credential rotation),
// on DynamoDB Local, is tried again and lands: a duplicate finds the job
// done. Misconfigurations that no retry passes are not tried again, but an
// expired token may pass.
func TestCompletionRetriedAfterAnExpiredToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	expiring, err := idempotency.NewDynamoStore(ctx, &expiringOnce{Client: db}, store.Config())
	if err != nil {
		t.Fatal(err)
	}
	guard, _ := idempotency.New(expiring, idempotency.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var runs atomic.Int32
	h := guard.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	m := &sqsworker.Message{ID: "m-1", Body: "b", MessageAttributes: map[string]sqsworker.MessageAttribute{
		idempotency.KeyAttribute: {DataType: "String", StringValue: "order-rotated"}}}
	if err := h.HandleMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	second, _ := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := second.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil })).HandleMessage(ctx, m); err != nil || runs.Load() != 1 {
		t.Errorf("the duplicate: %v, the handler ran %d times; want the job done once", err, runs.Load())
	}
}

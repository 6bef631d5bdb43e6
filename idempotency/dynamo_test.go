package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/idemtest"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// newStore creates a fresh table and a store on it.
func newStore(t *testing.T, c *dynamodb.Client, cfg idempotency.StoreConfig) *idempotency.DynamoStore {
	t.Helper()
	return idemtest.NewStore(t, c, cfg)
}

func msg(key, body string) *sqsworker.Message {
	return &sqsworker.Message{ID: "id-" + key, Body: body, MessageAttributes: map[string]sqsworker.MessageAttribute{
		idempotency.KeyAttribute: {DataType: "String", StringValue: key},
	}}
}

func isPostponed(err error) bool {
	var ra *sqsworker.RetryAfterError
	return errors.As(err, &ra) && ra.Err == nil
}

// 16 workers racing on one key (a Guard each, on one table, as 16
// processes: a Guard's own messages of one key wait for one another before
// their claim): the handler runs exactly once; the others are acknowledged
// (completed) or postponed (in progress).
func TestRaceOnOneKeyRunsOnce(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	store := newStore(t, c, idempotency.StoreConfig{})
	var runs atomic.Int64
	guards := make([]*idempotency.Guard, 16)
	handlers := make([]sqsworker.Handler, len(guards))
	for i := range guards {
		g, err := idempotency.New(store, idempotency.Config{})
		if err != nil {
			t.Fatal(err)
		}
		guards[i] = g
		handlers[i] = g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			runs.Add(1)
			time.Sleep(100 * time.Millisecond)
			return nil
		}))
	}
	var acked, postponed, other atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, h := range handlers {
		wg.Go(func() {
			<-start
			switch err := h.HandleMessage(context.Background(), msg("order-1", `{"order":1}`)); {
			case err == nil:
				acked.Add(1)
			case isPostponed(err):
				postponed.Add(1)
			default:
				other.Add(1)
				t.Errorf("unexpected error: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if runs.Load() != 1 || acked.Load()+postponed.Load() != 16 || other.Load() != 0 {
		t.Errorf("handler ran %d times; %d acknowledged, %d postponed", runs.Load(), acked.Load(), postponed.Load())
	}
	// The postponed ones, tried again, are acknowledged without running.
	if err := handlers[0].HandleMessage(context.Background(), msg("order-1", `{"order":1}`)); err != nil || runs.Load() != 1 {
		t.Errorf("retry after completion: %v, runs %d", err, runs.Load())
	}
	var sum idempotency.Stats
	for _, g := range guards {
		s := g.Stats()
		sum.Claimed += s.Claimed
		sum.Duplicates += s.Duplicates
		sum.InProgress += s.InProgress
		sum.Waited += s.Waited
	}
	if sum.Claimed != 1 || sum.Duplicates+sum.InProgress != 16 || sum.Waited != 0 {
		t.Errorf("stats = %+v", sum)
	}
}

// A holder that claims and dies blocks the key until its lease expires, then
// another holder claims it and runs.
func TestDeadHolderLeaseExpires(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	store := newStore(t, c, idempotency.StoreConfig{})
	m := msg("job-7", "payload")
	_, existing, err := store.Claim(context.Background(), "job-7", idempotency.BodyHash(m), time.Now().Add(2*time.Second), idempotency.Receive{})
	if err != nil || existing != nil {
		t.Fatalf("first claim: %v, %+v", err, existing)
	}
	// The holder dies: no complete, no release.
	g, _ := idempotency.New(store, idempotency.Config{})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	err = h.HandleMessage(context.Background(), m)
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Err != nil || ra.Delay > 2*time.Second || runs.Load() != 0 {
		t.Fatalf("before the lease ends: %v (runs %d), want postponed until the lease ends", err, runs.Load())
	}
	time.Sleep(2100 * time.Millisecond)
	if err := h.HandleMessage(context.Background(), m); err != nil || runs.Load() != 1 {
		t.Errorf("after the lease ended: %v, runs %d", err, runs.Load())
	}
}

// A handler failure releases the claim: the next attempt runs.
func TestFailureReleasesClaim(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	g, _ := idempotency.New(newStore(t, c, idempotency.StoreConfig{}), idempotency.Config{})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		if runs.Add(1) == 1 {
			return errors.New("upstream down")
		}
		return nil
	}))
	m := msg("job-8", "payload")
	if err := h.HandleMessage(context.Background(), m); err == nil || err.Error() != "upstream down" {
		t.Fatalf("first attempt: %v", err)
	}
	if err := h.HandleMessage(context.Background(), m); err != nil || runs.Load() != 2 {
		t.Errorf("second attempt: %v, runs %d", err, runs.Load())
	}
	if err := h.HandleMessage(context.Background(), m); err != nil || runs.Load() != 2 {
		t.Errorf("duplicate after success: %v, runs %d", err, runs.Load())
	}
}

// The same key with another payload is a Permanent error naming the key; an
// expired record is claimable again, before DynamoDB's TTL removes it.
func TestPayloadMismatchAndExpiry(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	g, _ := idempotency.New(newStore(t, c, idempotency.StoreConfig{TTL: time.Second}), idempotency.Config{})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	if err := h.HandleMessage(context.Background(), msg("k", `{"amount":10}`)); err != nil {
		t.Fatal(err)
	}
	err := h.HandleMessage(context.Background(), msg("k", `{"amount":99}`))
	var p *sqsworker.PermanentError
	if !errors.As(err, &p) || !strings.Contains(err.Error(), `key "k"`) {
		t.Errorf("reused key: %v, want a Permanent error naming the key", err)
	}
	time.Sleep(2100 * time.Millisecond) // expiry is in whole seconds
	if err := h.HandleMessage(context.Background(), msg("k", `{"amount":99}`)); err != nil || runs.Load() != 2 {
		t.Errorf("after expiry: %v, runs %d", err, runs.Load())
	}
}

// Results are saved with the record and handed to OnDuplicate; one too large
// is dropped, not fatal.
func TestResultSavedAndTooLargeDropped(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	var got []byte
	g, _ := idempotency.New(newStore(t, c, idempotency.StoreConfig{}), idempotency.Config{
		OnDuplicate: func(ctx context.Context, m *sqsworker.Message, r *idempotency.Record) error {
			got = r.Result
			return nil
		},
	})
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "big" {
			idempotency.SetResult(ctx, make([]byte, 500<<10))
		} else {
			idempotency.SetResult(ctx, []byte("receipt-42"))
		}
		return nil
	}))
	for range 2 {
		if err := h.HandleMessage(context.Background(), msg("small", "small")); err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "receipt-42" {
		t.Errorf("duplicate saw result %q", got)
	}
	for range 2 {
		if err := h.HandleMessage(context.Background(), msg("big", "big")); err != nil {
			t.Fatalf("a result over DynamoDB's item limit failed the job: %v", err)
		}
	}
	if got != nil {
		t.Errorf("oversized result saved (%d bytes)", len(got))
	}
}

// An empty key is a Permanent error by default, or runs without idempotency.
func TestMissingKey(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	store := newStore(t, c, idempotency.StoreConfig{})
	noKey := func(*sqsworker.Message) string { return "" }
	g, _ := idempotency.New(store, idempotency.Config{Key: noKey})
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	var p *sqsworker.PermanentError
	if err := h.HandleMessage(context.Background(), &sqsworker.Message{ID: "m1"}); !errors.As(err, &p) || !strings.Contains(err.Error(), "no idempotency key") {
		t.Errorf("missing key: %v", err)
	}
	g, _ = idempotency.New(store, idempotency.Config{Key: noKey, MissingKey: idempotency.RunWithoutKey})
	ran := false
	h = g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran = true; return nil }))
	if err := h.HandleMessage(context.Background(), &sqsworker.Message{ID: "m1"}); err != nil || !ran {
		t.Errorf("RunWithoutKey: %v, ran %v", err, ran)
	}
}

// A missing table, or one with the wrong key, is a clear error at start-up.
func TestStoreChecksTable(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	_, err := idempotency.NewDynamoStore(context.Background(), c, idempotency.StoreConfig{Table: "no-such-table-" + localtest.UniqueName(t, false)})
	var missing *types.ResourceNotFoundException
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing table: %v", err)
	}
	table := localtest.UniqueName(t, false)
	if err := idempotency.CreateTable(context.Background(), c, idempotency.StoreConfig{Table: table, KeyAttr: "pk"}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, c, table)
	_, err = idempotency.NewDynamoStore(context.Background(), c, idempotency.StoreConfig{Table: table})
	if err == nil || !strings.Contains(err.Error(), `partition key is "pk", want "id"`) {
		t.Errorf("wrong key: %v", err)
	}
	if _, err := idempotency.NewDynamoStore(context.Background(), c, idempotency.StoreConfig{TTL: -1}); err == nil || !strings.Contains(err.Error(), "Table is required") || !strings.Contains(err.Error(), "TTL -1ns is negative") {
		t.Errorf("bad config: %v", err)
	}
	// Two attributes under one name: the holder's message ID would
	// overwrite the claim's token, and no claim could complete.
	if _, err := idempotency.NewDynamoStore(context.Background(), c, idempotency.StoreConfig{Table: table, HolderAttr: "lease_token"}); err == nil ||
		!strings.Contains(err.Error(), `attribute name "lease_token" is given to two`) {
		t.Errorf("HolderAttr the same as TokenAttr: %v", err)
	}
}

// Disabled runs the handler every time, without a store.
func TestDisabled(t *testing.T) {
	g, err := idempotency.New(nil, idempotency.Config{Disabled: true})
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs++; return nil }))
	for range 3 {
		_ = h.HandleMessage(context.Background(), msg("k", "b"))
	}
	if runs != 3 {
		t.Errorf("runs = %d", runs)
	}
}

// With the cache, a duplicate of a completed key costs no request.
func TestCacheAnswersDuplicates(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingDynamoDB(t, &counter)
	g, _ := idempotency.New(newStore(t, c, idempotency.StoreConfig{}), idempotency.Config{CacheSize: 10})
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	if err := h.HandleMessage(context.Background(), msg("cached", "b")); err != nil {
		t.Fatal(err)
	}
	counter.Reset()
	for range 5 {
		if err := h.HandleMessage(context.Background(), msg("cached", "b")); err != nil {
			t.Fatal(err)
		}
	}
	if n := counter.Total(); n != 0 {
		t.Errorf("%d DynamoDB requests for cached duplicates", n)
	}
	if s := g.Stats(); s.CacheHits != 5 || s.Duplicates != 5 {
		t.Errorf("stats = %+v", s)
	}
}

// Duplicates acknowledged without running are counted in the metrics.
func TestDuplicatesCounted(t *testing.T) {
	t.Parallel()
	c := localtest.NewDynamoDB(t)
	var out bytes.Buffer
	emf := metrics.NewEMF(&out, "test")
	g, _ := idempotency.New(newStore(t, c, idempotency.StoreConfig{}), idempotency.Config{Metrics: emf})
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	for range 3 {
		m := msg("counted", "b")
		m.QueueURL = "https://sqs.eu-west-1.amazonaws.com/1/orders"
		if err := h.HandleMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	_ = emf.Flush()
	if !strings.Contains(out.String(), `"idempotent_duplicates":2`) || !strings.Contains(out.String(), `"queue":"orders"`) {
		t.Errorf("EMF: %s", out.String())
	}
}

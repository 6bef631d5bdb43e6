package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

func putWrite(table, id string, size int) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Put: &ddbtypes.Put{TableName: aws.String(table), Item: map[string]ddbtypes.AttributeValue{
		"id": &ddbtypes.AttributeValueMemberS{Value: id}, "data": &ddbtypes.AttributeValueMemberS{Value: strings.Repeat("x", size)},
	}}}
}

// Writes breaking DynamoDB's limits on a transaction are refused by
// AddWrites with an error naming the limit and the fix, matching
// ErrInvalidWrites and Permanent; the job fails with it (even if the
// handler ignores it), nothing is applied and the claim is released.
func TestAddWritesLimits(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store := newStore(t, db, idempotency.StoreConfig{KeyPrefix: "jobs"})
	table := store.Config().Table
	region := db.Options().Region
	many := func(n int) []ddbtypes.TransactWriteItem {
		var w []ddbtypes.TransactWriteItem
		for i := range n {
			w = append(w, effectWrite(effects, fmt.Sprintf("item-%03d", i)))
		}
		return w
	}
	update := func(tableName string) ddbtypes.TransactWriteItem {
		w := effectWrite(effects, "x")
		w.Update.TableName = aws.String(tableName)
		return w
	}
	big := make([]ddbtypes.TransactWriteItem, 11)
	for i := range big {
		big[i] = putWrite(effects, fmt.Sprintf("big-%d", i), 390<<10)
	}
	for _, c := range []struct {
		name   string
		writes [][]ddbtypes.TransactWriteItem // one AddWrites call each
		want   string
	}{
		{"100 items", [][]ddbtypes.TransactWriteItem{many(60), many(100)[60:]}, "100 writes for key \"limits-100 items\", over the limit of 99"},
		{"item over 400 KB", [][]ddbtypes.TransactWriteItem{{putWrite(effects, "huge", 401<<10)}}, "over DynamoDB's 400 KB item limit"},
		{"over 4 MB", [][]ddbtypes.TransactWriteItem{big}, "over the limit of 4193"},
		{"same item twice", [][]ddbtypes.TransactWriteItem{{effectWrite(effects, "a")}, {putWrite(effects, "b", 1), {Delete: &ddbtypes.Delete{TableName: aws.String(effects),
			Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "a"}}}}}}, "writes 0 and 2 are on the same item"},
		{"put on an updated item", [][]ddbtypes.TransactWriteItem{{effectWrite(effects, "a"), putWrite(effects, "a", 1)}}, "writes 0 and 1 are on the same item"},
		{"the record itself", [][]ddbtypes.TransactWriteItem{{putWrite(table, "jobs#limits-the record itself", 1)}}, "is on the idempotency record"},
		{"another region", [][]ddbtypes.TransactWriteItem{{update("arn:aws:dynamodb:eu-north-9:123456789012:table/" + effects)}}, "is in region eu-north-9, the idempotency table in " + region},
		{"two accounts", [][]ddbtypes.TransactWriteItem{{update("arn:aws:dynamodb:" + region + ":111111111111:table/" + effects), update("arn:aws:dynamodb:" + region + ":222222222222:table/other")}},
			"is in account 222222222222, write 0 in 111111111111"},
		{"not a table ARN", [][]ddbtypes.TransactWriteItem{{update("arn:aws:s3:::bucket")}}, "is not the ARN of a DynamoDB table"},
		{"no operation", [][]ddbtypes.TransactWriteItem{{{}}}, "sets 0 of Put, Update, Delete and ConditionCheck"},
		{"two operations", [][]ddbtypes.TransactWriteItem{{{Put: putWrite(effects, "a", 1).Put, Delete: &ddbtypes.Delete{}}}}, "sets 2 of Put"},
		{"no table", [][]ddbtypes.TransactWriteItem{{update("")}}, "write 0 (Update) names no table"},
		{"no key", [][]ddbtypes.TransactWriteItem{{{Delete: &ddbtypes.Delete{TableName: aws.String(effects)}}}}, "has no Key"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
			key := "limits-" + c.name
			var refusal error
			h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				for _, w := range c.writes {
					if err := idempotency.AddWrites(ctx, w...); err != nil {
						refusal = err
					}
				}
				return nil // ignores the refusal
			}))
			err := h.HandleMessage(context.Background(), msg(key, "payload"))
			var p *sqsworker.PermanentError
			if refusal == nil || !errors.Is(refusal, idempotency.ErrInvalidWrites) || !errors.As(refusal, &p) || !strings.Contains(refusal.Error(), c.want) {
				t.Fatalf("AddWrites: %v, want a Permanent error matching ErrInvalidWrites, saying %q", refusal, c.want)
			}
			if err != refusal {
				t.Errorf("job: %v, want AddWrites' refusal", err)
			}
			if r := itemOf(t, db, table, "jobs#"+key); r != nil {
				t.Errorf("record %v left, want the claim released", r)
			}
			if s := g.Stats(); s.Committed != 0 || s.Released != 1 {
				t.Errorf("stats %+v", s)
			}
		})
	}
	if n := itemCount(t, db, effects); n != 0 {
		t.Errorf("%d effect items written by refused jobs", n)
	}
}

// itemCount returns how many items a table holds.
func itemCount(t testing.TB, db *dynamodb.Client, table string) int {
	t.Helper()
	n := 0
	p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true), Select: ddbtypes.SelectCount})
	for p.HasMorePages() {
		out, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n += int(out.Count)
	}
	return n
}

// At the limits: 99 writes, and writes on other items of the idempotency
// table, commit with the completion (100 items), each once.
func TestAddWritesAtTheLimits(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store := newStore(t, db, idempotency.StoreConfig{KeyPrefix: "jobs"})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		for i := range idempotency.MaxWrites - 1 {
			if err := idempotency.AddWrites(ctx, effectWrite(effects, fmt.Sprintf("item-%02d", i))); err != nil {
				return err
			}
		}
		// The idempotency table, another item: allowed.
		return idempotency.AddWrites(ctx, putWrite(store.Config().Table, "jobs#another-key", 1))
	}))
	for range 2 {
		if err := h.HandleMessage(context.Background(), msg("at-limit", "payload")); err != nil {
			t.Fatal(err)
		}
	}
	for i := range idempotency.MaxWrites - 1 {
		if n := applied(t, db, effects, fmt.Sprintf("item-%02d", i)); n != 1 {
			t.Errorf("item %d: applied %d times", i, n)
		}
	}
	if s := g.Stats(); s.Committed != 1 || s.Duplicates != 1 {
		t.Errorf("stats %+v", s)
	}
}

// AddWrites outside the middleware, or after its handler returned, is
// ErrNoClaim; with a store that cannot commit writes, an error saying so.
func TestAddWritesWithoutClaim(t *testing.T) {
	w := effectWrite("effects", "k")
	if err := idempotency.AddWrites(context.Background(), w); !errors.Is(err, idempotency.ErrNoClaim) {
		t.Errorf("outside the middleware: %v", err)
	}
	if k, ok := idempotency.KeyFromContext(context.Background()); ok || k != "" {
		t.Errorf("KeyFromContext outside the middleware: %q %v", k, ok)
	}
	g, _ := idempotency.New(idempotency.NewMemStore(0), idempotency.Config{Logger: quiet()})
	var kept context.Context
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		kept = ctx
		if k, ok := idempotency.KeyFromContext(ctx); !ok || k != "late" {
			t.Errorf("KeyFromContext: %q %v", k, ok)
		}
		return nil
	}))
	if err := h.HandleMessage(context.Background(), msg("late", "payload")); err != nil {
		t.Fatal(err)
	}
	if err := idempotency.AddWrites(kept, w); !errors.Is(err, idempotency.ErrNoClaim) || !strings.Contains(err.Error(), "after the handler returned") {
		t.Errorf("after the handler returned: %v", err)
	}

	g, _ = idempotency.New(plainStore{idempotency.NewMemStore(0)}, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h = g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		runs.Add(1)
		return idempotency.AddWrites(ctx, w)
	}))
	if err := h.HandleMessage(context.Background(), msg("plain", "payload")); err == nil || !strings.Contains(err.Error(), "does not implement idempotency.WriteCommitter") {
		t.Errorf("store without transactions: %v", err)
	}
}

// plainStore is a Store without WriteCommitter.
type plainStore struct{ s *idempotency.MemStore }

func (p plainStore) Claim(ctx context.Context, key, hash string, until time.Time, by idempotency.Receive) (string, *idempotency.Record, error) {
	return p.s.Claim(ctx, key, hash, until, by)
}
func (p plainStore) Complete(ctx context.Context, key, token string, result []byte) error {
	return p.s.Complete(ctx, key, token, result)
}
func (p plainStore) Release(ctx context.Context, key, token string) error {
	return p.s.Release(ctx, key, token)
}
func (p plainStore) ExtendLease(ctx context.Context, key, token string, until time.Time) error {
	return p.s.ExtendLease(ctx, key, token, until)
}

// Without a claim (Config.Disabled, or RunWithoutKey for a message without
// a key) the writes commit on their own.
func TestAddWritesWithoutIdempotency(t *testing.T) {
	for _, cfg := range []idempotency.Config{
		{Disabled: true},
		{MissingKey: idempotency.RunWithoutKey, Key: func(*sqsworker.Message) string { return "" }},
	} {
		s := idempotency.NewMemStore(0)
		cfg.Logger = quiet()
		g, _ := idempotency.New(s, cfg)
		h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if _, ok := idempotency.KeyFromContext(ctx); ok {
				t.Errorf("disabled %v: a key in the context", cfg.Disabled)
			}
			return idempotency.AddWrites(ctx, effectWrite("effects", "k"))
		}))
		for range 2 {
			if err := h.HandleMessage(context.Background(), msg("k", "payload")); err != nil {
				t.Errorf("disabled %v: %v", cfg.Disabled, err)
			}
		}
		if n := len(s.Applied("")); n != 2 {
			t.Errorf("disabled %v: %d writes committed, want 2 (one per run, without idempotency)", cfg.Disabled, n)
		}
	}
}

// Keys over MaxKeySize are a Permanent error naming the limit, without a
// request; a key of MaxKeySize behind a KeyPrefix of MaxKeyPrefixSize
// fits DynamoDB's partition key; a longer prefix is refused.
func TestKeySizeLimits(t *testing.T) {
	t.Parallel()
	s := idempotency.NewMemStore(0)
	g, _ := idempotency.New(s, idempotency.Config{Logger: quiet()})
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	err := h.HandleMessage(context.Background(), msg(strings.Repeat("k", idempotency.MaxKeySize+1), "payload"))
	var p *sqsworker.PermanentError
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "1025 bytes, over the limit of 1024") {
		t.Errorf("long key: %v, want Permanent naming the limit", err)
	}
	if n := s.Calls(idempotency.OpClaim); n != 0 {
		t.Errorf("%d claims of a key over the limit", n)
	}

	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{KeyPrefix: strings.Repeat("p", idempotency.MaxKeyPrefixSize)})
	g, _ = idempotency.New(store, idempotency.Config{Logger: quiet()})
	h = g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	if err := h.HandleMessage(context.Background(), msg(strings.Repeat("k", idempotency.MaxKeySize), "payload")); err != nil {
		t.Errorf("longest key behind the longest prefix: %v", err)
	}
	_, err = idempotency.NewDynamoStore(context.Background(), db, idempotency.StoreConfig{Table: store.Config().Table, KeyPrefix: strings.Repeat("p", idempotency.MaxKeyPrefixSize+1)})
	if err == nil || !strings.Contains(err.Error(), "KeyPrefix of 1024 bytes is over 1023") {
		t.Errorf("long prefix: %v", err)
	}
}

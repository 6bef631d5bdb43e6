package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// newEffectsTable creates a table (partition key "id") for the effects of
// a test's handlers, deleted when the test ends.
func newEffectsTable(t testing.TB, db *dynamodb.Client) string {
	t.Helper()
	table := localtest.UniqueName(t, false)
	if err := idempotency.CreateTable(context.Background(), db, idempotency.StoreConfig{Table: table}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, table)
	return table
}

// effectWrite is one application of the effect of job id: ADD 1 to its
// item's counter.
func effectWrite(table, id string) ddbtypes.TransactWriteItem {
	return ddbtypes.TransactWriteItem{Update: &ddbtypes.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("ADD applied :one"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"}},
	}}
}

// applied returns how many times the effect of job id was applied.
func applied(t testing.TB, db *dynamodb.Client, table, id string) int {
	t.Helper()
	item := itemOf(t, db, table, id)
	if item == nil {
		return 0
	}
	n, err := strconv.Atoi(item["applied"])
	if err != nil {
		t.Fatalf("item %s: %v", id, item)
	}
	return n
}

// effectHandler is a handler adding the effect of its message's key to its
// claim's completion, counting its runs.
func effectHandler(table string, runs *atomic.Int64) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		runs.Add(1)
		key, ok := idempotency.KeyFromContext(ctx)
		if !ok {
			return errors.New("no key in the context")
		}
		return idempotency.AddWrites(ctx, effectWrite(table, key))
	})
}

// A first-time job commits its effect with the completion of its record in
// one transaction: two requests (claim, transaction); a duplicate costs one
// (the claim that finds the record) and applies nothing.
func TestAddWritesCommitsWithCompletion(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	db := localtest.NewCountingDynamoDB(t, &counter)
	effects := newEffectsTable(t, db)
	store := newStore(t, db, idempotency.StoreConfig{})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(effectHandler(effects, &runs))

	counter.Reset()
	if err := h.HandleMessage(context.Background(), msg("order-1", "payload")); err != nil {
		t.Fatal(err)
	}
	first := counter.ByOperation()
	counter.Reset()
	if err := h.HandleMessage(context.Background(), msg("order-1", "payload")); err != nil {
		t.Fatal(err)
	}
	dup := counter.ByOperation()
	t.Logf("DynamoDB requests: first-time job %v, duplicate %v", first, dup)
	if first["PutItem"] != 1 || first["TransactWriteItems"] != 1 || len(first) != 2 {
		t.Errorf("first-time job made %v, want one PutItem (claim) and one TransactWriteItems", first)
	}
	if dup["PutItem"] != 1 || len(dup) != 1 {
		t.Errorf("duplicate made %v, want one PutItem", dup)
	}
	if n := applied(t, db, effects, "order-1"); n != 1 || runs.Load() != 1 {
		t.Errorf("effect applied %d times, handler ran %d times; want 1 and 1", n, runs.Load())
	}
	if r := itemOf(t, db, store.Config().Table, "order-1"); r["status"] != idempotency.StatusCompleted || r["lease_expiry"] != "" {
		t.Errorf("record %v, want completed without a lease", r)
	}
	if s := g.Stats(); s.Committed != 1 || s.Claimed != 1 || s.Duplicates != 1 {
		t.Errorf("stats %+v", s)
	}
}

// The claim is lost (another holder took the key) before the commit: the
// job fails with ErrNotHolder and applies nothing; its retry is postponed
// while the other holder runs, and runs once its lease has ended.
func TestClaimLostBeforeCommitAppliesNothing(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store := newStore(t, db, idempotency.StoreConfig{})
	table := store.Config().Table
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	setLease := func(token string, until time.Time) {
		t.Helper()
		_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &table,
			Key:              map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "taken"}},
			UpdateExpression: aws.String("SET lease_token = :t, lease_expiry = :l"),
			ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
				":t": &ddbtypes.AttributeValueMemberS{Value: token},
				":l": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(until.UnixMilli(), 10)},
			}})
		if err != nil {
			t.Fatal(err)
		}
	}
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if runs.Add(1) == 1 {
			setLease("another-holder", time.Now().Add(time.Hour)) // its lease lapsed; another worker claimed the key
		}
		return idempotency.AddWrites(ctx, effectWrite(effects, "taken"))
	}))
	err := h.HandleMessage(context.Background(), msg("taken", "payload"))
	if !errors.Is(err, idempotency.ErrNotHolder) || !sqsworker.IsPartlyUnavailable(err) {
		t.Fatalf("commit after the claim was lost: %v, want ErrNotHolder, marked PartlyUnavailable: no outage for the breaker, nor a failure of the job's", err)
	}
	if n := applied(t, db, effects, "taken"); n != 0 {
		t.Fatalf("effect applied %d times by a holder that lost its claim", n)
	}
	if tok := itemOf(t, db, table, "taken")["lease_token"]; tok != "another-holder" {
		t.Errorf("record held by %q, want the other holder's claim left alone", tok)
	}
	// The retry, while the other holder's claim holds: postponed.
	if err := h.HandleMessage(context.Background(), msg("taken", "payload")); !isPostponed(err) || runs.Load() != 1 {
		t.Errorf("retry while the key is held: %v (runs %d), want postponed", err, runs.Load())
	}
	// The other holder died: once its lease ends, the retry runs, once.
	setLease("another-holder", time.Now().Add(-time.Second))
	if err := h.HandleMessage(context.Background(), msg("taken", "payload")); err != nil {
		t.Errorf("retry after the other holder's lease ended: %v", err)
	}
	if n := applied(t, db, effects, "taken"); n != 1 || runs.Load() != 2 {
		t.Errorf("effect applied %d times, %d runs; want 1 and 2", n, runs.Load())
	}
	if s := g.Stats(); s.LostClaims != 1 || s.Committed != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A condition of the handler's own fails: nothing is applied, the record is
// not completed but released, and the job fails with a
// *TransactionCanceledError naming the write; the retry runs at once, and
// commits once the condition holds.
func TestOwnConditionCancelsCommit(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store := newStore(t, db, idempotency.StoreConfig{})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	account := map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: "account-1"}}
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		runs.Add(1)
		return idempotency.AddWrites(ctx,
			ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{
				TableName: aws.String(effects), Key: account,
				ConditionExpression:                 aws.String("balance >= :amount"),
				ExpressionAttributeValues:           map[string]ddbtypes.AttributeValue{":amount": &ddbtypes.AttributeValueMemberN{Value: "10"}},
				ReturnValuesOnConditionCheckFailure: ddbtypes.ReturnValuesOnConditionCheckFailureAllOld,
			}},
			effectWrite(effects, "charge-1"))
	}))
	put := func(balance string) {
		t.Helper()
		item := map[string]ddbtypes.AttributeValue{"id": account["id"], "balance": &ddbtypes.AttributeValueMemberN{Value: balance}}
		if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(effects), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	put("5")
	err := h.HandleMessage(context.Background(), msg("charge-1", "payload"))
	var cancelled *idempotency.TransactionCanceledError
	if !errors.As(err, &cancelled) {
		t.Fatalf("failed condition: %v, want a *TransactionCanceledError", err)
	}
	t.Logf("handler's error: %v", err)
	if !cancelled.ConditionFailed(0) || cancelled.ConditionFailed(1) || len(cancelled.Reasons) != 2 || cancelled.Key != "charge-1" {
		t.Errorf("reasons %+v, want write 0's condition failed, alone", cancelled.Reasons)
	} else if b, _ := cancelled.Reasons[0].Item["balance"].(*ddbtypes.AttributeValueMemberN); b == nil || b.Value != "5" {
		t.Errorf("reason's item %v, want the account as found", cancelled.Reasons[0].Item)
	}
	if !strings.Contains(err.Error(), "write 0: ConditionalCheckFailed") || sqsworker.IsUnavailable(err) || errors.Is(err, idempotency.ErrNotHolder) {
		t.Errorf("error %q, want the write and reason named, not an outage nor a lost claim", err)
	}
	var p *sqsworker.PermanentError
	if errors.As(err, &p) {
		t.Errorf("error %v is Permanent; the retry may find the condition holding", err)
	}
	if n := applied(t, db, effects, "charge-1"); n != 0 {
		t.Errorf("effect applied %d times though its condition failed", n)
	}
	if r := itemOf(t, db, store.Config().Table, "charge-1"); r != nil {
		t.Errorf("record %v left after the cancelled commit, want it released", r)
	}
	// The retry runs at once, not postponed, and fails the same way.
	if err := h.HandleMessage(context.Background(), msg("charge-1", "payload")); !errors.As(err, &cancelled) || runs.Load() != 2 {
		t.Errorf("retry: %v (runs %d), want run again and cancelled again", err, runs.Load())
	}
	put("50")
	if err := h.HandleMessage(context.Background(), msg("charge-1", "payload")); err != nil {
		t.Errorf("retry with the condition holding: %v", err)
	}
	if err := h.HandleMessage(context.Background(), msg("charge-1", "payload")); err != nil || runs.Load() != 3 {
		t.Errorf("duplicate: %v (runs %d), want acknowledged without running", err, runs.Load())
	}
	if n := applied(t, db, effects, "charge-1"); n != 1 {
		t.Errorf("effect applied %d times, want 1", n)
	}
	if s := g.Stats(); s.Cancelled != 2 || s.Committed != 1 || s.Released != 2 {
		t.Errorf("stats %+v", s)
	}
}

// The reply to the transaction is lost, the SDK retries it with the same
// ClientRequestToken: DynamoDB applies it once and answers the retry as the
// first, so the job succeeds with one effect.
func TestLostCommitReplyAppliesOnce(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store, _ := proxiedStore(t, p, db)
	p.setRule(func(op string, n int) fault {
		if op == "TransactWriteItems" && n == 1 {
			return dropResponse
		}
		return forward
	})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(effectHandler(effects, &runs))
	if err := h.HandleMessage(context.Background(), msg("lost-reply", "payload")); err != nil {
		t.Errorf("job whose commit's first reply was lost: %v", err)
	}
	if n := p.requests("TransactWriteItems"); n < 2 {
		t.Errorf("%d TransactWriteItems requests: the reply was not lost, or not retried", n)
	}
	if err := h.HandleMessage(context.Background(), msg("lost-reply", "payload")); err != nil {
		t.Errorf("duplicate: %v", err)
	}
	if n := applied(t, db, effects, "lost-reply"); n != 1 || runs.Load() != 1 {
		t.Errorf("effect applied %d times, %d runs; want 1 and 1", n, runs.Load())
	}
}

// The same on the TCP fault proxy, with every reply of the SDK's attempts
// lost: the middleware retries the commit with the same token, and DynamoDB
// answers it as the attempt it applied.
func TestLostCommitRepliesOnTheWire(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	proxy, err := faultproxy.ForEndpoint(localtest.DynamoDBEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	var counter localtest.Counter
	viaProxy := localtest.NewDynamoDB(t, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
		o.APIOptions = append(o.APIOptions, counter.AddTo)
	})
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	direct := newStore(t, db, idempotency.StoreConfig{})
	store, err := idempotency.NewDynamoStore(context.Background(), viaProxy, direct.Config())
	if err != nil {
		t.Fatal(err)
	}
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	for _, lost := range []int{1, 4} {
		key := fmt.Sprintf("lost-%d", lost)
		var runs atomic.Int64
		h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			runs.Add(1)
			if err := proxy.LoseReplies(lost); err != nil { // the replies of the commit
				return err
			}
			return idempotency.AddWrites(ctx, effectWrite(effects, key))
		}))
		counter.Reset()
		if err := h.HandleMessage(context.Background(), msg(key, "payload")); err != nil {
			t.Errorf("%d replies lost: %v", lost, err)
		}
		if n := counter.Get("TransactWriteItems"); n <= lost {
			t.Errorf("%d replies lost: %d TransactWriteItems attempts", lost, n)
		}
		_ = proxy.Pass()
		if err := h.HandleMessage(context.Background(), msg(key, "payload")); err != nil {
			t.Errorf("%d replies lost: duplicate: %v", lost, err)
		}
		if n := applied(t, db, effects, key); n != 1 || runs.Load() != 1 {
			t.Errorf("%d replies lost: effect applied %d times, %d runs; want 1 and 1", lost, n, runs.Load())
		}
	}
	if s := proxy.Stats(); s.LostReplies != 5 {
		t.Errorf("proxy lost %d replies, want 5", s.LostReplies)
	}
}

// A commit failing in a brownout is retried, with the same request, until
// the store answers: the job succeeds, its effect applied once, and a
// duplicate is acknowledged.
func TestCommitRetriedThroughBrownout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, other := guards(b)
		var runs atomic.Int64
		work := effectHandler(b.effects, &runs)
		b.fail(idempotency.OpCommit, false)
		done := make(chan error, 1)
		go func() {
			done <- g.Middleware(work).HandleMessage(context.Background(), msg("brownout-commit", "payload"))
		}()
		// More failures than one TransactWriteItems call makes (the
		// SDK's attempts, each of which net/http may replay once).
		failures := 9
		if _, mem := b.store.(*idempotency.MemStore); mem {
			failures = 3
		}
		awaitFailures(t, b, idempotency.OpCommit, failures, done)
		b.heal()
		if err := wait(t, done, "end of the job"); err != nil {
			t.Errorf("job: %v", err)
		}
		if err := other.Middleware(work).HandleMessage(context.Background(), msg("brownout-commit", "payload")); err != nil {
			t.Errorf("duplicate: %v", err)
		}
		if n := b.applied("brownout-commit"); n != 1 || runs.Load() != 1 {
			t.Errorf("effect applied %d times, %d runs; want 1 and 1", n, runs.Load())
		}
	})
}

// A commit repeated after it was applied succeeds without applying anything
// again: with the same ID DynamoDB answers it as the first; with another
// (a repeat after DynamoDB's 10 minutes), the record completed with the
// claim's token shows it was applied. Another holder's commit is refused
// with ErrNotHolder.
func TestCommitWritesRepeated(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	store := newStore(t, db, idempotency.StoreConfig{})
	ctx := context.Background()
	token, _, err := store.Claim(ctx, "repeated", "h", time.Now().Add(time.Minute), idempotency.Receive{})
	if err != nil {
		t.Fatal(err)
	}
	c := idempotency.Commit{Key: "repeated", Token: token, PayloadHash: "h", Result: []byte("receipt"),
		Writes: []ddbtypes.TransactWriteItem{effectWrite(effects, "repeated")}, ID: "commit-1-" + token[:8], At: time.Now()}
	first, err := store.CommitWrites(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{c.ID, "commit-2-" + token[:8]} {
		c.ID = id
		r, err := store.CommitWrites(ctx, c)
		if err != nil || r == nil || r.Status != idempotency.StatusCompleted || r.Token != token || !r.Expiry.Equal(first.Expiry) || string(r.Result) != "receipt" {
			t.Errorf("commit %s repeated: %+v, %v", id, r, err)
		}
	}
	if n := applied(t, db, effects, "repeated"); n != 1 {
		t.Errorf("effect applied %d times", n)
	}
	c.Token, c.ID = "another-holder", "commit-3-"+token[:8]
	if _, err := store.CommitWrites(ctx, c); !errors.Is(err, idempotency.ErrNotHolder) {
		t.Errorf("another holder's commit: %v, want ErrNotHolder", err)
	}
	// Writes alone (no claim, no condition) commit as they are; repeated
	// with the same ID, they are applied once: DynamoDB (Local too)
	// honours the ClientRequestToken.
	alone := idempotency.Commit{Writes: []ddbtypes.TransactWriteItem{effectWrite(effects, "alone")}, ID: "alone-" + token[:8]}
	for range 2 {
		if _, err := store.CommitWrites(ctx, alone); err != nil {
			t.Errorf("writes without a claim: %v", err)
		}
	}
	if n := applied(t, db, effects, "alone"); n != 1 {
		t.Errorf("effect without a claim, committed twice with one ID, applied %d times", n)
	}
}

// Two Puts on one item of a table whose key AddWrites cannot know: DynamoDB
// refuses the transaction, and the job fails with an error naming the
// rules, without retrying for 30s.
func TestDynamoDBRefusesWrites(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	effects := newEffectsTable(t, db)
	g, _ := idempotency.New(newStore(t, db, idempotency.StoreConfig{}), idempotency.Config{Logger: quiet()})
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, putWrite(effects, "same", 1), putWrite(effects, "same", 2))
	}))
	start := time.Now()
	err := h.HandleMessage(context.Background(), msg("refused-writes", "payload"))
	if err == nil || !strings.Contains(err.Error(), "must be on distinct items") || sqsworker.IsUnavailable(err) {
		t.Errorf("two puts on one item: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("refused after %s: retried", d)
	}
	if n := itemCount(t, db, effects); n != 0 {
		t.Errorf("%d items written", n)
	}
}

package idempotency_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// Each tenant's effects go to a table of its own, chosen per job; two
// tenants' tables are missing (an operator's mistake for those tenants),
// on the emulators, with a redrive policy of maxReceiveCount 2. The other
// tenant's jobs apply their effects once; the two tenants' jobs wait, none
// dead-lettered, none applied; one error is logged for each missing table,
// naming it (not the idempotency table, which is there). Before, each error
// said the idempotency table did not exist, and came again after every
// other tenant's commit, with a note that the store "answers again".
func TestOneTenantsWritesTableMissing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	tables := map[string]string{
		"a": newStore(t, db, idempotency.StoreConfig{}).Config().Table,
		"b": localtest.UniqueName(t, false) + "-tenant-b",
		"c": localtest.UniqueName(t, false) + "-tenant-c",
	}
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 2})
	var logs logBuffer
	guard, err := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	h := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := m.Attribute(idempotency.KeyAttribute)
		return idempotency.AddWrites(ctx, types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(tables[k[:1]]),
			Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: k}},
			UpdateExpression:          aws.String("ADD applied :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}})
	}))
	var keys, good []string
	for i := range 12 {
		tenant := "a"
		if i%4 == 1 {
			tenant = "b"
		} else if i%4 == 3 {
			tenant = "c"
		}
		k := fmt.Sprintf("%s-%d", tenant, i)
		keys = append(keys, k)
		if tenant == "a" {
			good = append(good, k)
		}
	}
	sendKeyed(t, sq, q.URL, keys)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second},
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 500 * time.Millisecond, MaxProbeInterval: time.Second}}, h)
	applied := func() map[string]int {
		got := map[string]int{}
		for _, k := range good {
			out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(tables["a"]), ConsistentRead: aws.Bool(true),
				Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: k}}})
			if err != nil {
				t.Fatal(err)
			}
			if n, ok := out.Item["applied"].(*types.AttributeValueMemberN); ok {
				got[k], _ = strconv.Atoi(n.Value)
			}
		}
		return got
	}
	// Every good job applied, and the other tenants' six jobs each tried
	// at least three times: past maxReceiveCount but for the runtime's
	// care.
	localtest.Eventually(t, 120*time.Second, func() bool {
		return len(applied()) == len(good) && guard.Stats().StoreErrors >= 18
	}, "good jobs applied %v; idempotency %+v", applied(), guard.Stats())
	for k, n := range applied() {
		if n != 1 {
			t.Errorf("%s: effect applied %d times, want 1", k, n)
		}
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	// The six others wait on the queue, in fresh copies on their last
	// receives (an original and its copy are both counted until the
	// original's delete lands).
	localtest.Eventually(t, 60*time.Second, func() bool {
		v, f, d := localtest.Depth(t, sq, q.URL)
		return v+f+d == 6
	}, "the queue does not hold the 6 jobs of the tenants whose tables are missing")
	out := logs.String()
	var errs []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "level=ERROR") {
			errs = append(errs, l)
		}
	}
	for _, tenant := range []string{"b", "c"} {
		n := 0
		for _, l := range errs {
			if strings.Contains(l, tables[tenant]) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d errors name the missing table %s of tenant %s, want 1", n, tables[tenant], tenant)
		}
	}
	if len(errs) != 2 || strings.Contains(out, "table "+store.Config().Table+" does not exist") {
		t.Errorf("%d errors logged, want 2 (one per missing table), none saying the idempotency table %s is missing:\n%s", len(errs), store.Config().Table, out)
	}
	t.Logf("worker %+v; idempotency %+v", w.Stats(), guard.Stats())
}

// appliedTo returns, of keys (each a tenant's letter, "-" and more), those
// of the tenants listed whose effect is in their tenant's table (tables),
// with the number of times it was applied.
func appliedTo(t *testing.T, db *dynamodb.Client, tables map[string]string, keys []string, tenants string) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, k := range keys {
		if strings.Contains(tenants, k[:1]) {
			if n := applied(t, db, tables[k[:1]], k); n > 0 {
				got[k] = n
			}
		}
	}
	return got
}

// tenantHandler is a handler writing its effect, ADD 1 to the item of its
// key, to the table of its tenant, the key's first letter.
func tenantHandler(guard *idempotency.Guard, tables map[string]string) sqsworker.Handler {
	return guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		k, _ := m.Attribute(idempotency.KeyAttribute)
		return idempotency.AddWrites(ctx, effectWrite(tables[k[:1]], k))
	}))
}

// One tenant's table of the handler's writes missing, on the emulators,
// with a redrive policy of maxReceiveCount 2 and a breaker that opens after
// 3 dependency failures in a row. The other tenants' jobs apply their
// effects once, and the worker's circuit breaker never opens: DynamoDB
// answers, and one tenant's table is not a dependency down. The bad
// tenant's jobs wait, none dead-lettered; once its table is created they
// apply their effects once each. Before, each refused commit counted toward
// the breaker (as sqsworker.Unavailable): it opened again and again (9
// times in 9 s in TestOneTenantsWritesTableMissing), pausing every
// tenant's jobs for the one tenant's mistake.
func TestOneTenantsMissingTableLeavesTheBreakerClosed(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	tables := map[string]string{"a": newEffectsTable(t, db), "b": localtest.UniqueName(t, false) + "-tenant-b", "c": newEffectsTable(t, db)}
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 2})
	guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var keys, bad []string
	for i := range 12 {
		tenant := string("abc"[i%3])
		keys = append(keys, fmt.Sprintf("%s-%d", tenant, i))
		if tenant == "b" {
			bad = append(bad, keys[i])
		}
	}
	sendKeyed(t, sq, q.URL, keys)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second},
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 500 * time.Millisecond, MaxProbeInterval: time.Second}},
		tenantHandler(guard, tables))
	// The good tenants' eight jobs applied, and the bad tenant's four each
	// tried at least three times: past maxReceiveCount but for the
	// runtime's care.
	localtest.Eventually(t, 120*time.Second, func() bool {
		return len(appliedTo(t, db, tables, keys, "ac")) == len(keys)-len(bad) && guard.Stats().StoreErrors >= int64(3*len(bad))
	}, "good jobs applied %v; idempotency %+v", appliedTo(t, db, tables, keys, "ac"), guard.Stats())
	if s := w.Stats(); s.BreakerOpens != 0 {
		t.Errorf("the circuit breaker opened %d times for one tenant's missing table; worker %+v", s.BreakerOpens, s)
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	// The operator creates the table: the waiting jobs apply their effects.
	if err := idempotency.CreateTable(context.Background(), db, idempotency.StoreConfig{Table: tables["b"]}); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, tables["b"])
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, sq, q.URL)
		return len(appliedTo(t, db, tables, keys, "b")) == len(bad) && v+f+d == 0
	}, "after the table was created: applied %v", appliedTo(t, db, tables, keys, "b"))
	for k, n := range appliedTo(t, db, tables, keys, "abc") {
		if n != 1 {
			t.Errorf("%s: effect applied %d times, want 1", k, n)
		}
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	if s := w.Stats(); s.BreakerOpens != 0 || s.DeadLettered != 0 {
		t.Errorf("worker %+v, want the breaker never opened, nothing dead-lettered", s)
	}
	t.Logf("worker %+v; idempotency %+v", w.Stats(), guard.Stats())
}

// The same in Lambda: one invocation with one tenant's jobs first, whose
// table is missing, then the others'. Every other tenant's record runs and
// applies its effect in that invocation; the bad tenant's are reported
// failed, none dead-lettered. Before, the bad tenant's failures opened the
// adapter's breaker (Threshold 2) and the other tenants' records were
// postponed unrun.
func TestLambdaOneTenantsMissingTableLeavesTheBreakerClosed(t *testing.T) {
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	tables := map[string]string{"a": newEffectsTable(t, db), "b": localtest.UniqueName(t, false) + "-tenant-b"}
	guard, err := idempotency.New(newStore(t, db, idempotency.StoreConfig{}), idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	f := sqstest.NewFake()
	f.CreateQueue("orders-dlq", nil)
	url := f.CreateQueue("orders", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("orders-dlq"))})
	fn, err := lambda.NewHandler(tenantHandler(guard, tables), lambda.Config{Client: f, Concurrency: 1, DisableHeartbeat: true, Logger: quiet(),
		Breaker: sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"b-0", "b-1", "b-2", "a-3", "a-4", "a-5"}
	for _, k := range keys {
		f.Send(url, "body-"+k, func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]sqstypes.MessageAttributeValue{
				idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(k)},
			}
		})
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != len(keys) {
		t.Fatalf("received %d messages: %v", len(out.Messages), err)
	}
	resp, err := fn(context.Background(), sqstest.SQSEvent(sqstest.QueueARN("orders"), out.Messages))
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, m := range out.Messages {
		for _, r := range resp.BatchItemFailures {
			if r.ItemIdentifier == *m.MessageId {
				failed[*m.MessageAttributes[idempotency.KeyAttribute].StringValue] = true
			}
		}
	}
	for _, k := range keys {
		n := 0
		if k[0] == 'a' {
			n = applied(t, db, tables["a"], k)
		}
		switch {
		case k[0] == 'a' && (n != 1 || failed[k]):
			t.Errorf("%s: effect applied %d times (reported failed: %v), want once in this invocation", k, n, failed[k])
		case k[0] == 'b' && !failed[k]:
			t.Errorf("%s: not reported failed, its table missing", k)
		}
	}
	if v, fl, d := f.Depth(sqstest.QueueURL("orders-dlq")); v+fl+d != 0 {
		t.Errorf("%d records dead-lettered", v+fl+d)
	}
}

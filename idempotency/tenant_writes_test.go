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

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
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

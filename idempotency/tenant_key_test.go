package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// createKeyedTable creates table on db with the partition key attr of type
// typ, deleted when the test ends.
func createKeyedTable(t *testing.T, db *dynamodb.Client, table, attr string, typ types.ScalarAttributeType) {
	t.Helper()
	ctx := context.Background()
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{TableName: &table,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &attr, AttributeType: typ}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &attr, KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest})
	if err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// recreateTable deletes table and creates it again for a DynamoStore's
// writes: partition key "id", a string.
func recreateTable(t *testing.T, db *dynamodb.Client, table string) {
	t.Helper()
	ctx := context.Background()
	if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &table}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableNotExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &table}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	createKeyedTable(t, db, table, "id", types.ScalarAttributeTypeS)
}

// Two tenants' tables of the handler's writes keyed otherwise than the
// items the handler writes (an operator's mistake): tenant b's by another
// attribute, pk, which DynamoDB refuses with a ValidationException naming
// no table; tenant c's by id of type N, which cancels the transaction
// with a ValidationError. On the emulators, with a redrive policy of
// maxReceiveCount 2: the other tenant's jobs apply their effects once; b's
// and c's jobs wait, none dead-lettered, and the circuit breaker stays
// closed; one error per table names it, its key and the key the items
// carry. Once the tables are recreated with the items' key, every waiting
// job applies its effect once. Before, both refusals were the jobs' own
// faults, counted toward the dead-letter queue: every job of the two
// tenants was dead-lettered.
func TestTenantTableWithAnotherKeyWaitsNotDeadLettered(t *testing.T) {
	t.Parallel()
	sq := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	tables := map[string]string{"a": newEffectsTable(t, db), "b": localtest.UniqueName(t, false) + "-tenant-b", "c": localtest.UniqueName(t, false) + "-tenant-c"}
	createKeyedTable(t, db, tables["b"], "pk", types.ScalarAttributeTypeS)
	localtest.DeleteTableOnCleanup(t, db, tables["b"])
	createKeyedTable(t, db, tables["c"], "id", types.ScalarAttributeTypeN)
	localtest.DeleteTableOnCleanup(t, db, tables["c"])
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 2})
	var logs logBuffer
	guard, err := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 12 {
		keys = append(keys, fmt.Sprintf("%c-%d", "abc"[i%3], i))
	}
	sendKeyed(t, sq, q.URL, keys)
	w := runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2,
		Backoff: sqsworker.ExponentialBackoff{Base: 200 * time.Millisecond, Cap: time.Second},
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 500 * time.Millisecond, MaxProbeInterval: time.Second}},
		tenantHandler(guard, tables))
	dead := func() int {
		v, f, d := localtest.Depth(t, sq, q.DLQURL)
		return v + f + d
	}
	// Tenant a's four jobs applied, and the eight others each tried at
	// least three times (past maxReceiveCount but for the runtime's care),
	// unless some were dead-lettered.
	localtest.Eventually(t, 120*time.Second, func() bool {
		return len(appliedTo(t, db, tables, keys, "a")) == 4 && (guard.Stats().StoreErrors >= 24 || dead() > 0)
	}, "tenant a's jobs not applied, or the others not tried three times each")
	if n := dead(); n != 0 {
		t.Fatalf("while the tables were keyed otherwise: %d messages dead-lettered; worker %+v", n, w.Stats())
	}
	if s := w.Stats(); s.BreakerOpens != 0 {
		t.Errorf("the circuit breaker opened %d times for two tenants' tables; worker %+v", s.BreakerOpens, s)
	}
	out := logs.String()
	for tenant, key := range map[string]string{"b": "has the key pk (S)", "c": "has the key id (N)"} {
		var named []string
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, tables[tenant]) {
				named = append(named, l)
			}
		}
		if len(named) != 1 || !strings.Contains(named[0], key) || !strings.Contains(named[0], "carries the key id (S)") {
			t.Errorf("tenant %s: %d errors name its table %s, want 1 saying it %s and the items carry id (S):\n%s", tenant, len(named), tables[tenant], key, strings.Join(named, "\n"))
		}
	}
	// The operator recreates the tables with the items' key.
	recreateTable(t, db, tables["b"])
	recreateTable(t, db, tables["c"])
	localtest.Eventually(t, 120*time.Second, func() bool {
		return len(appliedTo(t, db, tables, keys, "bc")) == 8 && drained(t, sq, q.URL)
	}, "after the tables were recreated: applied %v; worker %+v", appliedTo(t, db, tables, keys, "bc"), w.Stats())
	for k, n := range appliedTo(t, db, tables, keys, "abc") {
		if n != 1 {
			t.Errorf("%s: effect applied %d times, want 1", k, n)
		}
	}
	if v, f, d := localtest.Depth(t, sq, q.DLQURL); v+f+d != 0 {
		t.Errorf("%d messages dead-lettered", v+f+d)
	}
	t.Logf("worker %+v; idempotency %+v", w.Stats(), guard.Stats())
}

// describeCounter is a DynamoDB client that counts DescribeTable calls
// and transactions and, while deny is set, refuses DescribeTable as IAM
// would.
type describeCounter struct {
	*dynamodb.Client
	mu     sync.Mutex
	n      map[string]int
	deny   bool
	denied int
	// throttle makes DescribeTable fail as throttled, an outage.
	throttle bool
	commits  int
}

func (d *describeCounter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	d.mu.Lock()
	d.commits++
	d.mu.Unlock()
	return d.Client.TransactWriteItems(ctx, in, opts...)
}

func (d *describeCounter) DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	d.mu.Lock()
	d.n[aws.ToString(in.TableName)]++
	deny := d.deny
	if deny {
		d.denied++
	}
	d.mu.Unlock()
	if d.throttle {
		return nil, &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate of requests exceeds the allowed throughput."}
	}
	if deny {
		return nil, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "User: arn:aws:sts::1:assumed-role/w/x is not authorized to perform: dynamodb:DescribeTable"}
	}
	return d.Client.DescribeTable(ctx, in, opts...)
}

func (d *describeCounter) calls(table string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[table]
}

// The keys of the writes' tables are checked only after DynamoDB refused a
// commit as invalid, once per table however many commits ask, on DynamoDB
// Local: commits that succeed describe nothing; a write whose item fits
// its table's key but is invalid otherwise (an UpdateExpression DynamoDB
// refuses) stays the job's fault. With DescribeTable denied, a table keyed
// otherwise is the job's fault as before the check (a plain error, not
// Unavailable), with a warning logged once naming the permission.
func TestWritesTableKeyCheckedOnlyAfterARefusal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	api := &describeCounter{Client: db, n: map[string]int{}}
	cfg := newStore(t, db, idempotency.StoreConfig{}).Config()
	store, err := idempotency.NewDynamoStore(ctx, api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	good := newEffectsTable(t, db)
	other := localtest.UniqueName(t, false) + "-pk"
	createKeyedTable(t, db, other, "pk", types.ScalarAttributeTypeS)
	localtest.DeleteTableOnCleanup(t, db, other)
	var logs logBuffer
	guard, err := idempotency.New(store, idempotency.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	run := func(key string, w types.TransactWriteItem) error {
		return guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			return idempotency.AddWrites(ctx, w)
		})).HandleMessage(ctx, msg(key, "payload"))
	}
	for i := range 3 {
		if err := run(fmt.Sprintf("ok-%d", i), effectWrite(good, fmt.Sprintf("ok-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if n := api.calls(good); n != 0 {
		t.Errorf("%d DescribeTable calls for commits that succeeded, want 0", n)
	}
	badExpr := effectWrite(good, "bad-expr")
	badExpr.Update.UpdateExpression = aws.String("ADD applied :missing")
	if err := run("bad-expr", badExpr); err == nil || sqsworker.IsUnavailable(err) || errors.Is(err, idempotency.ErrMisconfigured) {
		t.Errorf("a write refused for its own expression: %v; want the job's fault", err)
	}
	numeric := localtest.UniqueName(t, false) + "-n"
	createKeyedTable(t, db, numeric, "id", types.ScalarAttributeTypeN)
	localtest.DeleteTableOnCleanup(t, db, numeric)
	api.mu.Lock()
	api.commits = 0
	api.mu.Unlock()
	for i := range 3 {
		for table, key := range map[string]string{other: "has the key pk (S)", numeric: "has the key id (N)"} {
			err := run(fmt.Sprintf("%s-%d", table, i), effectWrite(table, fmt.Sprintf("%d", i)))
			var wt *idempotency.WritesTableError
			if !errors.As(err, &wt) || !sqsworker.IsPartlyUnavailable(err) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "carries the key id (S)") {
				t.Errorf("a write on a table keyed otherwise: %v; want a partly unavailable WritesTableError saying it %s", err, key)
			}
		}
	}
	if n, m, k := api.calls(good), api.calls(other), api.calls(numeric); n != 1 || m != 1 || k != 1 {
		t.Errorf("DescribeTable called %d, %d and %d times for the three tables, want once each", n, m, k)
	}
	if api.commits != 6 {
		t.Errorf("%d commits for 6 jobs whose tables are keyed otherwise, want 6: an operator's mistake is not retried in the job", api.commits)
	}
	// Without DescribeTable: the job's fault, as before the check, and one
	// warning.
	denied := localtest.UniqueName(t, false) + "-denied"
	createKeyedTable(t, db, denied, "pk", types.ScalarAttributeTypeS)
	localtest.DeleteTableOnCleanup(t, db, denied)
	api.mu.Lock()
	api.deny = true
	api.mu.Unlock()
	for i := range 2 {
		err := run(fmt.Sprintf("denied-%d", i), effectWrite(denied, fmt.Sprintf("denied-%d", i)))
		if err == nil || sqsworker.IsUnavailable(err) || errors.Is(err, idempotency.ErrMisconfigured) || !strings.Contains(err.Error(), "could not be checked") {
			t.Errorf("a write on a table that cannot be described: %v; want the job's fault, saying the key was not checked", err)
		}
	}
	if api.denied != 1 {
		t.Errorf("DescribeTable denied %d times, want once (the failure kept)", api.denied)
	}
	if out := logs.String(); strings.Count(out, "dynamodb:DescribeTable on the tables of the writes") != 1 {
		t.Errorf("want one warning naming the permission:\n%s", out)
	}
}

// A commit refused as invalid whose writes are on one table describes it
// once, however many writes, when DescribeTable fails for an outage (which
// is not kept): the job waits, partly unavailable. Before, each write of
// the table described it again, 3 calls for the 3 writes here.
func TestWritesTableDescribedOncePerCommitInAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := localtest.NewDynamoDB(t)
	api := &describeCounter{Client: db, n: map[string]int{}}
	cfg := newStore(t, db, idempotency.StoreConfig{}).Config()
	store, err := idempotency.NewDynamoStore(ctx, api, cfg)
	if err != nil {
		t.Fatal(err)
	}
	api.throttle = true
	other := localtest.UniqueName(t, false) + "-pk"
	createKeyedTable(t, db, other, "pk", types.ScalarAttributeTypeS)
	localtest.DeleteTableOnCleanup(t, db, other)
	guard, err := idempotency.New(store, idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	err = guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
		return idempotency.AddWrites(ctx, effectWrite(other, "1"), effectWrite(other, "2"), effectWrite(other, "3"))
	})).HandleMessage(ctx, msg("throttled", "payload"))
	if !sqsworker.IsPartlyUnavailable(err) {
		t.Errorf("a refused commit whose table could not be described for an outage: %v; want it partly unavailable", err)
	}
	if n := api.calls(other); n != 1 {
		t.Errorf("DescribeTable called %d times for one commit's writes on one table, want once", n)
	}
}

package batch_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
)

// beforeOp returns a client option that calls f before each request of the
// operation op whose input match accepts (before the SDK's retries, which
// repeat the request without calling f again).
func beforeOp(op string, match func(in any) bool, f func()) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("review-hook",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if awsmiddleware.GetOperationName(ctx) == op && match(in.Parameters) {
						f()
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.After)
		})
	}
}

// The reply to the update that takes the lease on sending the completion is
// lost: the SDK's retry finds the lease held, by this very run. The run
// sends the completion at once, rather than taking itself for another
// holder and putting its chunk off until its own lease ends.
func TestLostLeaseReply(t *testing.T) {
	t.Parallel()
	proxy := dynamoProxy(t)
	var armed, lost atomic.Bool
	isLease := func(in any) bool {
		u, ok := in.(*dynamodb.UpdateItemInput)
		return ok && strings.Contains(aws.ToString(u.UpdateExpression), ":until")
	}
	e := newFakeEnv(t, batch.Config{}, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(proxy.URL()) },
		beforeOp("UpdateItem", isLease, func() {
			if armed.Load() && lost.CompareAndSwap(false, true) {
				if err := proxy.LoseReplies(1); err != nil {
					t.Error(err)
				}
			}
		}))
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("lostlease", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	h := e.coord.Middleware(new(effects).handler(nil))
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	armed.Store(true)
	before := proxy.Stats().LostReplies
	err := h.HandleMessage(ctx, msgs[1])
	if n := proxy.Stats().LostReplies - before; n != 1 {
		t.Fatalf("%d replies lost, want 1", n)
	}
	if err != nil {
		t.Fatalf("the last chunk, whose lease reply was lost: %v, want the completion sent in this run", err)
	}
	p := progress(t, e.coord, "lostlease")
	if p.Notified.IsZero() {
		t.Errorf("completion not marked sent: %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// The chunk whose run holds the lease on sending the completion comes back
// while the lease holds: it is put off (sqsworker.RetryAfter with a nil
// error), not failed. A failure would count toward the dead-letter queue:
// on its last attempt the runtime would dead-letter the one message bound to
// send the completion, and the batch would never complete.
func TestHeldLeaseIsNotAFailure(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("heldlease", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	h := e.coord.Middleware(new(effects).handler(nil))
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	// chunk 1 counts and takes the lease; its send fails, and the lease
	// is left as a holder that died leaves it.
	e.sqs.FailNext("SendMessage", errors.New("injected"), 1)
	if err := h.HandleMessage(ctx, msgs[1]); err == nil {
		t.Fatal("the send did not fail")
	}
	_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.table, Key: keyOf("batch#heldlease"),
		UpdateExpression:          aws.String("SET notify_token = :t, notify_until = :u, notify_chunk = :c"),
		ExpressionAttributeValues: vals(":t", "S:dead", ":u", "N:"+strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10), ":c", "N:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	last := again(again(msgs[1])) // its last attempt
	err = h.HandleMessage(ctx, last)
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Err != nil || sqsworker.IsUnavailable(err) {
		t.Fatalf("the holder's chunk while its lease holds: %v, want a postponement (RetryAfter with a nil error)", err)
	}
}

// conflicting is a DynamoDB client whose transactions are all cancelled for
// conflicting with others, as on a hot batch item under many concurrent
// chunks.
type conflicting struct {
	*dynamodb.Client
	calls atomic.Int64
}

func (c *conflicting) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.calls.Add(1)
	reasons := make([]ddbtypes.CancellationReason, len(in.TransactItems))
	for i := range reasons {
		reasons[i].Code = aws.String("None")
	}
	reasons[len(reasons)-1].Code = aws.String("TransactionConflict") // the batch's item
	return nil, &ddbtypes.TransactionCanceledException{Message: aws.String("Transaction cancelled, please refer cancellation reasons for specific reasons [None, None, TransactionConflict]"),
		CancellationReasons: reasons}
}

// With the idempotency middleware, the commit that counts a chunk keeps
// conflicting on the batch's item until its retries run out: the chunk's
// run fails as sqsworker.Unavailable (contention, like an outage, is no
// fault of the chunk's), as it does with Middleware's own transaction, never
// as a failure that would bring the chunk closer to the dead-letter queue.
func TestConflictIsNotAFailure(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, guarded bool) {
		e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("hot", 1)); err != nil {
			t.Fatal(err)
		}
		db := &conflicting{Client: e.db}
		coord, err := batch.New(ctx, db, e.sqs, batch.Config{Table: e.table, MaxReceiveCount: 3, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		batch.SetCountBudget(coord, 2*time.Second)
		h := coord.Middleware(new(effects).handler(nil))
		if guarded {
			h = withGuard(t, coord, db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{ClaimGrace: time.Millisecond})(new(effects).handler(nil))
		}
		m := again(again(receive(t, e.sqs, e.work, 1)[0])) // its last attempt
		// The commit's retries last as long as the claim: a second.
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		err = h.HandleMessage(rctx, m)
		if db.calls.Load() < 2 {
			t.Fatalf("%d transactions, want the conflicts retried", db.calls.Load())
		}
		if err == nil || !sqsworker.IsPartlyUnavailable(err) {
			t.Fatalf("a chunk whose count conflicted until its retries ran out: %v, want a PartlyUnavailable error: contention, not an outage for the breaker", err)
		}
		if p := progress(t, e.coord, "hot"); p.Done != 0 || p.Failed != 0 {
			t.Errorf("progress %+v, want the chunk pending", p)
		}
	})
}

// capacity is a client option that asks DynamoDB for the write capacity
// each transaction consumes, and adds it up in *wcu.
func capacity(wcu *atomic.Int64) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("review-capacity",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					tx, ok := in.Parameters.(*dynamodb.TransactWriteItemsInput)
					if ok {
						tx.ReturnConsumedCapacity = ddbtypes.ReturnConsumedCapacityTotal
					}
					out, md, err := next.HandleInitialize(ctx, in)
					if res, ok := out.Result.(*dynamodb.TransactWriteItemsOutput); ok && err == nil {
						for _, c := range res.ConsumedCapacity {
							wcu.Add(int64(aws.ToFloat64(c.CapacityUnits)))
						}
					}
					return out, md, err
				}), middleware.After)
		})
	}
}

// Every chunk's count updates the batch's item, the hottest item of a
// batch: what that costs must not grow with the completion job's body.
// DynamoDB bills a write by the larger of the item's sizes before and after
// (1 KB a unit, twice in a transaction), and one item takes about 1,000
// units a second: with a 200 KB callback kept in the batch's item, each
// count would cost some 400 units, and one batch would count two or three
// chunks a second, throttled all along.
func TestCountCostIndependentOfCallback(t *testing.T) {
	t.Parallel()
	var wcu atomic.Int64
	e := newFakeEnv(t, batch.Config{}, capacity(&wcu))
	ctx := context.Background()
	h := e.coord.Middleware(new(effects).handler(nil))
	cost := func(id string, body string) int64 {
		s := e.spec(id, 2)
		s.Callback.Body = body
		if err := e.coord.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		msgs := receive(t, e.sqs, e.work, 2)
		wcu.Store(0)
		if err := h.HandleMessage(ctx, msgs[0]); err != nil {
			t.Fatal(err)
		}
		return wcu.Load()
	}
	small := cost("small-callback", "done")
	large := cost("large-callback", strings.Repeat("x", 200<<10))
	if small == 0 {
		t.Skip("DynamoDB does not report the capacity transactions consume")
	}
	t.Logf("a chunk's count: %d WCU with a 4-byte callback, %d with a 200 KiB one", small, large)
	if large > small {
		t.Errorf("a chunk's count costs %d WCU with a 200 KiB callback, %d with a small one: want the same", large, small)
	}
}

// A batch created before the completion job had an item of its own keeps
// it in the batch's item: its completion is sent from there.
func TestCallbackInBatchItem(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("legacy", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.table, Key: keyOf("batch#legacy"),
		UpdateExpression:          aws.String("SET callback_body = :b, callback_attrs = :a, callback_group = :g"),
		ExpressionAttributeValues: vals(":b", "S:legacy body", ":a", "S:null", ":g", "S:legacy"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: keyOf("batch#legacy#callback")}); err != nil {
		t.Fatal(err)
	}
	h := e.coord.Middleware(new(effects).handler(nil))
	if err := h.HandleMessage(ctx, receive(t, e.sqs, e.work, 1)[0]); err != nil {
		t.Fatal(err)
	}
	done := receive(t, e.sqs, e.callbacks, 10)
	if len(done) != 1 || done[0].Body != "legacy body" {
		t.Fatalf("%d completion jobs (%v), want the one kept in the batch's item", len(done), done)
	}
}

// Create called at once, several times, with the same batch: each call
// succeeds, the batch is recorded once, and each chunk is counted once
// however many copies were sent.
func TestCreateConcurrently(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	s := e.spec("twice", 20)
	errs := make(chan error, 8)
	for range 8 {
		go func() { errs <- e.coord.Create(ctx, s) }()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Create: %v", err)
		}
	}
	h := e.coord.Middleware(new(effects).handler(nil))
	for {
		msgs := receive(t, e.sqs, e.work, 10)
		if len(msgs) == 0 {
			break
		}
		for _, m := range msgs {
			if err := h.HandleMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
	}
	p := progress(t, e.coord, "twice")
	if p.Total != 20 || p.Done != 20 || p.Notified.IsZero() {
		t.Errorf("progress %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// A spec that the chunks' queue, or the callback queue, would refuse is
// refused by Create before the batch is recorded: recorded, the batch could
// never complete, and its ID could not be created again with the spec
// fixed (another spec under the same ID is a SpecMismatchError).
func TestCreateRefusesBeforeRecording(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	small := e.sqs.CreateQueue("small-messages", map[string]string{"MaximumMessageSize": "1024"})
	for _, tc := range []struct {
		name, want string
		spec       func(s *batch.Spec)
	}{
		{"a chunk over the queue's MaximumMessageSize", "MaximumMessageSize", func(s *batch.Spec) {
			s.QueueURL = small
			s.Chunks[1].Body = strings.Repeat("x", 2000)
		}},
		{"a callback over its queue's MaximumMessageSize", "MaximumMessageSize", func(s *batch.Spec) {
			s.Callback.QueueURL = small
			s.Callback.Body = strings.Repeat("x", 2000)
		}},
		{"a deduplication ID on a standard queue", "deduplication ID", func(s *batch.Spec) {
			s.Chunks[0].DeduplicationID = "d0"
		}},
		{"a chunks' queue that does not exist", "does not exist", func(s *batch.Spec) {
			s.QueueURL += "-missing"
		}},
		{"a callback queue that does not exist", "does not exist", func(s *batch.Spec) {
			s.Callback.QueueURL += "-missing"
		}},
	} {
		s := e.spec("refused", 3)
		tc.spec(&s)
		err := e.coord.Create(ctx, s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
		var unknown *batch.UnknownBatchError
		if _, err := e.coord.Get(ctx, "refused"); !errors.As(err, &unknown) {
			t.Fatalf("%s: the batch was recorded (Get: %v)", tc.name, err)
		}
	}
	if n, _, _ := e.sqs.Depth(e.work); n != 0 {
		t.Errorf("%d chunks sent by refused Creates", n)
	}
	// The spec fixed, the ID is free.
	if err := e.coord.Create(ctx, e.spec("refused", 3)); err != nil {
		t.Fatal(err)
	}
}

// A chunk whose index is not below the batch's size (a message made by
// hand, or a chunk of an expired batch, of the same ID, that had more
// chunks) fails for good, naming the problem, and counts nothing: counted,
// it would complete the batch without one of its own chunks, or push done
// past total, where no completion is ever sent.
func TestChunkOutOfRange(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, guarded bool) {
		e := newFakeEnv(t, batch.Config{})
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("range", 2)); err != nil {
			t.Fatal(err)
		}
		var eff effects
		h := e.coord.Middleware(eff.handler(nil))
		if guarded {
			h = withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(eff.handler(nil))
		}
		msgs := receive(t, e.sqs, e.work, 2)
		stray := &sqsworker.Message{ID: "stray", Body: "chunk-2", ReceiveCount: 1, MessageAttributes: map[string]sqsworker.MessageAttribute{
			batch.Attribute:          {DataType: "String", StringValue: "range#2"},
			idempotency.KeyAttribute: {DataType: "String", StringValue: batch.ChunkKey("range", 2)},
		}}
		err := h.HandleMessage(ctx, stray)
		var perm *sqsworker.PermanentError
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), "2 chunks") {
			t.Errorf("chunk 2 of a batch of 2: %v, want a Permanent error naming the batch's size", err)
		}
		if p := progress(t, e.coord, "range"); p.Done != 0 {
			t.Fatalf("chunk 2 of a batch of 2 counted: %+v", p)
		}
		if err := h.HandleMessage(ctx, msgs[0]); err != nil {
			t.Fatal(err)
		}
		if p := progress(t, e.coord, "range"); p.Done != 1 || p.Completed || !p.Notified.IsZero() {
			t.Fatalf("after chunk 0: %+v", p)
		}
		if err := h.HandleMessage(ctx, msgs[1]); err != nil {
			t.Fatal(err)
		}
		if p := progress(t, e.coord, "range"); p.Done != 2 || p.Notified.IsZero() {
			t.Errorf("after chunk 1: %+v", p)
		}
	})
}

// A chunk failing Permanent but marked sqsworker.Unavailable (a dependency
// down, which the runtimes never dead-letter for) is not recorded as
// failed: it is retried, and shown pending.
func TestUnavailableIsNotRecordedFailed(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("down", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	h := e.coord.Middleware(new(effects).handler(func(m *sqsworker.Message) error {
		if m.Body == "chunk-0" {
			return sqsworker.Unavailable(sqsworker.Permanent(errors.New("database refused the connection")))
		}
		return sqsworker.Permanent(sqsworker.Unavailable(errors.New("database refused the connection")))
	}))
	for _, m := range msgs {
		if err := h.HandleMessage(ctx, m); err == nil {
			t.Fatal("the handler's failure was lost")
		}
	}
	if p := progress(t, e.coord, "down"); p.Failed != 0 || p.Pending != 2 {
		t.Errorf("progress %+v, want both chunks pending", p)
	}
}

// DynamoDB refuses connections: every step of a chunk's run (the status
// read of a redelivery, the count, the completion's read) fails as
// sqsworker.Unavailable, never as the chunk's own failure; once DynamoDB is
// back, the chunks are counted once and the completion is sent once.
func TestDynamoDBDown(t *testing.T) {
	t.Parallel()
	proxy := dynamoProxy(t)
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 2}, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
		o.RetryMaxAttempts = 1
	})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("down", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	var eff effects
	h := e.coord.Middleware(eff.handler(nil))
	if err := proxy.Refuse(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*sqsworker.Message{msgs[0], again(msgs[1])} { // a first delivery, a last attempt
		if err := h.HandleMessage(ctx, m); !sqsworker.IsUnavailable(err) {
			t.Errorf("%s with DynamoDB down: %v, want an Unavailable error", m.Body, err)
		}
	}
	if err := proxy.Pass(); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*sqsworker.Message{again(msgs[0]), again(again(msgs[1]))} {
		if err := h.HandleMessage(ctx, m); err != nil {
			t.Fatalf("%s with DynamoDB back: %v", m.Body, err)
		}
	}
	p := progress(t, e.coord, "down")
	if p.Done != 2 || p.Failed != 0 || p.Notified.IsZero() {
		t.Errorf("progress %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// A handler that ignores its context returns nil after the context ended
// (its lease lost, its timeout passed, the worker stopping): its effect is
// applied, so the chunk is counted all the same, rather than failed as
// Unavailable (DynamoDB is not down) and run again.
func TestCountAfterContextEnds(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, guarded bool) {
		e := newFakeEnv(t, batch.Config{})
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("late", 1)); err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		var eff effects
		work := eff.handler(func(*sqsworker.Message) error {
			cancel() // the context ends while the handler works on
			return nil
		})
		h := e.coord.Middleware(work)
		if guarded {
			h = withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(work)
		}
		m := receive(t, e.sqs, e.work, 1)[0]
		err := h.HandleMessage(rctx, m)
		if p := progress(t, e.coord, "late"); p.Done != 1 {
			t.Fatalf("a chunk whose handler succeeded after its context ended: %v; progress %+v, want it counted", err, p)
		}
		if err := h.HandleMessage(ctx, again(m)); err != nil {
			t.Fatal(err)
		}
		if n := eff.get("late#0"); n != 1 {
			t.Errorf("the chunk ran %d times, want 1", n)
		}
		if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
			t.Errorf("%d completion jobs, want 1", n)
		}
	})
}

// With the idempotency middleware, a chunk recorded failed by another copy
// while this one ran, on this one's last attempt: the commit applies
// nothing, and the run is put off (RetryAfter with a nil error), not
// failed. Its handler succeeded, and a failure on the last attempt would
// dead-letter a chunk whose retry counts it.
func TestFailedMeanwhileOnLastAttempt(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("race", 1)); err != nil {
		t.Fatal(err)
	}
	guard := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})
	first := true
	h := guard(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if first {
			first = false
			// Another copy fails for good meanwhile, and is recorded.
			_, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
				"id": &ddbtypes.AttributeValueMemberS{Value: "batch#race#chunk#0"}, "kind": &ddbtypes.AttributeValueMemberS{Value: "chunk"},
				"chunk_status": &ddbtypes.AttributeValueMemberS{Value: batch.StatusFailed},
			}})
			if err != nil {
				return err
			}
			_, err = e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: keyOf("batch#race"),
				UpdateExpression: aws.String("ADD failed :one, failed_chunks :idx"),
				ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":one": &ddbtypes.AttributeValueMemberN{Value: "1"},
					":idx": &ddbtypes.AttributeValueMemberNS{Value: []string{"0"}}}})
			return err
		}
		return nil
	}))
	m := again(again(receive(t, e.sqs, e.work, 1)[0])) // its last attempt
	err := h.HandleMessage(ctx, m)
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Err != nil {
		t.Fatalf("a chunk recorded failed meanwhile, on its last attempt: %v, want a postponement", err)
	}
	if p := progress(t, e.coord, "race"); p.Done != 0 || p.Failed != 1 {
		t.Fatalf("after the cancelled commit: %+v", p)
	}
	if err := h.HandleMessage(ctx, again(m)); err != nil {
		t.Fatal(err)
	}
	if p := progress(t, e.coord, "race"); p.Done != 1 || p.Failed != 0 || p.Notified.IsZero() {
		t.Errorf("after its retry: %+v", p)
	}
}

// The callback queue was deleted after the batch was created: the last
// chunk fails for good, naming the queue, so that it waits in the
// dead-letter queue for the operator (who re-creates the queue and replays
// it: the completion is then sent), rather than failing as Unavailable, an
// outage the circuit breaker would pause the worker for, and retried until
// SQS dead-letters it anyway.
func TestCallbackQueueGone(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("gone", 1)); err != nil {
		t.Fatal(err)
	}
	e.sqs.DeleteQueue(e.callbacks)
	h := e.coord.Middleware(new(effects).handler(nil))
	m := receive(t, e.sqs, e.work, 1)[0]
	err := h.HandleMessage(ctx, m)
	var perm *sqsworker.PermanentError
	if !errors.As(err, &perm) || sqsworker.IsUnavailable(err) || !strings.Contains(err.Error(), "callbacks") {
		t.Fatalf("the completion's queue gone: %v, want a Permanent error naming the queue", err)
	}
	callbacks := e.sqs.CreateQueue("callbacks", nil)
	if callbacks != e.callbacks {
		t.Fatalf("queue URL %s, was %s", callbacks, e.callbacks)
	}
	r := again(m)
	r.MessageAttributes = map[string]sqsworker.MessageAttribute{"sqsworker.replays": {DataType: "Number", StringValue: "1"}}
	for k, v := range m.MessageAttributes {
		r.MessageAttributes[k] = v
	}
	if err := h.HandleMessage(ctx, r); err != nil {
		t.Fatalf("replayed: %v", err)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// conflictingOnce cancels the first n transactions for conflicting with
// others, then passes them on.
type conflictingOnce struct {
	conflicting
	n atomic.Int64
}

func (c *conflictingOnce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if c.n.Add(-1) >= 0 {
		return c.conflicting.TransactWriteItems(ctx, in, opts...)
	}
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

// Recording a failed chunk conflicts with another transaction on the
// batch's item (many chunks counted at once): it is retried, and the chunk
// is recorded failed.
func TestRecordFailureConflict(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("busy", 1)); err != nil {
		t.Fatal(err)
	}
	db := &conflictingOnce{conflicting: conflicting{Client: e.db}}
	db.n.Store(2)
	coord, err := batch.New(ctx, db, e.sqs, batch.Config{Table: e.table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	h := coord.Middleware(new(effects).handler(func(*sqsworker.Message) error { return sqsworker.Permanent(errors.New("bad row")) }))
	if err := h.HandleMessage(ctx, receive(t, e.sqs, e.work, 1)[0]); err == nil {
		t.Fatal("the failure was lost")
	}
	if p := progress(t, e.coord, "busy"); p.Failed != 1 || len(p.FailedChunks) != 1 {
		t.Errorf("progress %+v, want the chunk recorded failed", p)
	}
}

// conflictingFor is conflicting for its first n transactions, then
// DynamoDB Local's.
type conflictingFor struct {
	conflicting
	n int64
}

func (c *conflictingFor) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if c.calls.Load() < c.n {
		return c.conflicting.TransactWriteItems(ctx, in, opts...)
	}
	c.calls.Add(1)
	return c.Client.TransactWriteItems(ctx, in, opts...)
}

// Contention on a batch's item that outlasts a few retries but not the
// count's budget (here 12 conflicting transactions, 4.6 s of backoff),
// on DynamoDB Local: the chunk whose handler succeeded is counted, its
// handler run once. Before, the count gave up after 8 transactions (2.3 s
// here): the chunk's run failed, and its handler ran again on its next
// receive.
func TestContentionOutlastingEightTriesIsCounted(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("hot", 1)); err != nil {
		t.Fatal(err)
	}
	db := &conflictingFor{conflicting: conflicting{Client: e.db}, n: 12}
	coord, err := batch.New(ctx, db, e.sqs, batch.Config{Table: e.table, MaxReceiveCount: 3, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var eff effects
	h := coord.Middleware(eff.handler(nil))
	m := receive(t, e.sqs, e.work, 1)[0]
	if err := h.HandleMessage(ctx, m); err != nil {
		t.Fatalf("a chunk counted after 12 conflicts: %v, want nil (%d transactions)", err, db.calls.Load())
	}
	if p := progress(t, e.coord, "hot"); p.Done != 1 {
		t.Errorf("progress %+v, want the chunk counted", p)
	}
}

// A chunk whose handler panics on its last attempt is recorded failed, on
// DynamoDB Local, as one that returns an error is; the panic comes back as
// a *sqsworker.PanicError, which the runtimes count as a panic. Before, it
// went past the middleware: the runtime dead-lettered the chunk, which the
// batch still counted pending.
func TestPanickingChunkRecordedFailed(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, guarded bool) {
		e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("panics", 1)); err != nil {
			t.Fatal(err)
		}
		boom := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { panic("boom") })
		h := e.coord.Middleware(boom)
		if guarded {
			h = withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(boom)
		}
		m := again(again(receive(t, e.sqs, e.work, 1)[0])) // its last attempt
		var pe *sqsworker.PanicError
		if err := h.HandleMessage(ctx, m); !errors.As(err, &pe) {
			t.Fatalf("a chunk whose handler panicked: %v, want a *sqsworker.PanicError", err)
		}
		if p := progress(t, e.coord, "panics"); p.Failed != 1 {
			t.Errorf("progress %+v, want the chunk recorded failed", p)
		}
	})
}

// storeOnly is a Store that cannot commit writes (no WriteCommitter).
type storeOnly struct{ idempotency.Store }

// WithIdempotency over a Guard whose Store cannot commit writes: the chunk
// waits (sqsworker.Unavailable, naming the fix) before its handler runs.
// Before, its handler ran on every receive, its count was refused after
// the effect, and the chunk was dead-lettered uncounted.
func TestGuardThatCannotCommitRefusedBeforeTheHandler(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("plain", 1)); err != nil {
		t.Fatal(err)
	}
	store, err := idempotency.NewDynamoStore(ctx, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := idempotency.New(storeOnly{store}, idempotency.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h := e.coord.WithIdempotency(guard.Middleware)(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	m := receive(t, e.sqs, e.work, 1)[0]
	err = h.HandleMessage(ctx, m)
	if !sqsworker.IsUnavailable(err) || !strings.Contains(err.Error(), "needs a Guard whose Store commits writes") {
		t.Errorf("a chunk under a Guard that cannot commit writes: %v, want it waiting, naming the fix", err)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("the handler ran %d times, want none", n)
	}
	if p := progress(t, e.coord, "plain"); p.Done != 0 || p.Failed != 0 {
		t.Errorf("progress %+v, want the chunk pending", p)
	}
}

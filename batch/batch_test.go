package batch_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Every chunk delivered three times (a duplicate send, then a
// redelivery), and the last one four times: each is counted once, its
// effect applied once (a counted chunk is acknowledged without running the
// handler), and one completion job is sent, with its
// idempotency key and the batch ID.
func TestDuplicatesCountOnce(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("dups", 5)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 5)
	if len(msgs) != 5 {
		t.Fatalf("%d chunks on the queue, want 5", len(msgs))
	}
	var eff effects
	h := e.coord.Middleware(eff.handler(nil))
	for _, m := range msgs {
		for _, d := range []*sqsworker.Message{m, m, again(m)} { // a duplicate send, then a redelivery
			if err := h.HandleMessage(ctx, d); err != nil {
				t.Fatalf("chunk %s: %v", m.Body, err)
			}
		}
	}
	if err := h.HandleMessage(ctx, again(again(msgs[4]))); err != nil {
		t.Fatal(err)
	}
	p := progress(t, e.coord, "dups")
	if p.Total != 5 || p.Done != 5 || p.Failed != 0 || p.Pending != 0 || !p.Completed || p.Notified.IsZero() || p.Sent.IsZero() {
		t.Errorf("progress %+v", p)
	}
	for i := range 5 {
		// The first delivery of each ran the handler; the second, as a
		// duplicate send is, and the redeliveries read the chunk
		// counted and did not. Before, a first delivery read nothing,
		// and a duplicate send ran the handler again.
		if n := eff.get("dups#" + string(rune('0'+i))); n != 1 {
			t.Errorf("chunk %d ran %d times, want 1 (its copies are acknowledged without running)", i, n)
		}
	}
	done := receive(t, e.sqs, e.callbacks, 10)
	if len(done) != 1 {
		t.Fatalf("%d completion jobs, want 1", len(done))
	}
	if k, _ := done[0].Attribute(idempotency.KeyAttribute); k != batch.DoneKey("dups") {
		t.Errorf("completion key %q", k)
	}
	if v, _ := done[0].Attribute(batch.AttrCompleted); v != "dups" || done[0].Body != `{"batch":"dups"}` {
		t.Errorf("completion %q %q", v, done[0].Body)
	}
	if p.NotificationMessageID != done[0].ID {
		t.Errorf("notified message %q, sent %q", p.NotificationMessageID, done[0].ID)
	}
}

// The reply to the counting transaction is lost: the SDK retries it with
// the same ClientRequestToken, and the chunk is counted once. The same
// with the idempotency record's transaction.
func TestLostReplyCountsOnce(t *testing.T) {
	t.Parallel()
	eachLostReplyWay(t, func(t *testing.T, guarded bool, proxy *faultproxy.Proxy, viaProxy func(*dynamodb.Options)) {
		e := newFakeEnv(t, batch.Config{}, viaProxy)
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("lost", 2)); err != nil {
			t.Fatal(err)
		}
		var eff effects
		lost := false
		loseNext := func(m *sqsworker.Message) error {
			// The next reply after the handler's is the count's (or
			// the commit's, with the guard): lose it, once.
			if !lost {
				lost = true
				if err := proxy.LoseReplies(1); err != nil {
					t.Error(err)
				}
			}
			return nil
		}
		h := e.coord.Middleware(eff.handler(loseNext))
		if guarded {
			h = withGuard(t, e.coord, localtest.NewDynamoDB(t, viaProxy), idempotency.StoreConfig{Table: e.table}, idempotency.Config{})(eff.handler(loseNext))
		}
		msgs := receive(t, e.sqs, e.work, 2)
		before := proxy.Stats()
		if err := h.HandleMessage(ctx, msgs[0]); err != nil {
			t.Fatalf("chunk 0: %v", err)
		}
		after := proxy.Stats()
		if lostN := after.LostReplies - before.LostReplies; lostN != 1 {
			t.Fatalf("%d replies lost, want 1", lostN)
		}
		if p := progress(t, e.coord, "lost"); p.Done != 1 {
			t.Fatalf("done %d after one chunk whose reply was lost, want 1", p.Done)
		}
		if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
			t.Fatal(err)
		}
		if err := h.HandleMessage(ctx, msgs[1]); err != nil {
			t.Fatal(err)
		}
		p := progress(t, e.coord, "lost")
		if p.Done != 2 || !p.Completed || p.Notified.IsZero() {
			t.Errorf("progress %+v", p)
		}
		if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
			t.Errorf("%d completion jobs, want 1", n)
		}
	})
}

// A chunk failing for good is recorded as failed, with its error; replayed
// from the dead-letter queue, it succeeds, moves to done, and the batch
// completes.
func TestFailedChunkThenReplayed(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("fails", 3)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 3)
	broken := map[string]bool{"chunk-1": true, "chunk-2": true}
	var eff effects
	h := e.coord.Middleware(eff.handler(func(m *sqsworker.Message) error {
		switch {
		case !broken[m.Body]:
			return nil
		case m.Body == "chunk-1":
			return sqsworker.Permanent(errors.New("invalid row 17"))
		}
		return errors.New("upstream 503")
	}))
	for _, m := range msgs {
		err := h.HandleMessage(ctx, m)
		if (err != nil) != broken[m.Body] {
			t.Fatalf("%s: %v", m.Body, err)
		}
	}
	p := progress(t, e.coord, "fails")
	if p.Done != 1 || p.Failed != 1 || p.Pending != 1 || p.Completed {
		t.Fatalf("after a Permanent failure and a retryable one: %+v", p)
	}
	if len(p.FailedChunks) != 1 || p.FailedChunks[0].Index != 1 || !strings.Contains(p.FailedChunks[0].Error, "invalid row 17") {
		t.Fatalf("failed chunks %+v", p.FailedChunks)
	}
	// chunk-2's last attempt (MaxReceiveCount) fails too.
	last := again(again(msgs[2]))
	if err := h.HandleMessage(ctx, last); err == nil {
		t.Fatal("the last attempt succeeded")
	}
	if err := h.HandleMessage(ctx, last); err == nil { // its failure is recorded once
		t.Fatal("the last attempt succeeded")
	}
	p = progress(t, e.coord, "fails")
	if p.Done != 1 || p.Failed != 2 || p.Pending != 0 || len(p.FailedChunks) != 2 || p.FailedChunks[1].Attempts != 3 {
		t.Fatalf("after the last attempt: %+v", p)
	}
	// Fixed, and replayed from the dead-letter queue.
	clear(broken)
	for _, m := range []*sqsworker.Message{msgs[1], last} {
		r := again(m)
		r.MessageAttributes = map[string]sqsworker.MessageAttribute{}
		for k, v := range m.MessageAttributes {
			r.MessageAttributes[k] = v
		}
		r.MessageAttributes["sqsworker.replays"] = sqsworker.MessageAttribute{DataType: "Number", StringValue: "1"}
		r.ReceiveCount = 1
		if err := h.HandleMessage(ctx, r); err != nil {
			t.Fatal(err)
		}
		if err := h.HandleMessage(ctx, r); err != nil { // and replayed twice
			t.Fatal(err)
		}
	}
	p = progress(t, e.coord, "fails")
	if p.Done != 3 || p.Failed != 0 || len(p.FailedChunks) != 0 || !p.Completed || p.Notified.IsZero() {
		t.Errorf("after the replays: %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// The completion job cannot be sent (SQS fails): the last chunk's message
// fails as Unavailable (the breaker's business, never the DLQ's), and its
// redelivery, found counted, sends the completion once.
func TestCompletionSentOnRedelivery(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("resend", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	var eff effects
	h := e.coord.Middleware(eff.handler(nil))
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	e.sqs.FailNext("SendMessage", errors.New("injected: SQS unreachable"), 1)
	err := h.HandleMessage(ctx, msgs[1])
	if err == nil || !sqsworker.IsUnavailable(err) {
		t.Fatalf("last chunk with SQS failing: %v, want an Unavailable error", err)
	}
	if p := progress(t, e.coord, "resend"); p.Done != 2 || !p.Notified.IsZero() {
		t.Fatalf("progress %+v", p)
	}
	if err := h.HandleMessage(ctx, again(msgs[1])); err != nil {
		t.Fatal(err)
	}
	if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
		t.Fatal(err)
	}
	if n := eff.get("resend#1"); n != 1 {
		t.Errorf("last chunk ran %d times", n)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// A consumer that took the lease on sending the completion died before
// sending it: the other chunks are acknowledged, the holder's own chunk
// comes back once the lease has ended and sends it.
func TestCompletionLeaseOfDeadHolder(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{NotifyLease: time.Second})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("lease", 2)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 2)
	h := e.coord.Middleware(new(effects).handler(nil))
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatal(err)
	}
	// chunk 1 counts, takes the lease, and dies before sending: its
	// send fails, and its lease is set again as a dead holder leaves it.
	e.sqs.FailNext("SendMessage", errors.New("injected"), 1)
	if err := h.HandleMessage(ctx, msgs[1]); err == nil {
		t.Fatal("the send did not fail")
	}
	_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.table, Key: keyOf("batch#lease"),
		UpdateExpression:          aws.String("SET notify_token = :t, notify_until = :u, notify_chunk = :c"),
		ExpressionAttributeValues: vals(":t", "S:dead", ":u", "N:"+strconv.FormatInt(time.Now().Add(time.Second).UnixMilli(), 10), ":c", "N:1"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
		t.Errorf("another chunk while the lease holds: %v, want it acknowledged", err)
	}
	err = h.HandleMessage(ctx, again(msgs[1]))
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Delay <= 0 {
		t.Fatalf("the holder's chunk while its lease holds: %v, want RetryAfter", err)
	}
	time.Sleep(ra.Delay)
	if err := h.HandleMessage(ctx, again(again(msgs[1]))); err != nil {
		t.Fatal(err)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// Creating a batch again: the same spec sends nothing more once sent, or
// the chunks again after a crash before they were marked sent; another
// spec is refused.
func TestCreateAgain(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	s := e.spec("again", 3)
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := e.sqs.Depth(e.work); v != 3 {
		t.Errorf("%d chunks queued after two Creates, want 3", v)
	}
	other := e.spec("again", 4)
	var mismatch *batch.SpecMismatchError
	if err := e.coord.Create(ctx, other); !errors.As(err, &mismatch) {
		t.Errorf("Create with other chunks: %v, want a SpecMismatchError", err)
	}
	other = e.spec("again", 3)
	other.Callback.Body = "other"
	if err := e.coord.Create(ctx, other); !errors.As(err, &mismatch) {
		t.Errorf("Create with another callback: %v, want a SpecMismatchError", err)
	}
	// A crash after the record, before the chunks were marked sent.
	_, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &e.table, Key: keyOf("batch#again"), UpdateExpression: aws.String("REMOVE sent"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 10)
	if len(msgs) != 6 {
		t.Fatalf("%d chunks queued, want 6 (sent twice)", len(msgs))
	}
	h := e.coord.Middleware(new(effects).handler(nil))
	for _, m := range msgs {
		if err := h.HandleMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if p := progress(t, e.coord, "again"); p.Done != 3 || p.Sent.IsZero() || p.Notified.IsZero() {
		t.Errorf("progress %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// Bad input names the problem and the fix.
func TestErrorsNameTheFix(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	_, err := batch.New(ctx, e.db, e.sqs, batch.Config{Table: "no-such-table-" + e.table})
	if err == nil || !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), "idempotency table") {
		t.Errorf("New with a missing table: %v", err)
	}
	var unknown *batch.UnknownBatchError
	if _, err := e.coord.Get(ctx, "never-made"); !errors.As(err, &unknown) || !strings.Contains(err.Error(), "table") {
		t.Errorf("Get of an unknown batch: %v", err)
	}
	if _, err := e.coord.Get(ctx, "a#b"); err == nil || !strings.Contains(err.Error(), "not #") {
		t.Errorf("Get of an invalid ID: %v", err)
	}
	s := e.spec("bad", 2)
	s.Chunks[1].IdempotencyKey = "mine"
	s.Callback.QueueURL = ""
	err = e.coord.Create(ctx, s)
	if err == nil || !strings.Contains(err.Error(), "chunk 1") || !strings.Contains(err.Error(), "Callback.QueueURL is required") {
		t.Errorf("Create of a bad spec: %v", err)
	}
	s = e.spec("attrs", 1)
	s.Chunks[0].Attributes = map[string]sqsworker.MessageAttribute{}
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		s.Chunks[0].Attributes[k] = sqsworker.MessageAttribute{DataType: "String", StringValue: k}
	}
	if err := e.coord.Create(ctx, s); err == nil || !strings.Contains(err.Error(), "at most 8") {
		t.Errorf("Create of a chunk with 9 attributes: %v", err)
	}
	// A chunk of a batch the table does not hold (a consumer given
	// another table, say) fails for good, naming the table, before its
	// handler runs: replayed once the consumer is fixed, it applies its
	// effect once. Before, the handler ran first, and the replay ran it
	// again. So does a chunk past the batch's last.
	if err := e.coord.Create(ctx, e.spec("two", 2)); err != nil {
		t.Fatal(err)
	}
	var perm *sqsworker.PermanentError
	for _, attr := range []string{"elsewhere#0", "two#2"} {
		m := &sqsworker.Message{ID: "m", Body: "x", ReceiveCount: 1, MessageAttributes: map[string]sqsworker.MessageAttribute{
			batch.Attribute: {DataType: "String", StringValue: attr},
		}}
		var eff effects
		err = e.coord.Middleware(eff.handler(nil)).HandleMessage(ctx, m)
		if !errors.As(err, &perm) || (attr == "elsewhere#0" && !errors.As(err, &unknown)) || eff.get(attr) != 0 {
			t.Errorf("chunk %s: %v, handler ran %d times; want a Permanent error before the handler runs", attr, err, eff.get(attr))
		}
	}
	// Messages that are not chunks pass through.
	plain := &sqsworker.Message{ID: "p", Body: "x"}
	if err := e.coord.Middleware(new(effects).handler(nil)).HandleMessage(ctx, plain); err != nil {
		t.Errorf("a message that is not a chunk: %v", err)
	}
}

// keyOf is the key of an item of the table.
func keyOf(id string) map[string]ddbtypes.AttributeValue {
	return map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: id}}
}

// vals makes expression values from name, "S:value" or "N:value" pairs.
func vals(kv ...string) map[string]ddbtypes.AttributeValue {
	out := map[string]ddbtypes.AttributeValue{}
	for i := 0; i+1 < len(kv); i += 2 {
		typ, v, _ := strings.Cut(kv[i+1], ":")
		if typ == "N" {
			out[kv[i]] = &ddbtypes.AttributeValueMemberN{Value: v}
		} else {
			out[kv[i]] = &ddbtypes.AttributeValueMemberS{Value: v}
		}
	}
	return out
}

// With the idempotency middleware the count commits in the idempotency
// record's transaction, with the handler's writes: a transaction cancelled
// by the handler's own condition counts nothing; its retry counts the chunk
// and applies the effect together. A chunk found counted by the commit
// (its idempotency record gone, say) applies nothing and is acknowledged.
func TestWithIdempotencyCommitsTogether(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("atomic", 2)); err != nil {
		t.Fatal(err)
	}
	guard := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})
	ready := false // the handler's business condition
	h := guard(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_, i, _ := batch.ParseChunk(m)
		writes := []ddbtypes.TransactWriteItem{{Update: &ddbtypes.Update{
			TableName: &e.table, Key: keyOf("effect#" + strconv.Itoa(i)),
			UpdateExpression: aws.String("ADD n :one"), ExpressionAttributeValues: vals(":one", "N:1"),
		}}}
		if !ready {
			writes = append(writes, ddbtypes.TransactWriteItem{ConditionCheck: &ddbtypes.ConditionCheck{
				TableName: &e.table, Key: keyOf("no-such-item"), ConditionExpression: aws.String("attribute_exists(id)"),
			}})
		}
		return idempotency.AddWrites(ctx, writes...)
	}))
	msgs := receive(t, e.sqs, e.work, 2)
	err := h.HandleMessage(ctx, msgs[0])
	var tce *idempotency.TransactionCanceledError
	if !errors.As(err, &tce) {
		t.Fatalf("the handler's condition failing: %v, want its TransactionCanceledError", err)
	}
	if p := progress(t, e.coord, "atomic"); p.Done != 0 {
		t.Fatalf("counted %d with the handler's transaction cancelled", p.Done)
	}
	if it := item(t, e.db, e.table, "effect#0"); it != nil {
		t.Fatalf("effect applied with the transaction cancelled: %v", it)
	}
	ready = true
	if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
		t.Fatal(err)
	}
	if p := progress(t, e.coord, "atomic"); p.Done != 1 || item(t, e.db, e.table, "effect#0")["n"] != "1" {
		t.Fatalf("after the retry: done %d, effect %v", p.Done, item(t, e.db, e.table, "effect#0"))
	}
	if it := item(t, e.db, e.table, "jobs#"+batch.ChunkKey("atomic", 0)); it["status"] != idempotency.StatusCompleted {
		t.Errorf("idempotency record %v", it)
	}
	// The idempotency record is lost (expired, say) and the chunk arrives
	// as a first delivery: the handler runs, but the commit finds the
	// chunk counted and applies none of its writes.
	if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table, Key: keyOf("jobs#" + batch.ChunkKey("atomic", 0))}); err != nil {
		t.Fatal(err)
	}
	if err := h.HandleMessage(ctx, msgs[0]); err != nil {
		t.Fatalf("a counted chunk without its idempotency record: %v", err)
	}
	if p := progress(t, e.coord, "atomic"); p.Done != 1 || item(t, e.db, e.table, "effect#0")["n"] != "1" {
		t.Fatalf("after a counted chunk ran again: done %d, effect %v", p.Done, item(t, e.db, e.table, "effect#0"))
	}
	if err := h.HandleMessage(ctx, msgs[1]); err != nil {
		t.Fatal(err)
	}
	if p := progress(t, e.coord, "atomic"); p.Done != 2 || p.Notified.IsZero() {
		t.Errorf("progress %+v", p)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// The requests a batch costs, as the package documentation states them:
// Create one TransactWriteItems and one UpdateItem, ten chunks per
// SendMessageBatch; each chunk one TransactWriteItems and three GetItem
// (the chunk and the batch before the handler, the batch after), a
// counted chunk delivered again two (its chunk, then the batch); the
// completion one GetItem, two UpdateItem and one SendMessage.
func TestRequestCost(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	e := newFakeEnv(t, batch.Config{}, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, counter.AddTo) })
	ctx := context.Background()
	counter.Reset()
	const n = 25
	if err := e.coord.Create(ctx, e.spec("cost", n)); err != nil {
		t.Fatal(err)
	}
	if got, want := counter.ByOperation(), map[string]int{"BatchGetItem": 1, "TransactWriteItems": 1, "UpdateItem": 1}; !equalCounts(got, want) {
		t.Errorf("Create: %v, want %v", got, want)
	}
	if c := e.sqs.Calls("SendMessageBatch"); c != 3 {
		t.Errorf("Create: %d SendMessageBatch, want 3", c)
	}
	counter.Reset()
	h := e.coord.Middleware(new(effects).handler(nil))
	msgs := receive(t, e.sqs, e.work, n)
	for _, m := range msgs {
		if err := h.HandleMessage(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := counter.ByOperation(), map[string]int{"TransactWriteItems": n, "GetItem": 3*n + 1, "UpdateItem": 2}; !equalCounts(got, want) {
		t.Errorf("%d chunks and the completion: %v, want %v", n, got, want)
	}
	if c := e.sqs.Calls("SendMessage"); c != 1 {
		t.Errorf("%d SendMessage, want 1", c)
	}
	counter.Reset()
	if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
		t.Fatal(err)
	}
	if got, want := counter.ByOperation(), map[string]int{"GetItem": 2}; !equalCounts(got, want) {
		t.Errorf("a redelivery: %v, want %v", got, want)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// With the idempotency middleware, a chunk recorded failed by an earlier
// delivery, delivered again as a copy (a first delivery), reads its chunk
// and moves it from failed to done. Before, a first delivery read nothing,
// took the chunk for new, and its commit was cancelled and put off to its
// retry.
func TestWithIdempotencyFailedMeanwhile(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("meanwhile", 1)); err != nil {
		t.Fatal(err)
	}
	guard := withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})
	broken := true
	var eff effects
	h := guard(eff.handler(func(m *sqsworker.Message) error {
		if broken {
			return sqsworker.Permanent(errors.New("bad input"))
		}
		return nil
	}))
	m := receive(t, e.sqs, e.work, 1)[0]
	if err := h.HandleMessage(ctx, m); err == nil {
		t.Fatal("want the Permanent failure")
	}
	if p := progress(t, e.coord, "meanwhile"); p.Failed != 1 {
		t.Fatalf("progress %+v", p)
	}
	broken = false
	if err := h.HandleMessage(ctx, m); err != nil { // a second copy, as a first delivery
		t.Fatalf("a first delivery of a chunk recorded failed: %v", err)
	}
	if err := h.HandleMessage(ctx, again(m)); err != nil {
		t.Fatal(err)
	}
	p := progress(t, e.coord, "meanwhile")
	if p.Done != 1 || p.Failed != 0 || p.Notified.IsZero() || eff.get("meanwhile#0") != 1 {
		t.Errorf("after the copy and a redelivery: %+v, handler ran %d times", p, eff.get("meanwhile#0"))
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
}

// A counted chunk delivered again after its batch's item expired (a
// chunk replayed late from the dead-letter queue, a short TTL) is
// acknowledged without running: its chunk item, which outlives the
// batch's, says it was counted. It is not taken for a chunk of a batch the
// table never held.
func TestCountedChunkOutlivesItsBatch(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("outlived", 1)); err != nil {
		t.Fatal(err)
	}
	var eff effects
	h := e.coord.Middleware(eff.handler(nil))
	m := receive(t, e.sqs, e.work, 1)[0]
	if err := h.HandleMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"batch#outlived", "batch#outlived#callback"} { // as DynamoDB's TTL does
		if _, err := e.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &e.table,
			Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: k}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.HandleMessage(ctx, again(m)); err != nil || eff.get("outlived#0") != 1 {
		t.Errorf("the counted chunk delivered again: %v, handler ran %d times; want acknowledged, run once", err, eff.get("outlived#0"))
	}
}

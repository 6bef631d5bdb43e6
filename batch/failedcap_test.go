package batch_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// replay returns a copy of m as a replay from the dead-letter queue
// delivers it.
func replay(m *sqsworker.Message) *sqsworker.Message {
	r := *m
	r.ReceiveCount = 1
	r.MessageAttributes = map[string]sqsworker.MessageAttribute{"sqsworker.replays": {DataType: "Number", StringValue: "1"}}
	for k, v := range m.MessageAttributes {
		r.MessageAttributes[k] = v
	}
	return &r
}

// failedSet reads the indexes in the failed_chunks set of batch id's item,
// and checks that the item has no attribute the size test's worst case
// lacks, and is no larger than the documented bound.
func failedSet(t *testing.T, e *fakeEnv, id string) []int {
	t.Helper()
	out, err := e.db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &e.table, Key: keyOf("batch#" + id), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	worst := batch.WorstBatchItem("id", "expiry", 1)
	for name := range out.Item {
		if _, ok := worst[name]; !ok {
			t.Errorf("the batch's item has the attribute %q, which TestBatchItemSizeBounded does not count", name)
		}
	}
	if n := batch.ItemSize(out.Item); n > batch.MaxBatchItemSize {
		t.Errorf("the batch's item is %d bytes, over %d", n, batch.MaxBatchItemSize)
	}
	var idx []int
	if ns, ok := out.Item["failed_chunks"].(*ddbtypes.AttributeValueMemberNS); ok {
		for _, s := range ns.Value {
			i, err := strconv.Atoi(s)
			if err != nil {
				t.Fatal(err)
			}
			idx = append(idx, i)
		}
	}
	slices.Sort(idx)
	return idx
}

// checkProgress checks the counters of batch id, that FailedChunks lists
// the indexes of the batch's failed_chunks (at most limit), and that
// FailedUnlisted counts the rest.
func checkProgress(t *testing.T, e *fakeEnv, id string, done, failed, limit int) *batch.Progress {
	t.Helper()
	p := progress(t, e.coord, id)
	set := failedSet(t, e, id)
	var listed []int
	for _, c := range p.FailedChunks {
		listed = append(listed, c.Index)
		if c.Error == "" || c.ErrorClass == "" || c.FailedAt.IsZero() {
			t.Errorf("failed chunk %d without its record: %+v", c.Index, c)
		}
	}
	switch {
	case p.Done != done || p.Failed != failed || p.Pending != p.Total-done-failed:
		t.Fatalf("done %d, failed %d, pending %d; want %d, %d, %d", p.Done, p.Failed, p.Pending, done, failed, p.Total-done-failed)
	case len(set) > limit:
		t.Fatalf("failed_chunks holds %d indexes, over the cap %d: %v", len(set), limit, set)
	case !slices.Equal(listed, set):
		t.Fatalf("FailedChunks lists %v, the set holds %v", listed, set)
	case p.FailedUnlisted != failed-len(set):
		t.Fatalf("FailedUnlisted %d, want %d (failed %d, listed %d)", p.FailedUnlisted, failed-len(set), failed, len(set))
	}
	return p
}

// chunkRecord reads chunk i of batch id's item: its status and error.
func chunkRecord(t *testing.T, e *fakeEnv, id string, i int) (status, errText string) {
	t.Helper()
	it := item(t, e.db, e.table, "batch#"+id+"#chunk#"+strconv.Itoa(i))
	return it["chunk_status"], it["error"]
}

// More chunks fail for good than the batch's item lists (a cap of 3 here,
// MaxFailedIndexes otherwise): every failure is counted, each at once,
// concurrently, and twice; the set stays at the cap; Get lists what it holds
// and counts the rest as unlisted; each failed chunk's item holds its error.
// Then the failed chunks are replayed and succeed: an unlisted one while the
// set is full, the listed ones (the set is then gone), an unlisted one with
// no set; a new failure takes a freed place in the list; the rest recover at
// once, each twice. The counters are exact at every step, and the
// completion job is sent once.
func TestFailedBeyondCap(t *testing.T) {
	t.Parallel()
	eachWay(t, func(t *testing.T, guarded bool) {
		const n, limit = 12, 3
		e := newFakeEnv(t, batch.Config{MaxReceiveCount: 3})
		batch.SetFailedCap(e.coord, limit)
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("cap", n)); err != nil {
			t.Fatal(err)
		}
		var broken sync.Map // body -> error
		var eff effects
		fail := func(m *sqsworker.Message) error {
			if err, ok := broken.Load(m.Body); ok {
				return err.(error)
			}
			return nil
		}
		h := e.coord.Middleware(eff.handler(fail))
		if guarded {
			h = withGuard(t, e.coord, e.db, idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(eff.handler(fail))
		}
		msgs := receive(t, e.sqs, e.work, n)
		byIndex := make([]*sqsworker.Message, n)
		for _, m := range msgs {
			_, i, _ := batch.ParseChunk(m)
			byIndex[i] = m
		}
		// Chunks 0 to 7 fail for good at once: half Permanent, half
		// on their last attempt; each twice (a duplicate).
		var wg sync.WaitGroup
		for i := range 8 {
			m := byIndex[i]
			if i%2 == 0 {
				broken.Store(m.Body, sqsworker.Permanent(errors.New("invalid row "+strconv.Itoa(i))))
			} else {
				broken.Store(m.Body, errors.New("upstream 503"))
				m = again(again(m))
			}
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if err := h.HandleMessage(ctx, m); err == nil {
						t.Errorf("chunk %d succeeded", i)
					}
				}()
			}
		}
		wg.Wait()
		p := checkProgress(t, e, "cap", 0, 8, limit)
		if len(p.FailedChunks) != limit || p.FailedUnlisted != 5 {
			t.Fatalf("8 failures, cap %d: %d listed, %d unlisted", limit, len(p.FailedChunks), p.FailedUnlisted)
		}
		for i := range 8 {
			if status, text := chunkRecord(t, e, "cap", i); status != batch.StatusFailed || text == "" {
				t.Fatalf("chunk %d's item: %q %q, want it failed with its error", i, status, text)
			}
		}
		listed := failedSet(t, e, "cap")
		var unlisted []int
		for i := range 8 {
			if !slices.Contains(listed, i) {
				unlisted = append(unlisted, i)
			}
		}
		// Fixed: every chunk succeeds from now on, but chunk 8.
		broken.Clear()
		run := func(i int, replayed bool) {
			t.Helper()
			m := byIndex[i]
			if replayed {
				m = replay(m)
			}
			if err := h.HandleMessage(ctx, m); err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
		}
		run(unlisted[0], true) // an unlisted chunk, the set full
		checkProgress(t, e, "cap", 1, 7, limit)
		if got := failedSet(t, e, "cap"); !slices.Equal(got, listed) {
			t.Fatalf("an unlisted chunk's recovery changed the set: %v, was %v", got, listed)
		}
		for _, i := range listed { // the listed ones: the set goes
			run(i, true)
		}
		if p := checkProgress(t, e, "cap", 4, 4, limit); len(p.FailedChunks) != 0 || p.FailedUnlisted != 4 {
			t.Fatalf("every listed chunk recovered: %+v", p)
		}
		run(unlisted[1], true) // an unlisted one, no set at all
		checkProgress(t, e, "cap", 5, 3, limit)
		// A new failure takes a freed place.
		broken.Store(byIndex[8].Body, sqsworker.Permanent(errors.New("invalid row 8")))
		if err := h.HandleMessage(ctx, byIndex[8]); err == nil {
			t.Fatal("chunk 8 succeeded")
		}
		if p := checkProgress(t, e, "cap", 5, 4, limit); len(p.FailedChunks) != 1 || p.FailedChunks[0].Index != 8 || p.FailedUnlisted != 3 {
			t.Fatalf("a new failure with room in the list: %+v", p)
		}
		broken.Clear()
		// The rest at once, each twice, with the chunks never run.
		// A copy that finds the other running (under the idempotency
		// middleware) or holding the lease on sending the completion
		// is put off (RetryAfter, no failure): it comes back once
		// they are done, as SQS would deliver it again.
		var rest []int
		rest = append(rest, unlisted[2:]...)
		rest = append(rest, 8, 9, 10, 11)
		var mu sync.Mutex
		var later []int
		for _, i := range rest {
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					err := h.HandleMessage(ctx, replay(byIndex[i]))
					var ra *sqsworker.RetryAfterError
					switch {
					case errors.As(err, &ra) && ra.Err == nil:
						mu.Lock()
						later = append(later, i)
						mu.Unlock()
					case err != nil:
						t.Errorf("chunk %d: %v", i, err)
					}
				}()
			}
		}
		wg.Wait()
		for _, i := range later {
			run(i, true)
		}
		p = checkProgress(t, e, "cap", n, 0, limit)
		if !p.Completed || p.Notified.IsZero() || p.FailedUnlisted != 0 || len(p.FailedChunks) != 0 {
			t.Fatalf("every chunk done: %+v", p)
		}
		if got := len(receive(t, e.sqs, e.callbacks, 10)); got != 1 {
			t.Errorf("%d completion jobs, want 1", got)
		}
		if guarded {
			// Under the idempotency middleware, each chunk's effect
			// applied once.
			for i := range n {
				if got := eff.get("cap#" + strconv.Itoa(i)); got != 1 {
					t.Errorf("chunk %d's effect applied %d times", i, got)
				}
			}
		}
	})
}

// The reply to a write on a batch whose list of failed chunks is full is
// lost, and the write retried, by the SDK (the same ClientRequestToken) or
// by the middleware's own retry: the failure of a chunk not listed, and
// then its recovery, each count once.
func TestUnlistedLostReply(t *testing.T) {
	t.Parallel()
	eachLostReplyWay(t, func(t *testing.T, guarded bool, proxy *faultproxy.Proxy, viaProxy func(*dynamodb.Options)) {
		// Armed, the next transaction whose update of the batch's
		// item is the one named loses its reply.
		var armed atomic.Value
		armed.Store("")
		isArmed := func(in any) bool {
			tx, ok := in.(*dynamodb.TransactWriteItemsInput)
			want := armed.Load().(string)
			if !ok || want == "" {
				return false
			}
			for _, w := range tx.TransactItems {
				if w.Update != nil && aws.ToString(w.Update.UpdateExpression) == want {
					return true
				}
			}
			return false
		}
		lose := beforeOp("TransactWriteItems", isArmed, func() {
			armed.Store("")
			if err := proxy.LoseReplies(1); err != nil {
				t.Error(err)
			}
		})
		e := newFakeEnv(t, batch.Config{}, viaProxy, lose)
		batch.SetFailedCap(e.coord, 1)
		ctx := context.Background()
		if err := e.coord.Create(ctx, e.spec("lostcap", 3)); err != nil {
			t.Fatal(err)
		}
		broken := map[string]bool{"chunk-0": true, "chunk-1": true}
		var eff effects
		fail := func(m *sqsworker.Message) error {
			if broken[m.Body] {
				return sqsworker.Permanent(errors.New("bad " + m.Body))
			}
			return nil
		}
		h := e.coord.Middleware(eff.handler(fail))
		if guarded {
			h = withGuard(t, e.coord, localtest.NewDynamoDB(t, viaProxy, lose), idempotency.StoreConfig{Table: e.table, KeyPrefix: "jobs"}, idempotency.Config{})(eff.handler(fail))
		}
		msgs := receive(t, e.sqs, e.work, 3)
		slices.SortFunc(msgs, func(a, b *sqsworker.Message) int { return strings.Compare(a.Body, b.Body) })
		if err := h.HandleMessage(ctx, msgs[0]); err == nil { // listed
			t.Fatal("chunk 0 succeeded")
		}
		// Chunk 1 fails beyond the cap: the reply to the write
		// that counts it, unlisted, is lost.
		armed.Store("ADD #failed :one")
		before := proxy.Stats().LostReplies
		if err := h.HandleMessage(ctx, msgs[1]); err == nil {
			t.Fatal("chunk 1 succeeded")
		}
		if got := proxy.Stats().LostReplies - before; got != 1 {
			t.Fatalf("%d replies lost, want 1", got)
		}
		if p := checkProgress(t, e, "lostcap", 0, 2, 1); p.FailedUnlisted != 1 || p.FailedChunks[0].Index != 0 {
			t.Fatalf("after chunk 1's failure: %+v", p)
		}
		// Chunk 1, fixed, is replayed: the reply to its count is
		// lost.
		clear(broken)
		armed.Store("ADD #done :one, #failed :minus DELETE #set :idx")
		before = proxy.Stats().LostReplies
		if err := h.HandleMessage(ctx, replay(msgs[1])); err != nil {
			t.Fatalf("chunk 1 replayed: %v", err)
		}
		if got := proxy.Stats().LostReplies - before; got != 1 {
			t.Fatalf("%d replies lost, want 1", got)
		}
		if p := checkProgress(t, e, "lostcap", 1, 1, 1); p.FailedUnlisted != 0 || len(p.FailedChunks) != 1 {
			t.Fatalf("after chunk 1's recovery: %+v", p)
		}
		if err := h.HandleMessage(ctx, replay(msgs[1])); err != nil { // and again
			t.Fatal(err)
		}
		for _, m := range []*sqsworker.Message{replay(msgs[0]), msgs[2]} {
			if err := h.HandleMessage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		p := checkProgress(t, e, "lostcap", 3, 0, 1)
		if !p.Completed || p.Notified.IsZero() {
			t.Fatalf("every chunk done: %+v", p)
		}
		if got := len(receive(t, e.sqs, e.callbacks, 10)); got != 1 {
			t.Errorf("%d completion jobs, want 1", got)
		}
		if got := eff.get("lostcap#1"); got != 1 {
			t.Errorf("chunk 1's effect applied %d times", got)
		}
	})
}

// A batch recorded before the list of failed chunks was bounded may list
// more than the cap: Get reads no more than the cap of them, and counts the
// rest as unlisted; a new failure is counted, not listed; a listed chunk
// that recovers leaves the list.
func TestFailedSetOverCapBefore(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	batch.SetFailedCap(e.coord, 3)
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("legacy", 8)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 8)
	slices.SortFunc(msgs, func(a, b *sqsworker.Message) int { return strings.Compare(a.Body, b.Body) })
	// Chunks 0 to 4 failed, all listed, as before the bound.
	for i := range 5 {
		if _, err := e.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &e.table, Item: map[string]ddbtypes.AttributeValue{
			"id": &ddbtypes.AttributeValueMemberS{Value: "batch#legacy#chunk#" + strconv.Itoa(i)}, "kind": &ddbtypes.AttributeValueMemberS{Value: "chunk"},
			"chunk_status": &ddbtypes.AttributeValueMemberS{Value: batch.StatusFailed}, "error": &ddbtypes.AttributeValueMemberS{Value: "bad"},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &e.table, Key: keyOf("batch#legacy"),
		UpdateExpression: aws.String("ADD failed :five, failed_chunks :idx"),
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":five": &ddbtypes.AttributeValueMemberN{Value: "5"},
			":idx": &ddbtypes.AttributeValueMemberNS{Value: []string{"0", "1", "2", "3", "4"}}}}); err != nil {
		t.Fatal(err)
	}
	listed := func(p *batch.Progress) []int {
		var idx []int
		for _, c := range p.FailedChunks {
			idx = append(idx, c.Index)
		}
		return idx
	}
	if p := progress(t, e.coord, "legacy"); p.Failed != 5 || p.FailedUnlisted != 2 || !slices.Equal(listed(p), []int{0, 1, 2}) {
		t.Fatalf("5 listed, the cap 3: %+v", p)
	}
	h := e.coord.Middleware(new(effects).handler(func(m *sqsworker.Message) error {
		if m.Body == "chunk-5" {
			return sqsworker.Permanent(errors.New("bad"))
		}
		return nil
	}))
	if err := h.HandleMessage(ctx, msgs[5]); err == nil {
		t.Fatal("chunk 5 succeeded")
	}
	if got := failedSet(t, e, "legacy"); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
		t.Fatalf("a failure past the cap changed the list: %v", got)
	}
	if p := progress(t, e.coord, "legacy"); p.Failed != 6 || p.FailedUnlisted != 3 {
		t.Fatalf("after a failure past the cap: %+v", p)
	}
	if err := h.HandleMessage(ctx, replay(msgs[0])); err != nil {
		t.Fatal(err)
	}
	if p := progress(t, e.coord, "legacy"); p.Done != 1 || p.Failed != 5 || p.FailedUnlisted != 2 || !slices.Equal(listed(p), []int{1, 2, 3}) {
		t.Fatalf("after chunk 0's recovery: %+v", p)
	}
}

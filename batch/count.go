package batch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/stopby"
	"github.com/sqsworker/sqsworker/producer"
)

// ErrGuardOutside is the cause, marked sqsworker.Unavailable, of a chunk
// whose handler added writes (idempotency.AddWrites) under Middleware
// wrapped in the idempotency middleware: that middleware commits the writes
// after the chunk is counted, so a refused commit would leave the chunk
// counted without its effect. The chunk waits, never dead-lettered nor
// recorded failed, until the handler is composed with
// Coordinator.WithIdempotency(guard.Middleware) in place of guard.Middleware
// around Coordinator.Middleware.
var ErrGuardOutside = errors.New("its handler added writes (idempotency.AddWrites) under the idempotency middleware around Coordinator.Middleware, which would count the chunk before they commit: use Coordinator.WithIdempotency(guard.Middleware) in its place")

// Middleware counts the chunks whose handler, next, succeeded, records the
// chunks that failed for good, and sends each batch's completion job once
// all its chunks are counted (see the package documentation). Messages
// that are not chunks (without the Attribute) go to next untouched.
//
// It counts a chunk with a transaction of its own, after next returned nil,
// even when the run's context ended meanwhile (the effect is applied: a
// count left undone would run the chunk again), retried for up to 30s
// (transactions of many chunks of one batch conflict on the batch's item);
// in a Lambda invocation no later than its handlers' deadline (a little
// later when the handler returned after it), so that a DynamoDB that does
// not answer leaves the adapter time to release the chunk rather than have
// SQS dead-letter it. A count still refused then fails the run as
// sqsworker.Unavailable, PartlyUnavailable when its last attempt conflicted
// (this batch's item is contended, not DynamoDB down for every job).
// It may sit anywhere in a chain, inside or outside the idempotency
// middleware; to commit the count together with the idempotency record and
// the handler's AddWrites, use WithIdempotency instead. Inside the
// idempotency middleware, a chunk whose handler added writes
// (idempotency.AddWrites) fails for good, naming that fix: the writes
// commit only after the count, which would stand, the batch completed,
// when they are refused, and the chunk's retry would find it counted and
// never apply them.
//
// Before next runs, every delivery reads its chunk (one consistent
// GetItem) and, unless the chunk is counted, its batch (one more). A chunk already counted is acknowledged
// without running next, whether it is delivered again or is a copy sent
// again (Create called again, a SendMessageBatch retried after a lost
// reply, a replay by SQS's own redrive), however late; a chunk of a batch
// the table does not hold fails for good before next runs. Only copies
// that run at once, both before either is counted, both run next: behind
// WithIdempotency, one does.
func (c *Coordinator) Middleware(next sqsworker.Handler) sqsworker.Handler {
	return c.outer(c.inner(next), false)
}

// WithIdempotency returns middleware that runs a handler under guard (the
// idempotency middleware, idempotency.Guard.Middleware) and counts each
// chunk in the idempotency record's own transaction, with the writes the
// handler added (idempotency.AddWrites): the chunk's effects, its
// idempotency record and its count commit together or not at all. Use it
// in place of guard, not around it:
//
//	h := coord.WithIdempotency(guard.Middleware)(handler)
//
// The transaction then holds two more writes than the handler's:
// a handler may add at most idempotency.MaxWrites-2. The guard's Store must
// commit writes (idempotency.WriteCommitter, as DynamoStore does): under
// one that does not, a chunk waits before its handler runs, naming the fix.
// A chunk's idempotency key is ChunkKey, the same for a batch created again
// under the same ID once the first has expired: keep Config.TTL no shorter
// than the store's StoreConfig.TTL, or do not reuse a batch ID within it,
// else the new batch's chunks find the old ones' records completed.
func (c *Coordinator) WithIdempotency(guard sqsworker.Middleware) sqsworker.Middleware {
	return func(next sqsworker.Handler) sqsworker.Handler {
		return c.outer(guard(c.inner(next)), true)
	}
}

// run is what the outer and inner parts of the middleware share about one
// chunk's run.
type run struct {
	viaGuard bool // the inner part may add its writes to the guard's commit
	added    bool // it did: the guard commits the count
}

type runKey struct{}

// outer runs h, then, for a chunk that succeeded (or was a duplicate of
// one), sends the batch's completion if it is due.
func (c *Coordinator) outer(h sqsworker.Handler, viaGuard bool) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		id, i, ok := ParseChunk(m)
		if !ok {
			return h.HandleMessage(ctx, m)
		}
		r := &run{viaGuard: viaGuard}
		err := h.HandleMessage(context.WithValue(ctx, runKey{}, r), m)
		if err != nil {
			var tce *idempotency.TransactionCanceledError
			if r.added && !sqsworker.IsUnavailable(err) && conflict(err) {
				// The commit kept conflicting with other transactions
				// on the batch's item until its retries ran out:
				// contention, no fault of the chunk's, which must not
				// bring it closer to the dead-letter queue; and of this
				// batch's item alone, not an outage of DynamoDB's for
				// the breaker to pause every job for.
				return sqsworker.PartlyUnavailable(err)
			}
			if !r.added || !errors.As(err, &tce) {
				if r.added {
					// The handler succeeded, and the guard's commit
					// failed after it: inner recorded nothing, and a
					// last failure must be recorded all the same.
					c.recordFailure(ctx, id, i, m, err)
				}
				return err
			}
			// The guard's commit was cancelled by a condition: ours are
			// the last two writes (the chunk item, then the batch).
			n := len(tce.Reasons)
			switch {
			case tce.ConditionFailed(n - 1):
				return c.notInBatch(id, i, tce.Reasons[n-1].Item)
			case tce.ConditionFailed(n-2) && getStr(tce.Reasons[n-2].Item, aStatus) != StatusDone:
				// The chunk was recorded failed (or its item expired)
				// meanwhile: nothing was applied, and the retry reads
				// it and counts it. Put off, not failed: the handler
				// succeeded, and on its last attempt a failure would
				// dead-letter the chunk.
				c.cfg.Logger.Info("batch: chunk changed while it ran (recorded failed by another delivery?); none of its writes applied, its retry counts it",
					"batch", id, "chunk", i, "message_id", m.ID, "error", err)
				return sqsworker.RetryAfter(time.Second, nil)
			case tce.ConditionFailed(n - 2):
				// The chunk was counted by another run, with its
				// effects: this run applied nothing, and is done.
				c.cfg.Logger.Info("batch: chunk already counted by another delivery; its writes were not applied again",
					"batch", id, "chunk", i, "message_id", m.ID)
			default:
				// A condition of the handler's own writes failed: the
				// chunk failed, for good on its last attempt (or when
				// made Permanent around the guard).
				c.recordFailure(ctx, id, i, m, err)
				return err
			}
		}
		return c.notify(ctx, id, i, m)
	})
}

// inner runs next for a chunk not yet counted, and counts it (or records
// its failure).
func (c *Coordinator) inner(next sqsworker.Handler) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		id, i, ok := ParseChunk(m)
		if !ok {
			return next.HandleMessage(ctx, m)
		}
		r, _ := ctx.Value(runKey{}).(*run)
		if r == nil {
			r = &run{}
		}
		// Every delivery reads the chunk with its batch. A chunk of a
		// batch the table does not hold (a consumer given another table,
		// a message made by hand) fails for good before its handler runs:
		// replayed once that is mended, it applies its effect once, where
		// failing after it would apply it twice. A chunk counted already
		// is acknowledged without running next: a redelivery, and a copy
		// that arrives as a first delivery (Create called again, a send
		// retried after a lost reply, SQS's own redrive) however late,
		// where the idempotency record that would stop it lives a day.
		prior, err := c.readChunk(ctx, id, i)
		if err != nil {
			return err
		}
		if prior == StatusDone {
			return nil
		}
		if r.viaGuard {
			// A Guard whose Store cannot commit writes refuses the count
			// after the handler's effect: the chunk would run on every
			// receive, and be dead-lettered uncounted. The composition
			// is wrong, not the chunk: it waits, as for ErrGuardOutside,
			// before its handler runs.
			if err := idempotency.AddWrites(ctx); err != nil && !errors.Is(err, idempotency.ErrNoClaim) {
				return sqsworker.Unavailable(fmt.Errorf("batch: chunk %d of batch %q: WithIdempotency needs a Guard whose Store commits writes: %w", i, id, err))
			}
		}
		// A panic is recovered as the runtimes recover it, so that a
		// chunk whose handler panics on its last attempt is recorded
		// failed, as any other.
		if err := outcome.Call(ctx, next, m); err != nil {
			c.recordFailure(ctx, id, i, m, err)
			return err
		}
		if !r.viaGuard && idempotency.WritesAdded(ctx) > 0 {
			// The composition is wrong, not the chunk: it waits, as for a
			// dependency down (the circuit breaker), never dead-lettered
			// nor recorded failed, until a fixed deployment runs it.
			return sqsworker.Unavailable(fmt.Errorf("batch: chunk %d of batch %q: %w", i, id, ErrGuardOutside))
		}
		if r.viaGuard {
			err := idempotency.AddWrites(ctx, c.countWrites(id, i, prior == StatusFailed)...)
			if err == nil {
				r.added = true
				return nil
			}
			if !errors.Is(err, idempotency.ErrNoClaim) {
				return err
			}
		}
		return c.count(ctx, id, i, prior == StatusFailed)
	})
}

// readChunk returns the status of chunk i of batch id (StatusDone,
// StatusFailed, or "" when it is neither counted nor failed), or
// notInBatch's error when the table holds no batch id with a chunk i. It
// reads the chunk's item, then, unless it is counted (its batch was there:
// a counted chunk outlives its batch's item by up to a TTL), the batch's,
// both consistently (Create records the batch before it sends the
// chunks): GetItem, which the store's grants allow (a BatchGetItem would
// need one more action, and a TransactGetItems would conflict with the
// counts under way on the batch's item).
func (c *Coordinator) readChunk(ctx context.Context, id string, i int) (string, error) {
	status, err := c.chunkStatus(ctx, id, i)
	if err != nil || status == StatusDone {
		return status, err
	}
	out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &c.cfg.Table, Key: c.batchKey(id), ConsistentRead: aws.Bool(true),
		ProjectionExpression:     aws.String("#kind, #total"),
		ExpressionAttributeNames: map[string]string{"#kind": aKind, "#total": aTotal},
	}, c.dbOpts...)
	if err != nil {
		return "", c.dynamoErr(fmt.Sprintf("reading batch %q of chunk %d", id, i), err)
	}
	if getStr(out.Item, aKind) != "batch" || getNum(out.Item, aTotal) <= int64(i) {
		return "", c.notInBatch(id, i, out.Item)
	}
	return status, nil
}

// chunkStatus returns the status of chunk i of batch id: StatusDone,
// StatusFailed, or "" when it is neither counted nor failed.
func (c *Coordinator) chunkStatus(ctx context.Context, id string, i int) (string, error) {
	out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &c.cfg.Table, Key: c.chunkKey(id, i), ConsistentRead: aws.Bool(true),
		ProjectionExpression:     aws.String("#s"),
		ExpressionAttributeNames: map[string]string{"#s": aStatus},
	}, c.dbOpts...)
	if err != nil {
		return "", c.dynamoErr(fmt.Sprintf("reading chunk %d of batch %q", i, id), err)
	}
	return getStr(out.Item, aStatus), nil
}

// countWrites returns the writes that count chunk i of batch id as done:
// the chunk item, on the condition that it does not exist (or, recovering,
// that it is failed), then the batch's counters, on the condition that the
// batch exists.
func (c *Coordinator) countWrites(id string, i int, recovering bool) []types.TransactWriteItem {
	now := c.now()
	names := map[string]string{"#k": c.cfg.KeyAttr, "#done": aDone, "#total": aTotal}
	var chunk types.TransactWriteItem
	update := "ADD #done :one"
	values := map[string]types.AttributeValue{":one": num(1), ":i": num(int64(i))}
	if recovering {
		chunk.Update = &types.Update{
			TableName: &c.cfg.Table, Key: c.chunkKey(id, i),
			UpdateExpression:                    aws.String("SET #s = :done, #at = :at REMOVE #e, #c"),
			ConditionExpression:                 aws.String("#s = :failed"),
			ExpressionAttributeNames:            map[string]string{"#s": aStatus, "#at": aAt, "#e": aError, "#c": aClass},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":done": str(StatusDone), ":failed": str(StatusFailed), ":at": num(now.UnixMilli())},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
		update = "ADD #done :one, #failed :minus DELETE #set :idx"
		names["#failed"], names["#set"] = aFailed, aFailedSet
		values[":minus"] = num(-1)
		values[":idx"] = &types.AttributeValueMemberNS{Value: []string{strconv.Itoa(i)}}
	} else {
		item := c.chunkKey(id, i)
		item[aKind] = str("chunk")
		item[aStatus] = str(StatusDone)
		item[aAt] = num(now.UnixMilli())
		item[c.cfg.ExpiryAttr] = num(now.Add(c.cfg.TTL).Unix())
		chunk.Put = &types.Put{
			TableName: &c.cfg.Table, Item: item,
			ConditionExpression:                 aws.String("attribute_not_exists(#k)"),
			ExpressionAttributeNames:            map[string]string{"#k": c.cfg.KeyAttr},
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}
	}
	return []types.TransactWriteItem{chunk, {Update: &types.Update{
		TableName: &c.cfg.Table, Key: c.batchKey(id),
		UpdateExpression:                    &update,
		ConditionExpression:                 aws.String(inBatch),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}}
}

// inBatch is the condition of the updates of a batch's item for chunk :i:
// the batch exists, and has a chunk :i.
const inBatch = "attribute_exists(#k) AND #total > :i"

// notInBatch returns the error of chunk i of batch id when the condition
// inBatch failed on the batch's item, item as it was (nil when there was
// none).
func (c *Coordinator) notInBatch(id string, i int, item map[string]types.AttributeValue) error {
	if getStr(item, aKind) == "batch" {
		return sqsworker.Permanent(fmt.Errorf("batch: chunk %d is not a chunk of batch %q, which has %d chunks (a message made by hand, or a chunk of an earlier batch of the same ID?)",
			i, id, getNum(item, aTotal)))
	}
	return sqsworker.Permanent(&UnknownBatchError{ID: id, Table: c.cfg.Table})
}

// countBudget bounds the time count takes, its retries included, once the
// handler has succeeded, whatever the run's context; and recordFailure's.
// The transactions are retried until it ends: they conflict when many
// chunks of one batch are counted at once, each a write of the batch's
// item, and one item takes about 1,000 write units a second.
const countBudget = 30 * time.Second

// count counts chunk i of batch id as done with a transaction of its own.
// A chunk found counted already is not counted again; a chunk found failed
// moves to done.
func (c *Coordinator) count(ctx context.Context, id string, i int, recovering bool) error {
	// The handler succeeded: its effect is applied, so count it even if
	// the run's context has ended meanwhile (a handler that ignored it),
	// rather than fail the chunk and run it again. countBudget bounds it,
	// and in a Lambda invocation its handlers' deadline (see finishing).
	ctx, cancel := finishing(ctx, c.countBudget)
	defer cancel()
	// A request and its token go together: DynamoDB refuses a token
	// repeated with other parameters.
	token, items := newToken(), c.countWrites(id, i, recovering)
	var last error
	conflicted := false // the last attempt was cancelled, not failed
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, txBackoff(attempt)); err != nil {
				// Every attempt so far failed for a reason that may pass
				// (an outage, throttling, a conflict): not the chunk's.
				err = fmt.Errorf("batch: counting chunk %d of batch %q: %w (last: %w)", i, id, err, last)
				if conflicted {
					// Contention on this batch's item: no outage of
					// DynamoDB's, for the breaker to pause every job
					// for.
					return sqsworker.PartlyUnavailable(err)
				}
				return sqsworker.Unavailable(err)
			}
		}
		_, err := c.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:      items,
			ClientRequestToken: &token,
		}, c.dbOpts...)
		if err == nil {
			return nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			// The outcome is unknown: the retry repeats the same request,
			// which DynamoDB applies at most once (ClientRequestToken);
			// past its ten minutes, the chunk item's condition does.
			last = c.dynamoErr(fmt.Sprintf("counting chunk %d of batch %q", i, id), err)
			if !retryableErr(err) {
				return last
			}
			conflicted = conflict(err)
			continue
		}
		conflicted = conflict(err)
		rs := tce.CancellationReasons
		if len(rs) == 2 && aws.ToString(rs[1].Code) == "ConditionalCheckFailed" {
			return c.notInBatch(id, i, rs[1].Item)
		}
		last = fmt.Errorf("batch: counting chunk %d of batch %q: %w", i, id, err)
		if len(rs) == 2 && aws.ToString(rs[0].Code) == "ConditionalCheckFailed" {
			switch getStr(rs[0].Item, aStatus) {
			case StatusDone:
				return nil // counted already
			case StatusFailed:
				recovering = true
			default:
				recovering = false // the failed item is gone (expired)
			}
		}
		// Cancelled: nothing was applied; the next attempt is a new
		// request.
		token, items = newToken(), c.countWrites(id, i, recovering)
	}
}

// lastAttempt reports whether m is on the attempt Config.MaxReceiveCount,
// or past it, or on the last its queue's redrive policy allows when that
// is lower (see maxReceive).
func (c *Coordinator) lastAttempt(ctx context.Context, m *sqsworker.Message) bool {
	mrc := c.maxReceive(ctx, m.QueueURL, false)
	return mrc > 0 && m.ReceiveCount >= mrc
}

// recordFailure records chunk i of batch id as failed when err is its last
// failure: Permanent, or on the attempt Config.MaxReceiveCount. err is the
// handler's, or the guard's commit's after the handler succeeded. A chunk
// counted or failed already is left as it is. Errors are logged: the
// message's own error is what matters to the runtime.
func (c *Coordinator) recordFailure(ctx context.Context, id string, i int, m *sqsworker.Message, err error) {
	var perm *sqsworker.PermanentError
	postponed := sqsworker.IsPostponed(err) // not a failure
	// The runtimes never dead-letter a message for an Unavailable error,
	// Permanent or not: it is retried.
	// A run the runtime cut short because it stops (its shutdown, a
	// Lambda deadline) is released, not dead-lettered: on its last
	// receive it waits in a fresh copy.
	stopping := errors.Is(context.Cause(ctx), stopby.ErrStopping)
	final := !sqsworker.IsUnavailable(err) && !postponed && !stopping &&
		(errors.As(err, &perm) || c.lastAttempt(ctx, m))
	if !final {
		return
	}
	now := c.now()
	item := c.chunkKey(id, i)
	item[aKind] = str("chunk")
	item[aStatus] = str(StatusFailed)
	item[aAt] = num(now.UnixMilli())
	item[aError] = str(truncate(err.Error(), sqsworker.MaxFailureErrorLen))
	item[aClass] = str(sqsworker.ErrorClass(err))
	item[aAttempts] = num(int64(m.ReceiveCount))
	item[c.cfg.ExpiryAttr] = num(now.Add(c.cfg.TTL).Unix())
	// The failure is the message's: its record is retried within the
	// count's budget (it conflicts with the counts of other chunks on the
	// batch's item), then logged.
	rctx, cancel := finishing(ctx, c.countBudget)
	defer cancel()
	listed := true // the chunk's index goes into the batch's failed_chunks
	in := c.failureWrites(id, i, item, listed)
	var terr error
	atOnce := false // the next attempt does not wait
attempts:
	for attempt := 0; ; attempt++ {
		if attempt > 0 && !atOnce && sleep(rctx, txBackoff(attempt)) != nil {
			break
		}
		atOnce = false
		_, terr = c.db.TransactWriteItems(rctx, in, c.dbOpts...)
		var tce *types.TransactionCanceledException
		switch {
		case terr == nil:
			return
		case errors.As(terr, &tce):
			rs := tce.CancellationReasons
			if len(rs) != 2 {
				break attempts
			}
			if aws.ToString(rs[0].Code) == "ConditionalCheckFailed" {
				return // counted or failed already
			}
			if aws.ToString(rs[1].Code) == "ConditionalCheckFailed" {
				if !listed || getStr(rs[1].Item, aKind) != "batch" || getNum(rs[1].Item, aTotal) <= int64(i) {
					return // not a chunk of the batch, which the count tells
				}
				// The batch's failed_chunks holds failedCap indexes
				// already: the chunk is counted, not listed. Its chunk
				// item is its full record.
				listed, atOnce = false, true
			}
			// Cancelled (a conflict, throttling, or the set full):
			// nothing applied, and the next attempt is a new request.
			in = c.failureWrites(id, i, item, listed)
		case !retryableErr(terr):
			break attempts
		}
	}
	c.cfg.Logger.Warn("batch: recording a failed chunk failed; batch show --dlq still lists it from the dead-letter queue",
		"batch", id, "chunk", i, "message_id", m.ID, "error", terr)
}

// failureWrites returns the request that records chunk i of batch id as
// failed: it puts the chunk's item, on the condition that the chunk has
// none (neither counted nor failed), and adds one to the batch's failed
// counter, on the condition inBatch. Listed, it also adds i to the batch's
// failed_chunks, on the condition that the set holds fewer than failedCap
// indexes; not listed, the counter alone moves (the batch's item stays
// small whatever the failures: see MaxFailedIndexes). Either way failed
// counts every failed chunk exactly, and failed minus the size of the set
// is the number of failed chunks not listed. A chunk that succeeds later
// (countWrites, recovering) moves from failed to done, and leaves the set
// if it was in it.
func (c *Coordinator) failureWrites(id string, i int, chunk map[string]types.AttributeValue, listed bool) *dynamodb.TransactWriteItemsInput {
	names := map[string]string{"#k": c.cfg.KeyAttr, "#failed": aFailed, "#total": aTotal}
	values := map[string]types.AttributeValue{":one": num(1), ":i": num(int64(i))}
	update, cond := "ADD #failed :one", inBatch
	if listed {
		update += ", #set :idx"
		cond += " AND (attribute_not_exists(#set) OR size(#set) < :cap)"
		names["#set"] = aFailedSet
		values[":idx"] = &types.AttributeValueMemberNS{Value: []string{strconv.Itoa(i)}}
		values[":cap"] = num(int64(c.failedCap))
	}
	return &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: aws.String(newToken()),
		TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{
				TableName: &c.cfg.Table, Item: chunk,
				ConditionExpression:      aws.String("attribute_not_exists(#k)"),
				ExpressionAttributeNames: map[string]string{"#k": c.cfg.KeyAttr},
			}},
			{Update: &types.Update{
				TableName: &c.cfg.Table, Key: c.batchKey(id),
				UpdateExpression:          &update,
				ConditionExpression:       &cond,
				ExpressionAttributeNames:  names,
				ExpressionAttributeValues: values,
				// The batch's item as it was, to tell a full set from a
				// chunk out of the batch: small, as the set is bounded.
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}},
		},
	}
}

// notify sends the completion job of batch id when every chunk is counted
// and it has not been sent: it takes the lease on sending it, sends it and
// marks it sent. Chunk i, message m, is the chunk whose run this is: on the
// last receive its redrive policy allows, a copy of it does (see lastReceive).
func (c *Coordinator) notify(ctx context.Context, id string, i int, m *sqsworker.Message) error {
	out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &c.cfg.Table, Key: c.batchKey(id), ConsistentRead: aws.Bool(true),
		ProjectionExpression:     aws.String("#t, #d, #n, #u, #c"),
		ExpressionAttributeNames: map[string]string{"#t": aTotal, "#d": aDone, "#n": aNotified, "#u": aNotifyTill, "#c": "notify_chunk"},
	}, c.dbOpts...)
	if err != nil {
		return c.dynamoErr(fmt.Sprintf("reading batch %q", id), err)
	}
	if out.Item == nil {
		c.cfg.Logger.Warn("batch: a counted chunk's batch is gone (expired?)", "batch", id, "chunk", i)
		return nil
	}
	if done, total := getNum(out.Item, aDone), getNum(out.Item, aTotal); done < total {
		return nil
	}
	if _, sent := out.Item[aNotified]; sent {
		return nil
	}
	now := c.now()
	if until := time.UnixMilli(getNum(out.Item, aNotifyTill)); until.After(now) {
		// On the last receive, the runtime postpones it in a copy.
		return c.held(out.Item, i, until.Sub(now))
	}
	if c.lastReceive(ctx, m) && !strings.HasSuffix(m.QueueURL, ".fifo") && copyRoom(m, c.limits(ctx, m.QueueURL).maxSize) {
		// A crash from here to the completion's mark would leave the
		// chunk to SQS's move to the dead-letter queue: postponed
		// instead, the runtime hands it to a fresh copy of its message
		// (keeping the job's key), which finds it counted and sends the
		// completion with receives to spare. A FIFO queue's runtime
		// makes no such copy (it would go behind the rest of its group):
		// there the chunk sends the completion itself; so it does when
		// the copy would have no room for its prior attempts (see
		// copyRoom).
		c.cfg.Logger.Info("batch: the chunk that completes the batch is on its last receive: a copy of it sends the completion",
			"batch", id, "chunk", i, "message_id", m.ID)
		return sqsworker.RetryAfter(0, nil)
	}
	token := newToken()
	up, err := c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &c.cfg.Table, Key: c.batchKey(id),
		UpdateExpression:    aws.String("SET #tok = :tok, #u = :until, #c = :chunk"),
		ConditionExpression: aws.String("#d = #t AND attribute_not_exists(#n) AND (attribute_not_exists(#u) OR #u < :now)"),
		ExpressionAttributeNames: map[string]string{
			"#tok": aNotifyTok, "#u": aNotifyTill, "#c": "notify_chunk", "#d": aDone, "#t": aTotal, "#n": aNotified,
		},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tok": str(token), ":until": num(now.Add(c.cfg.NotifyLease).UnixMilli()), ":chunk": num(int64(i)), ":now": num(now.UnixMilli()),
		},
		ReturnValues:                        types.ReturnValueAllNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, c.dbOpts...)
	var ccf *types.ConditionalCheckFailedException
	item := map[string]types.AttributeValue(nil)
	switch {
	case errors.As(err, &ccf) && getStr(ccf.Item, aNotifyTok) == token && ccf.Item[aNotified] == nil:
		// The reply to this update was lost, and the SDK's retry found
		// the lease taken: by this very update.
		item = ccf.Item
	case errors.As(err, &ccf):
		if _, sent := ccf.Item[aNotified]; sent {
			return nil
		}
		until := time.UnixMilli(getNum(ccf.Item, aNotifyTill))
		return c.held(ccf.Item, i, max(until.Sub(now), time.Second))
	case err != nil:
		return c.dynamoErr(fmt.Sprintf("taking the lease on the completion of batch %q", id), err)
	default:
		item = up.Attributes
	}
	msgID, err := c.sendCompletion(ctx, id, item, now.Add(c.cfg.NotifyLease))
	if err != nil {
		c.releaseLease(ctx, id, token)
		return err
	}
	c.markSent(ctx, id, token, msgID)
	return nil
}

// held is the outcome of chunk i's run when another holder's lease on
// sending the completion lasts for d more: the holder's chunk comes back
// after the lease (it may have died, and it holds the only message bound to
// send the completion); other chunks are done. The holder's chunk is put
// off, not failed (RetryAfter with a nil error): its wait is no failure of
// its own, and must not bring it closer to the dead-letter queue, where the
// completion would wait for an operator.
func (c *Coordinator) held(item map[string]types.AttributeValue, i int, d time.Duration) error {
	if _, ok := item["notify_chunk"]; ok && getNum(item, "notify_chunk") != int64(i) {
		return nil
	}
	return sqsworker.RetryAfter(d+time.Second, nil)
}

// sendCompletion sends the completion job of batch id, whose item is
// batch, before leaseEnd, and returns its message ID. The job is kept in an
// item of its own (in the batch's item, for a batch created before it had
// one).
func (c *Coordinator) sendCompletion(ctx context.Context, id string, batch map[string]types.AttributeValue, leaseEnd time.Time) (string, error) {
	item := batch
	if _, ok := batch[aCbBody]; !ok {
		out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &c.cfg.Table, Key: c.callbackKey(id), ConsistentRead: aws.Bool(true),
		}, c.dbOpts...)
		if err != nil {
			return "", c.dynamoErr(fmt.Sprintf("reading the completion job of batch %q", id), err)
		}
		if out.Item == nil {
			return "", sqsworker.Permanent(fmt.Errorf("batch: the completion job of batch %q is not in table %s (expired?)", id, c.cfg.Table))
		}
		item = out.Item
	}
	var attrs map[string]sqsworker.MessageAttribute
	if s := getStr(item, aCbAttrs); s != "" && s != "null" {
		if err := json.Unmarshal([]byte(s), &attrs); err != nil {
			return "", sqsworker.Permanent(fmt.Errorf("batch: the callback attributes of batch %q are not valid JSON: %w", id, err))
		}
	}
	queue := getStr(item, aCbQueue)
	m := c.completion(id, getStr(item, aCbBody), attrs, getStr(item, aCbGroup), strings.HasSuffix(queue, ".fifo"))
	p, err := producer.New(c.sqs, producer.Config{QueueURL: queue, MaxMessageSize: producer.MaxMessageSize})
	if err != nil {
		return "", sqsworker.Permanent(fmt.Errorf("batch: the callback of batch %q: %w", id, err))
	}
	// Within the lease: an SQS that takes the request and never answers
	// fails the send, rather than hold the chunk for as long as its
	// context lives, or another holder send it too.
	sctx, cancel := context.WithDeadline(ctx, leaseEnd)
	msgID, err := p.Send(sctx, m)
	cancel()
	if awserr.IsQueueMissing(err) {
		// No outage: the queue is gone. The chunk waits in the
		// dead-letter queue, named, until the queue is back and the
		// chunk replayed (it is counted: its replay sends the job).
		return "", sqsworker.Permanent(fmt.Errorf("batch: the callback queue %s of batch %q does not exist: create it again, then replay this chunk from the dead-letter queue to send the completion job: %w", queue, id, err))
	}
	if err != nil && awserr.IsFatal(err) {
		// SQS refused the job for the callback queue or the role (access
		// denied, the queue's KMS key, a job over the queue's
		// MaximumMessageSize): no outage, and a fault of this batch's
		// callback queue alone, which the circuit breaker must not count
		// against the other jobs. The chunk, counted, waits for the fix.
		return "", sqsworker.PartlyUnavailable(fmt.Errorf("batch: SQS refused the completion job of batch %q for its callback queue %s: "+
			"grant the role sqs:SendMessage on it (and, for a queue encrypted with a KMS key, kms:GenerateDataKey and kms:Decrypt on the key), "+
			"or raise its MaximumMessageSize over the job's size; the chunk is counted and sends the job once SQS takes it: %w", id, queue, err))
	}
	if err != nil {
		return "", sqsworker.Unavailable(fmt.Errorf("batch: sending the completion job of batch %q to %s: %w", id, queue, err))
	}
	return msgID, nil
}

// releaseLease ends the lease of token on sending the completion of batch
// id, as a best effort, so that the retry need not wait for it. It takes
// at most Config.NotifyLease, after which the lease has ended anyway.
func (c *Coordinator) releaseLease(ctx context.Context, id, token string) {
	ctx, cancel := finishing(ctx, c.cfg.NotifyLease)
	defer cancel()
	_, _ = c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &c.cfg.Table, Key: c.batchKey(id),
		UpdateExpression:          aws.String("REMOVE #u, #tok, #c"),
		ConditionExpression:       aws.String("#tok = :tok"),
		ExpressionAttributeNames:  map[string]string{"#u": aNotifyTill, "#tok": aNotifyTok, "#c": "notify_chunk"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":tok": str(token)},
	}, c.dbOpts...)
}

// markSent marks the completion of batch id sent, retrying for a while: a
// completion sent but not marked is sent again by a later duplicate of a
// chunk. It goes on when the run's context has ended, for at most
// Config.NotifyLease (in a Lambda invocation, no later than its handlers'
// deadline, see finishing): past the lease another chunk may send the completion
// again anyway, and a DynamoDB that takes requests without answering them
// must not hold the run (and a worker's shutdown) for the whole outage.
func (c *Coordinator) markSent(ctx context.Context, id, token, msgID string) {
	ctx, cancel := finishing(ctx, c.cfg.NotifyLease)
	defer cancel()
	var err error
	for attempt := range 6 {
		if attempt > 0 && sleep(ctx, txBackoff(attempt)) != nil {
			break
		}
		_, err = c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &c.cfg.Table, Key: c.batchKey(id),
			UpdateExpression:          aws.String("SET #n = :now, #id = :id REMOVE #u"),
			ConditionExpression:       aws.String("#tok = :tok"),
			ExpressionAttributeNames:  map[string]string{"#n": aNotified, "#id": aNotifyID, "#u": aNotifyTill, "#tok": aNotifyTok},
			ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(c.now().UnixMilli()), ":id": str(msgID), ":tok": str(token)},
		}, c.dbOpts...)
		var ccf *types.ConditionalCheckFailedException
		if err == nil || errors.As(err, &ccf) {
			break
		}
	}
	if err != nil {
		c.cfg.Logger.Error("batch: the completion job was sent, but marking it sent failed: a later duplicate of a chunk may send it again (its idempotency key makes the callback run once)",
			"batch", id, "completion_message_id", msgID, "error", err)
	}
}

// finishing returns the context of the requests that finish a chunk's run
// (its count, its failure's record, the completion's marking): ctx without
// its cancellation, bounded by budget and, in a Lambda invocation, by the
// time the work after a handler must end (stopby.End). Past it the
// function answers without the chunk's outcome: its record, reported failed with its visibility left alone,
// would come back after its visibility timeout, and on its last receive be
// dead-lettered by SQS; ended in time, the run's error has the adapter
// release the chunk (in a fresh copy on its last receive).
func finishing(ctx context.Context, budget time.Duration) (context.Context, context.CancelFunc) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), budget)
	d, ok := stopby.End(ctx, time.Now())
	if !ok {
		return fctx, cancel
	}
	bctx, cancelBy := context.WithDeadline(fctx, d)
	return bctx, func() { cancelBy(); cancel() }
}

// newToken returns a random token of 32 hex characters: a ClientRequestToken
// (at most 36) or a lease's holder.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// txBackoff is the jittered wait before attempt n (from 1) of a conflicting
// or failed request: up to 25ms doubling, at most 1s.
func txBackoff(n int) time.Duration {
	ceil := min(25*time.Millisecond<<min(n-1, 6), time.Second)
	return time.Duration(mrand.Int64N(int64(ceil))) + time.Millisecond
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

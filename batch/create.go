package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
)

// Spec describes a batch to create.
type Spec struct {
	// ID names the batch: 1 to MaxIDLength bytes of letters, digits and
	// _ . : / = + @ - (see CheckID). Required. Creating a batch again with
	// its ID repeats the same spec. The ID of an expired batch whose chunk
	// items remain is refused (*ReusedIDError): give each batch an ID of
	// its own.
	ID string
	// QueueURL is the queue the chunks are sent to. Required.
	QueueURL string
	// Chunks are the chunk jobs, at least one; chunk i gets the index i.
	// Create sets their idempotency key (ChunkKey) and the Attribute
	// marking them: leave IdempotencyKey empty, and use at most eight
	// attributes of your own. On a FIFO queue without content-based
	// deduplication, a chunk without a DeduplicationID gets one derived
	// from its key. A chunk's Delay or NotBefore must be less than
	// Config.TTL, after which the batch expires.
	Chunks []producer.Message
	// Callback is the completion job, sent once every chunk has succeeded.
	Callback Callback
}

// Callback is a batch's completion job.
type Callback struct {
	// QueueURL is the queue the completion job is sent to. Required.
	QueueURL string
	// Body is the completion job's body. Required.
	Body string
	// Attributes are its message attributes, at most eight: the
	// completion job also carries its idempotency key (DoneKey) and the
	// AttrCompleted attribute.
	Attributes map[string]sqsworker.MessageAttribute
	// GroupID is its message group on a FIFO queue. Default the batch ID.
	GroupID string
}

// maxCallbackSize bounds the callback's body and attributes, which are kept
// in an item of their own (DynamoDB's items are at most 400 KB).
const maxCallbackSize = 256 << 10

// maxCreateAttempts bounds the attempts to record a batch that conflict
// with another transaction (a concurrent Create of the same batch).
const maxCreateAttempts = 5

// Create records the batch in the table, then sends its chunks (ten per
// SendMessageBatch), then marks them sent. The record comes first, so that
// no chunk can be counted against a batch that does not exist. Before it,
// the spec is checked, against the queues too (with the client's
// GetQueueAttributes, when it has it and may call it): a queue that does
// not exist, or a chunk or completion job over its queue's
// MaximumMessageSize, is an error, and nothing is recorded.
//
// Create is safe to call again after a crash or an error: with the same
// spec it sends the chunks again unless the first call marked them sent
// (a chunk sent twice is counted once, and its second delivery is a
// duplicate for the idempotency middleware); with another spec it returns a
// *SpecMismatchError and sends nothing. Before recording a batch, Create
// reads its item and its chunks' items (one BatchGetItem per 100 chunks,
// stopping at the batch's item when it is there): the ID of an expired
// batch whose chunk items remain is a *ReusedIDError, and nothing is
// recorded or sent; an expired batch whose item DynamoDB has not deleted
// yet, none of its chunks' items left, is made anew. An error sending chunks says how
// many may not have been sent: call Create again with the same spec.
func (c *Coordinator) Create(ctx context.Context, s Spec) error {
	msgs, err := c.chunks(s)
	if err != nil {
		return err
	}
	hash := specHash(s, msgs)
	now := c.now()
	attrs, err := json.Marshal(s.Callback.Attributes)
	if err != nil {
		return fmt.Errorf("batch: encoding the callback's attributes: %w", err)
	}
	if n := len(s.Callback.Body) + len(attrs); n > maxCallbackSize {
		return fmt.Errorf("batch: the callback's body and attributes are %d bytes, over %d (they are kept in the batch's item): keep large data elsewhere (such as S3) and send a reference to it", n, maxCallbackSize)
	}
	group := s.Callback.GroupID
	if group == "" {
		group = s.ID
	}
	cbFIFO := strings.HasSuffix(s.Callback.QueueURL, ".fifo")
	if err := c.checkQueues(ctx, s, msgs, c.completion(s.ID, s.Callback.Body, s.Callback.Attributes, group, cbFIFO)); err != nil {
		return err
	}
	// The batch's item, which every chunk's count updates, stays small:
	// DynamoDB bills a write by the item's size, and one item takes about
	// 1,000 units a second. The callback, up to maxCallbackSize, has an
	// item of its own, read once, by the completion's sender.
	if err := c.checkReused(ctx, s.ID, len(msgs), now); err != nil {
		return err
	}
	item := c.batchItem(s, len(msgs), hash, now)
	cb := c.callbackKey(s.ID)
	cb[aKind] = str("callback")
	cb[aCbQueue] = str(s.Callback.QueueURL)
	cb[aCbBody] = str(s.Callback.Body)
	cb[aCbAttrs] = str(string(attrs))
	cb[aCbGroup] = str(group)
	cb[c.cfg.ExpiryAttr] = item[c.cfg.ExpiryAttr] // both expire together
	in := &dynamodb.TransactWriteItemsInput{
		ClientRequestToken: aws.String(newToken()),
		TransactItems: []types.TransactWriteItem{
			// Unconditional: it is written only with a new batch's
			// item (over the leftover of an expired batch, if any).
			{Put: &types.Put{TableName: &c.cfg.Table, Item: cb}},
			// Over nothing, or over the item of an expired batch that
			// DynamoDB has not deleted yet (checkReused found none of its
			// chunks' items): taken for this batch, it would be deleted
			// under it, its chunks not sent.
			{Put: &types.Put{
				TableName: &c.cfg.Table, Item: item,
				ConditionExpression:                 aws.String("attribute_not_exists(#k) OR #x < :now"),
				ExpressionAttributeNames:            map[string]string{"#k": c.cfg.KeyAttr, "#x": c.cfg.ExpiryAttr},
				ExpressionAttributeValues:           map[string]types.AttributeValue{":now": num(now.Unix())},
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
			}},
		},
	}
	for attempt := 1; ; attempt++ {
		_, err = c.db.TransactWriteItems(ctx, in, c.dbOpts...)
		var tce *types.TransactionCanceledException
		if err == nil || !errors.As(err, &tce) || len(tce.CancellationReasons) != 2 {
			break
		}
		if r := tce.CancellationReasons[1]; aws.ToString(r.Code) == "ConditionalCheckFailed" {
			if getStr(r.Item, aSpec) != hash {
				return &SpecMismatchError{ID: s.ID}
			}
			if _, sent := r.Item[aSent]; sent {
				return nil
			}
			err = nil // recorded before, by a Create that did not finish
			break
		}
		if !conflict(err) || attempt == maxCreateAttempts {
			break
		}
		// In conflict with another Create of this batch: the next
		// attempt finds it recorded, or records it.
		if serr := sleep(ctx, txBackoff(attempt)); serr != nil {
			break
		}
		in.ClientRequestToken = aws.String(newToken())
	}
	if err != nil {
		return c.dynamoErr(fmt.Sprintf("recording batch %q", s.ID), err)
	}
	p, err := producer.New(c.sqs, producer.Config{QueueURL: s.QueueURL})
	if err != nil {
		return fmt.Errorf("batch: %w", err)
	}
	res, err := p.SendBatch(ctx, msgs)
	if err != nil {
		failed := 0
		for _, r := range res {
			if r.Err != nil {
				failed++
			}
		}
		return fmt.Errorf("batch: %d of the %d chunks of batch %q may not have been sent: call Create again with the same spec (chunks sent twice are counted once): %w",
			failed, len(msgs), s.ID, err)
	}
	_, err = c.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &c.cfg.Table, Key: c.batchKey(s.ID),
		UpdateExpression:          aws.String("SET #sent = :now"),
		ConditionExpression:       aws.String("attribute_exists(#k)"),
		ExpressionAttributeNames:  map[string]string{"#sent": aSent, "#k": c.cfg.KeyAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": num(c.now().UnixMilli())},
	}, c.dbOpts...)
	if err != nil {
		return c.dynamoErr(fmt.Sprintf("marking the chunks of batch %q sent (they were: calling Create again sends them again; a chunk counted is counted once, and its handler runs once behind WithIdempotency, at least once behind Middleware alone)", s.ID), err)
	}
	return nil
}

// checkReused returns a *ReusedIDError when batch id, of n chunks, is not
// in the table (or has expired, its item not yet deleted) while the item of
// one of its chunks is: the leftover of an expired batch of the same ID,
// which would take the new batch's chunk for counted already. It reads the
// batch's item and its chunks' items, up to 100 a request, and stops at the
// batch's item when it is there: Create called again for a batch that
// exists goes on.
func (c *Coordinator) checkReused(ctx context.Context, id string, n int, now time.Time) error {
	keys := make([]map[string]types.AttributeValue, 0, n+1)
	keys = append(keys, c.batchKey(id))
	for i := range n {
		keys = append(keys, c.chunkKey(id, i))
	}
	batchKey := KeyPrefix + "#" + id
	prefix := batchKey + "#chunk#"
	leftover := -1
	for len(keys) > 0 {
		page := keys[:min(len(keys), 100)]
		keys = keys[len(page):]
		req := map[string]types.KeysAndAttributes{c.cfg.Table: {Keys: page, ConsistentRead: aws.Bool(true),
			ProjectionExpression:     aws.String("#k, #x"),
			ExpressionAttributeNames: map[string]string{"#k": c.cfg.KeyAttr, "#x": c.cfg.ExpiryAttr}}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if err := sleep(ctx, txBackoff(attempt)); err != nil {
					return fmt.Errorf("batch: checking that batch ID %q is not that of an expired batch: %w", id, err)
				}
			}
			res, err := c.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req}, c.dbOpts...)
			if err != nil {
				return c.dynamoErr(fmt.Sprintf("checking that batch ID %q is not that of an expired batch", id), err)
			}
			for _, it := range res.Responses[c.cfg.Table] {
				k := getStr(it, c.cfg.KeyAttr)
				if k == batchKey {
					if _, ok := it[c.cfg.ExpiryAttr]; !ok || getNum(it, c.cfg.ExpiryAttr) >= now.Unix() {
						return nil // the batch is there: Create again
					}
					continue
				}
				if i, err := strconv.Atoi(strings.TrimPrefix(k, prefix)); err == nil && (leftover < 0 || i < leftover) {
					leftover = i
				}
			}
			req = res.UnprocessedKeys
		}
	}
	if leftover >= 0 {
		return &ReusedIDError{ID: id, Table: c.cfg.Table, Chunk: leftover}
	}
	return nil
}

// batchItem returns the item of batch s, of n chunks, as Create writes
// it. Later writes add the chunks' counters, a bounded list of failed
// chunks (MaxFailedIndexes) and the completion's state, never the
// callback, which has an item of its own.
func (c *Coordinator) batchItem(s Spec, n int, hash string, now time.Time) map[string]types.AttributeValue {
	item := c.batchKey(s.ID)
	item[aKind] = str("batch")
	item[aTotal] = num(int64(n))
	item[aDone] = num(0)
	item[aFailed] = num(0)
	item[aSpec] = str(hash)
	item[aQueue] = str(s.QueueURL)
	item[aCreated] = num(now.UnixMilli())
	item[c.cfg.ExpiryAttr] = num(now.Add(c.cfg.TTL).Unix())
	item[aCbQueue] = str(s.Callback.QueueURL)
	return item
}

// chunks validates s and returns the chunk messages to send.
func (c *Coordinator) chunks(s Spec) ([]producer.Message, error) {
	var errs []error
	if err := CheckID(s.ID); err != nil {
		errs = append(errs, err)
	}
	if s.QueueURL == "" {
		errs = append(errs, errors.New("batch: Spec.QueueURL is required: the queue the chunks are sent to"))
	}
	if len(s.Chunks) == 0 {
		errs = append(errs, errors.New("batch: Spec.Chunks is empty: a batch has at least one chunk"))
	}
	if s.Callback.QueueURL == "" {
		errs = append(errs, errors.New("batch: Spec.Callback.QueueURL is required: the queue the completion job is sent to"))
	}
	if s.Callback.Body == "" {
		errs = append(errs, errors.New("batch: Spec.Callback.Body is required: the completion job's body"))
	}
	if n := len(s.Callback.Attributes); n > sqsworker.MaxMessageAttributes-2 {
		errs = append(errs, fmt.Errorf("batch: the callback has %d attributes, over %d (SQS allows %d, and the completion job carries two of its own)", n, sqsworker.MaxMessageAttributes-2, sqsworker.MaxMessageAttributes))
	}
	cbFIFO := strings.HasSuffix(s.Callback.QueueURL, ".fifo")
	if err := producer.Validate(c.completion(s.ID, s.Callback.Body, s.Callback.Attributes, s.Callback.GroupID, cbFIFO), cbFIFO); err != nil {
		errs = append(errs, fmt.Errorf("batch: the callback: %w", err))
	}
	fifo := strings.HasSuffix(s.QueueURL, ".fifo")
	now := c.now()
	msgs := make([]producer.Message, len(s.Chunks))
	bad := 0
	for i, m := range s.Chunks {
		var err error
		switch {
		case m.IdempotencyKey != "":
			err = fmt.Errorf("it sets IdempotencyKey: leave it empty, Create sets it to %q", ChunkKey(s.ID, i))
		case hasAttr(m.Attributes, Attribute) || hasAttr(m.Attributes, producer.IdempotencyKeyAttribute):
			err = fmt.Errorf("it sets the %q or %q attribute, which Create sets", Attribute, producer.IdempotencyKeyAttribute)
		default:
			m.IdempotencyKey = ChunkKey(s.ID, i)
			a := make(map[string]sqsworker.MessageAttribute, len(m.Attributes)+1)
			for k, v := range m.Attributes {
				a[k] = v
			}
			a[Attribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: s.ID + "#" + strconv.Itoa(i)}
			m.Attributes = a
			if fifo && m.DeduplicationID == "" {
				m.DeduplicationID = digest(m.IdempotencyKey)
			}
			if verr := producer.Validate(m, fifo); !fifo && m.DeduplicationID != "" {
				err = errors.New("it has a deduplication ID, which a standard queue refuses")
			} else if d := delayOf(m, now); verr == nil && d >= c.cfg.TTL {
				// It would run once DynamoDB's TTL may have deleted
				// the batch: a chunk of an unknown batch, failed for
				// good, and the batch never complete.
				err = fmt.Errorf("it is delayed %s, not less than the batch's Config.TTL of %s, after which the batch expires: delay it less, or raise Config.TTL", d.Round(time.Second), c.cfg.TTL)
			} else if verr != nil {
				err = verr
				if n := len(a) + 1; n > sqsworker.MaxMessageAttributes {
					err = fmt.Errorf("%w (a chunk carries two attributes of its own: use at most %d)", verr, sqsworker.MaxMessageAttributes-2)
				}
			}
		}
		if err != nil {
			if bad++; bad <= 5 {
				errs = append(errs, fmt.Errorf("batch: chunk %d: %w", i, err))
			}
			continue
		}
		msgs[i] = m
	}
	if bad > 5 {
		errs = append(errs, fmt.Errorf("batch: %d more chunks are invalid", bad-5))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return msgs, nil
}

// delayOf returns how long after now m is to run: its Delay, or its
// NotBefore.
func delayOf(m producer.Message, now time.Time) time.Duration {
	if !m.NotBefore.IsZero() {
		return m.NotBefore.Sub(now)
	}
	return m.Delay
}

func hasAttr(attrs map[string]sqsworker.MessageAttribute, name string) bool {
	_, ok := attrs[name]
	return ok
}

// completion returns the completion job of batch id.
func (c *Coordinator) completion(id, body string, attrs map[string]sqsworker.MessageAttribute, group string, fifo bool) producer.Message {
	a := make(map[string]sqsworker.MessageAttribute, len(attrs)+1)
	for k, v := range attrs {
		a[k] = v
	}
	a[AttrCompleted] = sqsworker.MessageAttribute{DataType: "String", StringValue: id}
	m := producer.Message{Body: body, IdempotencyKey: DoneKey(id), Attributes: a}
	if fifo {
		if group == "" {
			group = id
		}
		m.GroupID, m.DeduplicationID = group, digest(DoneKey(id))
	}
	return m
}

// digest returns a hex SHA-256 of s: 64 characters, within SQS's 128 for a
// deduplication ID.
func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// specHash returns a digest of what makes a batch: its queue, its chunks as
// sent, and its callback.
func specHash(s Spec, msgs []producer.Message) string {
	h := sha256.New()
	field := func(v string) {
		h.Write([]byte(strconv.Itoa(len(v))))
		h.Write([]byte{':'})
		h.Write([]byte(v))
	}
	attrs := func(a map[string]sqsworker.MessageAttribute) {
		keys := make([]string, 0, len(a))
		for k := range a {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		field(strconv.Itoa(len(keys)))
		for _, k := range keys {
			field(k)
			field(a[k].DataType)
			field(a[k].StringValue)
			field(string(a[k].BinaryValue))
		}
	}
	field(s.QueueURL)
	field(strconv.Itoa(len(msgs)))
	for _, m := range msgs {
		field(m.Body)
		field(m.GroupID)
		field(m.DeduplicationID)
		field(m.Delay.String())
		attrs(m.Attributes)
	}
	field(s.Callback.QueueURL)
	field(s.Callback.Body)
	field(s.Callback.GroupID)
	attrs(s.Callback.Attributes)
	return hex.EncodeToString(h.Sum(nil))
}

// queueAttributesAPI is the optional part of the SQS client that Create
// calls to check the queues before it records a batch, and that reads the
// redrive policy of a chunks' queue (see lastReceive).
type queueAttributesAPI interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// checkQueues checks, before the batch is recorded, what only the queues can
// tell: that they exist, and that the chunks and the completion job fit
// their MaximumMessageSize. A batch recorded with a spec its queues refuse
// could never complete, and its ID could not be created again with the spec
// fixed. A client without GetQueueAttributes, or a read that fails for
// another reason (no permission, say), skips the check: the sends tell.
func (c *Coordinator) checkQueues(ctx context.Context, s Spec, msgs []producer.Message, completion producer.Message) error {
	api, ok := c.sqs.(queueAttributesAPI)
	if !ok {
		return nil
	}
	var errs []error
	check := func(what, field, url string, msgs []producer.Message) {
		out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: &url, AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameMaximumMessageSize},
		}, c.sqsOpts...)
		var missing *sqstypes.QueueDoesNotExist
		if errors.As(err, &missing) {
			errs = append(errs, fmt.Errorf("batch: %s queue %s does not exist: check %s", what, url, field))
			return
		}
		if err != nil {
			return
		}
		limit, err := strconv.Atoi(out.Attributes[string(sqstypes.QueueAttributeNameMaximumMessageSize)])
		if err != nil || limit <= 0 {
			return
		}
		bad := 0
		for i, m := range msgs {
			if n := producer.Size(m); n > limit {
				if bad++; bad <= 5 {
					name := "the completion job"
					if what == "chunks'" {
						name = "chunk " + strconv.Itoa(i)
					}
					errs = append(errs, fmt.Errorf("batch: %s is %d bytes, over the MaximumMessageSize of %s (%d): keep large data elsewhere (such as S3) and send a reference to it, or raise the queue's MaximumMessageSize", name, n, url, limit))
				}
			}
		}
		if bad > 5 {
			errs = append(errs, fmt.Errorf("batch: %d more chunks are over the MaximumMessageSize of %s", bad-5, url))
		}
	}
	check("chunks'", "Spec.QueueURL", s.QueueURL, msgs)
	check("completion", "Spec.Callback.QueueURL", s.Callback.QueueURL, []producer.Message{completion})
	return errors.Join(errs...)
}

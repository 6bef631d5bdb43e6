package batch

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker/dlq"
)

// Progress is the state of a batch.
type Progress struct {
	ID string `json:"id"`
	// Total is the number of chunks; Done those counted as succeeded;
	// Failed those recorded as failed for good and not succeeded since;
	// Pending the rest (queued, running, retrying, or dead-lettered
	// without the middleware knowing it was their last attempt).
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Pending int `json:"pending"`
	// Created is when the batch was recorded; Sent when Create had sent
	// every chunk (zero while it has not).
	Created time.Time `json:"created"`
	Sent    time.Time `json:"sent,omitzero"`
	// Completed is true once every chunk has succeeded; Notified is when
	// its completion job was sent (zero while it has not been), with its
	// message ID.
	Completed             bool      `json:"completed"`
	Notified              time.Time `json:"notified,omitzero"`
	NotificationMessageID string    `json:"notificationMessageId,omitempty"`
	// CallbackQueue is where the completion job goes.
	CallbackQueue string `json:"callbackQueue"`
	// Queue is the chunks' queue.
	Queue string `json:"queue"`
	// FailedChunks are the failed chunks the batch's item lists, by
	// index: at most MaxFailedIndexes of them, whatever Failed.
	FailedChunks []FailedChunk `json:"failedChunks,omitempty"`
	// FailedUnlisted is how many of the Failed chunks FailedChunks does
	// not list, because the batch's item lists at most MaxFailedIndexes:
	// counted exactly, but not named here. Their chunk items still hold
	// their errors, and DeadLetters finds them in the dead-letter queue.
	// Zero when every failed chunk is listed.
	FailedUnlisted int `json:"failedUnlisted,omitempty"`
}

// FailedChunk is a chunk recorded as failed.
type FailedChunk struct {
	Index int `json:"index"`
	// Error and ErrorClass are the last error's text and class
	// (sqsworker.ErrorClass), as in the dead-letter metadata.
	Error      string    `json:"error"`
	ErrorClass string    `json:"errorClass"`
	Attempts   int       `json:"attempts"`
	FailedAt   time.Time `json:"failedAt"`
}

// Get returns the progress of batch id, with the failed chunks its item
// lists (at most MaxFailedIndexes; FailedUnlisted counts the others), from
// strongly consistent reads. A batch the table does not hold is an
// *UnknownBatchError.
func (c *Coordinator) Get(ctx context.Context, id string) (*Progress, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	out, err := c.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &c.cfg.Table, Key: c.batchKey(id), ConsistentRead: aws.Bool(true),
	}, c.dbOpts...)
	if err != nil {
		return nil, c.dynamoErr(fmt.Sprintf("reading batch %q", id), err)
	}
	it := out.Item
	if it == nil || getStr(it, aKind) != "batch" {
		return nil, &UnknownBatchError{ID: id, Table: c.cfg.Table}
	}
	p := &Progress{
		ID: id, Total: int(getNum(it, aTotal)), Done: int(getNum(it, aDone)), Failed: int(getNum(it, aFailed)),
		Created: time.UnixMilli(getNum(it, aCreated)), CallbackQueue: getStr(it, aCbQueue), Queue: getStr(it, aQueue),
		NotificationMessageID: getStr(it, aNotifyID),
	}
	p.Pending = p.Total - p.Done - p.Failed
	p.Completed = p.Total > 0 && p.Done >= p.Total
	if _, ok := it[aSent]; ok {
		p.Sent = time.UnixMilli(getNum(it, aSent))
	}
	if _, ok := it[aNotified]; ok {
		p.Notified = time.UnixMilli(getNum(it, aNotified))
	}
	failed := getNums(it, aFailedSet)
	slices.Sort(failed)
	// The counter is exact and the set bounded: failed chunks beyond the
	// set are counted, not listed. (A batch recorded before the bound may
	// list more: Get reads no more than the bound of them.)
	failed = failed[:min(len(failed), c.failedCap)]
	p.FailedUnlisted = max(p.Failed-len(failed), 0)
	for start := 0; start < len(failed); start += 100 {
		got, err := c.failedChunks(ctx, id, failed[start:min(start+100, len(failed))])
		if err != nil {
			return nil, err
		}
		p.FailedChunks = append(p.FailedChunks, got...)
	}
	slices.SortFunc(p.FailedChunks, func(a, b FailedChunk) int { return a.Index - b.Index })
	return p, nil
}

// failedChunks reads the chunk items of idx (at most 100).
func (c *Coordinator) failedChunks(ctx context.Context, id string, idx []int) ([]FailedChunk, error) {
	keys := make([]map[string]types.AttributeValue, len(idx))
	for j, i := range idx {
		keys[j] = c.chunkKey(id, i)
	}
	prefix := KeyPrefix + "#" + id + "#chunk#"
	var out []FailedChunk
	req := map[string]types.KeysAndAttributes{c.cfg.Table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	for attempt := 0; len(req) > 0; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, txBackoff(attempt)); err != nil {
				return nil, err
			}
		}
		res, err := c.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req}, c.dbOpts...)
		if err != nil {
			return nil, c.dynamoErr(fmt.Sprintf("reading the failed chunks of batch %q", id), err)
		}
		for _, it := range res.Responses[c.cfg.Table] {
			if getStr(it, aStatus) != StatusFailed {
				continue
			}
			i, err := strconv.Atoi(strings.TrimPrefix(getStr(it, c.cfg.KeyAttr), prefix))
			if err != nil {
				continue
			}
			out = append(out, FailedChunk{
				Index: i, Error: getStr(it, aError), ErrorClass: getStr(it, aClass),
				Attempts: int(getNum(it, aAttempts)), FailedAt: time.UnixMilli(getNum(it, aAt)),
			})
		}
		req = res.UnprocessedKeys
	}
	return out, nil
}

// DeadLetter is a chunk of a batch found in a dead-letter queue.
type DeadLetter struct {
	// Index is the chunk's index.
	Index int
	// Message is the dead-lettered message, with its failure metadata
	// (Message.Failure, when Message.HasFailure).
	*dlq.Message
}

// DeadLetters scans the dead-letter queue q (see dlq.Open and
// dlq.Queue.Scan: every message is received once, then released) for the
// chunks of batch id, and returns them by index, with the scan's result
// (its Coverage says whether every message was seen). It finds the chunks
// SQS dead-lettered after their last receive, which the middleware cannot
// tell from an ordinary failure unless Config.MaxReceiveCount is set. cfg
// bounds and paces the scan as for dlq.Queue.Scan; its Filter, if any,
// applies too.
func DeadLetters(ctx context.Context, q *dlq.Queue, id string, cfg dlq.ScanConfig) ([]DeadLetter, *dlq.ScanResult, error) {
	if err := CheckID(id); err != nil {
		return nil, nil, err
	}
	res, err := q.Scan(ctx, cfg)
	if err != nil {
		return nil, res, fmt.Errorf("batch: scanning %s for the chunks of batch %q: %w", q.Name, id, err)
	}
	var out []DeadLetter
	for _, m := range res.Messages {
		bid, i, ok := ParseChunk(&m.Message)
		if ok && bid == id {
			out = append(out, DeadLetter{Index: i, Message: m})
		}
	}
	slices.SortStableFunc(out, func(a, b DeadLetter) int { return a.Index - b.Index })
	return out, res, nil
}

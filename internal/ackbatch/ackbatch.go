// Package ackbatch groups the acknowledgements of one queue — deletes and
// visibility changes — into batch calls of up to ten entries, sends them
// concurrently, and retries what failed.
package ackbatch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/internal/awserr"
)

// API is the part of the SQS client the batcher calls.
type API interface {
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// MaxBatch is the most entries SQS takes in one batch call.
const MaxBatch = 10

// Kind says what an entry asks for.
type Kind uint8

// The kinds of acknowledgement.
const (
	Delete Kind = iota
	ChangeVisibility
)

func (k Kind) String() string {
	if k == Delete {
		return "delete"
	}
	return "change-visibility"
}

// Entry is one acknowledgement.
type Entry struct {
	ReceiptHandle string
	// MessageID is used only in errors and logs.
	MessageID string
	// Visibility is the new visibility timeout of a ChangeVisibility entry.
	Visibility time.Duration
	// Done, if set, is called once with the entry's final result.
	Done func(error)
}

// Config configures a Batcher.
type Config struct {
	QueueURL string
	// Interval is the longest an entry waits for its batch to fill.
	// Default 100ms.
	Interval time.Duration
	// MaxInFlight bounds the batch calls under way at once. Default 8.
	MaxInFlight int
	// MaxAttempts bounds the calls made for one entry. Default 8, spanning about 11s of backoff.
	MaxAttempts int
	// Timeout bounds each call. Default 10s.
	Timeout time.Duration
	// Result, if set, is called once per entry with its final result.
	Result func(Kind, Entry, error)
}

// Batcher collects entries and sends them in batches. Its methods are safe for
// concurrent use. Close sends what is pending and waits for calls under way.
type Batcher struct {
	api API
	cfg Config
	sem chan struct{}
	wg  sync.WaitGroup

	mu      sync.Mutex
	pending [2][]Entry
	timer   [2]*time.Timer
	closed  bool
	// stop is cancelled by Close when its context ends: calls still under
	// way give up.
	stop     context.Context
	stopCall context.CancelCauseFunc
}

// New returns a Batcher for one queue.
func New(api API, cfg Config) *Batcher {
	if cfg.Interval <= 0 {
		cfg.Interval = 100 * time.Millisecond
	}
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 8
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	b := &Batcher{api: api, cfg: cfg, sem: make(chan struct{}, cfg.MaxInFlight)}
	b.stop, b.stopCall = context.WithCancelCause(context.Background())
	return b
}

// ErrClosed is the result of entries added after Close.
var ErrClosed = errors.New("ackbatch: batcher closed")

// maxVisibility is the longest visibility timeout SQS takes: 12 hours.
const maxVisibility = 12 * time.Hour

// Add queues an entry of the given kind. A ChangeVisibility entry whose
// Visibility is outside 0..12h fails at once, alone: SQS would refuse the
// whole call, and with it the entries batched with it.
func (b *Batcher) Add(kind Kind, e Entry) {
	if kind == ChangeVisibility && (e.Visibility < 0 || e.Visibility > maxVisibility) {
		b.finish(kind, e, fmt.Errorf("%s of message %s: visibility timeout %s is outside 0..12h", kind, e.MessageID, e.Visibility))
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		b.finish(kind, e, ErrClosed)
		return
	}
	if b.pending[kind] == nil {
		b.pending[kind] = make([]Entry, 0, MaxBatch)
	}
	b.pending[kind] = append(b.pending[kind], e)
	switch n := len(b.pending[kind]); {
	case n >= MaxBatch:
		b.flushLocked(kind)
	case n == 1:
		b.timer[kind] = time.AfterFunc(b.cfg.Interval, func() { b.Flush(kind) })
	}
	b.mu.Unlock()
}

// Flush sends the pending entries of kind now.
func (b *Batcher) Flush(kind Kind) {
	b.mu.Lock()
	b.flushLocked(kind)
	b.mu.Unlock()
}

func (b *Batcher) flushLocked(kind Kind) {
	if t := b.timer[kind]; t != nil {
		t.Stop()
		b.timer[kind] = nil
	}
	for len(b.pending[kind]) > 0 {
		n := min(len(b.pending[kind]), MaxBatch)
		batch := b.pending[kind][:n:n]
		b.pending[kind] = b.pending[kind][n:]
		b.wg.Go(func() { b.send(kind, batch) })
	}
	b.pending[kind] = nil
}

// Close sends the pending entries and waits until every call under way has
// finished, or ctx ends; then it cancels the calls under way and their
// retries, makes no new call, and returns once the entries not sent are
// reported failed (the SDK's calls return as soon as their context is
// cancelled). Entries added after Close fail with ErrClosed.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.flushLocked(Delete)
	b.flushLocked(ChangeVisibility)
	b.mu.Unlock()
	done := make(chan struct{})
	go func() { b.wg.Wait(); close(done) }()
	select {
	case <-done:
		b.stopCall(nil)
		return nil
	case <-ctx.Done():
		b.stopCall(fmt.Errorf("%w: %w", errStopped, context.Cause(ctx)))
		<-done
		return fmt.Errorf("ackbatch: flushing: %w", context.Cause(ctx))
	}
}

// send makes the batch call for entries, retrying the failed ones with
// backoff, each reported with the error of its own last attempt.
func (b *Batcher) send(kind Kind, entries []Entry) {
	select {
	case b.sem <- struct{}{}:
		defer func() { <-b.sem }()
	case <-b.stop.Done():
	}
	if b.stop.Err() != nil { // Close's deadline passed while this waited
		b.giveUp(kind, entries, nil, 0, context.Cause(b.stop))
		return
	}
	backoff := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		retry, errs := b.call(kind, entries)
		if len(retry) == 0 {
			return
		}
		if attempt >= b.cfg.MaxAttempts || b.stop.Err() != nil {
			b.giveUp(kind, retry, errs, attempt, nil)
			return
		}
		entries = retry
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-b.stop.Done():
			t.Stop()
			b.giveUp(kind, retry, errs, attempt, nil)
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// errStopped is the cause of the calls cancelled when Close's context ends.
var errStopped = errors.New("ackbatch: closing: deadline passed")

// giveUp reports entries failed after attempts calls, each with its own
// error errs[i], or with err for all.
func (b *Batcher) giveUp(kind Kind, entries []Entry, errs []error, attempts int, err error) {
	for i, e := range entries {
		if errs != nil {
			err = errs[i]
		}
		if attempts == 0 {
			b.finish(kind, e, fmt.Errorf("%s of message %s: not sent: %w", kind, e.MessageID, err))
			continue
		}
		b.finish(kind, e, fmt.Errorf("%s of message %s: gave up after %d attempts: %w", kind, e.MessageID, attempts, err))
	}
}

// entryError is the error of one failed entry of a batch call.
type entryError struct {
	Code, Message string
}

func (e *entryError) Error() string { return e.Code + ": " + e.Message }

// ids are the entry IDs of a batch call: the entries' indexes.
var ids = [MaxBatch]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// call makes one batch call. It reports the entries that succeeded or failed
// for good, and returns the others, worth another try, with their errors.
func (b *Batcher) call(kind Kind, entries []Entry) (retry []Entry, errs []error) {
	ctx, cancel := context.WithTimeout(b.stop, b.cfg.Timeout)
	defer cancel()
	var failed []types.BatchResultErrorEntry
	var err error
	switch kind {
	case Delete:
		in := &sqs.DeleteMessageBatchInput{QueueUrl: &b.cfg.QueueURL, Entries: make([]types.DeleteMessageBatchRequestEntry, len(entries))}
		for i := range entries {
			in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: &ids[i], ReceiptHandle: &entries[i].ReceiptHandle}
		}
		var out *sqs.DeleteMessageBatchOutput
		if out, err = b.api.DeleteMessageBatch(ctx, in); err == nil {
			failed = out.Failed
		}
	case ChangeVisibility:
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &b.cfg.QueueURL, Entries: make([]types.ChangeMessageVisibilityBatchRequestEntry, len(entries))}
		for i := range entries {
			in.Entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id:                &ids[i],
				ReceiptHandle:     &entries[i].ReceiptHandle,
				VisibilityTimeout: int32(entries[i].Visibility / time.Second),
			}
		}
		var out *sqs.ChangeMessageVisibilityBatchOutput
		if out, err = b.api.ChangeMessageVisibilityBatch(ctx, in); err == nil {
			failed = out.Failed
		}
	}
	if err != nil {
		if awserr.IsFatal(err) {
			for _, e := range entries {
				b.finish(kind, e, fmt.Errorf("%s of message %s: %w", kind, e.MessageID, err))
			}
			return nil, nil
		}
		errs = make([]error, len(entries))
		for i := range errs {
			errs[i] = err
		}
		return entries, errs
	}
	var byID [MaxBatch]*types.BatchResultErrorEntry
	for i := range failed {
		if n, convErr := strconv.Atoi(aws.ToString(failed[i].Id)); convErr == nil && n >= 0 && n < len(entries) {
			byID[n] = &failed[i]
		}
	}
	for i, e := range entries {
		f := byID[i]
		switch {
		case f == nil:
			b.finish(kind, e, nil)
		case f.SenderFault:
			b.finish(kind, e, fmt.Errorf("%s of message %s: %w", kind, e.MessageID,
				&entryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}))
		default:
			retry = append(retry, e)
			errs = append(errs, &entryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)})
		}
	}
	return retry, errs
}

func (b *Batcher) finish(kind Kind, e Entry, err error) {
	if e.Done != nil {
		e.Done(err)
	}
	if b.cfg.Result != nil {
		b.cfg.Result(kind, e, err)
	}
}

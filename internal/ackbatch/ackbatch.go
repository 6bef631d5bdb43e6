// Package ackbatch groups the acknowledgements of one queue — deletes and
// visibility changes — into batch calls of up to ten entries, sends them
// concurrently, and retries what failed.
//
// An entry that failed in a way a retry may fix (the network, throttling, a
// server fault, an entry SQS failed on its side) waits out a jittered
// exponential backoff, then is sent again, batched with the other entries
// due then: the entries of one failed call stay together, and retries fill
// the batches of new entries. An entry with an [Owner] is retried for as long
// as its receipt handle may still work, however long SQS stays out of reach;
// the others at most [Config.MaxAttempts] times. A delete is sent at least
// once, even when its owner takes the receipt handle for expired (see
// [Owner]); a visibility change is not.
package ackbatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

// The backoff between the calls of an entry: FirstBackoff after its first
// attempt, doubling after each further one up to MaxBackoff, of which a
// random part, up to half, is left out (jitter), so that batchers retrying
// together spread their calls.
const (
	FirstBackoff = 100 * time.Millisecond
	MaxBackoff   = 5 * time.Second
)

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
	// Owner, if set, holds the entry's message: see Owner.
	//
	// Without an Owner an entry is sent at most Config.MaxAttempts times.
	// Either way, failures no retry fixes (sender faults such as an
	// invalid receipt handle, denied access, a missing queue) finish the
	// entry at once, and Close's context bounds every retry.
	Owner Owner
}

// Owner holds the message of an entry: typically its lease. It is an
// interface rather than a pair of functions so that a runtime can pass the
// job it already has, at no allocation per message.
type Owner interface {
	// Valid reports whether the receipt handle may still work at now:
	// typically, whether the message's lease still holds. While it returns true, the
	// entry is retried after every failure a retry may fix (the network,
	// throttling, server faults, an entry SQS failed on its side), with
	// backoff, for as long as it takes: Config.MaxAttempts does not apply
	// to it. Once it returns false the entry is not sent again (it leaves
	// the batch it was to go in) and finishes with an error wrapping
	// ErrExpired. It is called before each call that would carry the
	// entry and after each failed one, from the batcher's goroutines,
	// without its lock held; it must be safe for concurrent use and quick.
	//
	// A Delete entry's first call goes without asking Valid: it is sent
	// once whatever its owner thinks of the lease, and only its retries
	// depend on Valid. A delete acknowledges a message that is done (its
	// handler succeeded, or its copy was sent), and the owner's view of
	// a lease can be short of SQS's: an extension SQS applied but whose
	// reply was lost or came late leaves the message held at SQS while
	// the owner takes the lease for lost. The delete then lands. Past
	// the lease, a FIFO queue refuses the receipt handle, expired; a
	// standard queue may still take it, even while another consumer
	// holds the message again (SQS lets an old receipt handle delete a
	// message there): either way harmless for a message that is done,
	// whose later run is that of a job done already. A ChangeVisibility entry is
	// never sent once Valid returns false, not even once: with the lease
	// gone, another consumer may hold the message, and the change would
	// show it, or hide it, under that consumer.
	Valid(now time.Time) bool
	// Acked is called once with the entry's final result.
	Acked(err error)
}

// Config configures a Batcher.
type Config struct {
	QueueURL string
	// Interval is the longest an entry waits for its batch to fill.
	// Default 100ms.
	Interval time.Duration
	// MaxInFlight bounds the batch calls under way at once. Default 8.
	MaxInFlight int
	// MaxAttempts bounds the calls made for one entry without an
	// Entry.Owner. Default 8, spanning about 6 to 11 s of backoff.
	MaxAttempts int
	// Timeout bounds each call. Default 10s.
	Timeout time.Duration
	// Result, if set, is called once per entry with its final result.
	Result func(Kind, Entry, error)
}

// Batcher collects entries and sends them in batches. Its methods are safe for
// concurrent use. Close sends what is pending, waits for the retries, and for
// the calls under way.
//
// Up to Config.MaxInFlight sender goroutines make the calls. They start as
// batches come, take the ready batches in turn, and stay until Close: a
// goroutine per call would start with a small stack and grow it in the
// SDK's deep call chain, every time.
type Batcher struct {
	api API
	cfg Config
	wg  sync.WaitGroup // the sender goroutines

	mu sync.Mutex
	// ready[head:] are the batches waiting for a sender; senders counts
	// the sender goroutines, idle those waiting on wake for a batch and not
	// yet woken; quit tells them to return.
	ready   []batch
	head    int
	senders int
	idle    int
	quit    bool
	wake    *sync.Cond
	// pending are the entries waiting for their batch to fill: new ones,
	// and retries that came due.
	pending [2][]item
	// free holds the arrays of batches sent, cleared, for new pending
	// entries: a steady flow of deletes allocates none.
	free  [][]item
	timer [2]*time.Timer // flushes pending after Interval, while armed
	armed [2]bool
	// retries are the entries waiting out their backoff; retryTimer moves
	// them to pending when the first comes due, at retryAt.
	retries    [2][]item
	retryTimer [2]*time.Timer
	retryAt    [2]time.Time
	retrySeq   [2]uint64 // of the latest retry timer; earlier ones do nothing
	// open counts the entries added and not yet finished.
	open   int
	closed bool
	// drained is closed once Close was called and no entry is open.
	drained chan struct{}
	// stopped is set when Close's context ends: no call is made after.
	stopped bool
	// stop is cancelled by Close, when its context ends with that
	// context's cause: calls still under way give up.
	stop     context.Context
	stopCall context.CancelCauseFunc
}

// batch is one call's worth of entries of one kind.
type batch struct {
	kind  Kind
	items []item
}

// item is an entry on its way, with its attempts so far.
type item struct {
	Entry
	attempts int
	err      error     // of the last attempt
	due      time.Time // of the next attempt, while waiting out a backoff
}

// New returns a Batcher for one queue. Close it: that also ends its
// goroutines.
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
	b := &Batcher{api: api, cfg: cfg}
	b.wake = sync.NewCond(&b.mu)
	b.stop, b.stopCall = context.WithCancelCause(context.Background())
	return b
}

// ErrClosed is the result of entries added after Close.
var ErrClosed = errors.New("ackbatch: batcher closed")

// ErrExpired is wrapped by the result of an entry whose Owner.Valid returned
// false before it could be sent successfully: its receipt handle can no
// longer work.
var ErrExpired = errors.New("ackbatch: receipt handle expired")

// errStopped is the cause of the calls cancelled when Close's context ends.
var errStopped = errors.New("ackbatch: closing: deadline passed")

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
	b.open++
	b.queueLocked(kind, item{Entry: e})
	b.mu.Unlock()
}

// queueLocked adds it to the pending entries of kind, and sends them when
// they fill a batch, or arranges for them to be sent after Interval. b.mu is
// held.
func (b *Batcher) queueLocked(kind Kind, it item) {
	if b.pending[kind] == nil {
		if n := len(b.free); n > 0 {
			b.pending[kind], b.free = b.free[n-1], b.free[:n-1]
		} else {
			b.pending[kind] = make([]item, 0, MaxBatch)
		}
	}
	b.pending[kind] = append(b.pending[kind], it)
	switch n := len(b.pending[kind]); {
	case n >= MaxBatch:
		b.flushLocked(kind)
	case n == 1:
		// One timer per kind, reset for each batch: a batch costs no
		// timer of its own. A fire that races with a flush flushes
		// the next batch early, which does no harm.
		if b.timer[kind] == nil {
			b.timer[kind] = time.AfterFunc(b.cfg.Interval, func() { b.Flush(kind) })
		} else {
			b.timer[kind].Reset(b.cfg.Interval)
		}
		b.armed[kind] = true
	}
}

// disarmLocked stops the flush timer of kind. b.mu is held.
func (b *Batcher) disarmLocked(kind Kind) {
	if b.armed[kind] {
		b.timer[kind].Stop()
		b.armed[kind] = false
	}
}

// Flush sends the pending entries of kind now. Entries waiting out a backoff
// keep waiting.
func (b *Batcher) Flush(kind Kind) {
	b.mu.Lock()
	b.flushLocked(kind)
	b.mu.Unlock()
}

// flushLocked sends the pending entries of kind in batches of up to
// MaxBatch. b.mu is held.
func (b *Batcher) flushLocked(kind Kind) {
	b.disarmLocked(kind)
	if b.stopped {
		return // Close finishes what is pending
	}
	for len(b.pending[kind]) > 0 {
		n := min(len(b.pending[kind]), MaxBatch)
		b.readyLocked(kind, b.pending[kind][:n:n])
		b.pending[kind] = b.pending[kind][n:]
	}
	b.pending[kind] = nil
}

// readyLocked hands a batch to the senders: an idle one, or a new one while
// there are fewer than MaxInFlight; otherwise a busy one takes it when its
// call returns. b.mu is held.
func (b *Batcher) readyLocked(kind Kind, items []item) {
	if b.head > 0 && len(b.ready) == cap(b.ready) {
		// Move the waiting batches to the front rather than grow the
		// array: senders that never quite catch up would otherwise grow
		// it with every batch sent.
		n := copy(b.ready, b.ready[b.head:])
		clear(b.ready[n:])
		b.ready, b.head = b.ready[:n], 0
	}
	b.ready = append(b.ready, batch{kind, items})
	switch {
	case b.idle > 0:
		// The sender counts as busy from now: a second batch ready
		// before it runs wakes or starts another.
		b.idle--
		b.wake.Signal()
	case b.senders < b.cfg.MaxInFlight:
		b.senders++
		b.wg.Go(b.sender)
	}
}

// sender makes calls for the ready batches, one at a time, until Close tells
// it to return.
func (b *Batcher) sender() {
	b.mu.Lock()
	for {
		for b.head == len(b.ready) && !b.quit {
			b.idle++ // until a batch or quit wakes it
			b.wake.Wait()
		}
		if b.head == len(b.ready) { // and quit
			b.senders--
			b.mu.Unlock()
			return
		}
		next := b.ready[b.head]
		b.ready[b.head] = batch{}
		if b.head++; b.head == len(b.ready) { // all taken: start the array over
			b.ready, b.head = b.ready[:0], 0
		}
		b.mu.Unlock()
		b.send(next.kind, next.items)
		b.mu.Lock()
		b.recycleLocked(next.items)
	}
}

// recycleLocked keeps the array of a batch that was sent for new pending
// entries, unless enough are kept. Nothing refers to it once send has
// returned: retries were copied out of it. b.mu is held.
func (b *Batcher) recycleLocked(items []item) {
	if cap(items) != MaxBatch || len(b.free) > b.cfg.MaxInFlight {
		return
	}
	items = items[:MaxBatch]
	clear(items) // drop the owners and errors it refers to
	b.free = append(b.free, items[:0])
}

// stopSenders tells the senders to return once the ready batches are sent,
// and waits for them.
func (b *Batcher) stopSenders() {
	b.mu.Lock()
	b.quit = true
	b.idle = 0
	b.wake.Broadcast()
	b.mu.Unlock()
	b.wg.Wait()
}

// Close sends the pending entries and waits until every entry has finished:
// sent, failed for good, or, with an Entry.Owner, expired. When ctx ends first
// it cancels the calls under way, makes no other call, reports every entry
// not done failed, and returns the context's cause once the calls under way
// have returned (the SDK's calls return as soon as their context is
// cancelled). Entries added after Close fail with ErrClosed.
func (b *Batcher) Close(ctx context.Context) error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		b.drained = make(chan struct{})
		if b.open == 0 {
			close(b.drained)
		}
	}
	b.flushLocked(Delete)
	b.flushLocked(ChangeVisibility)
	drained := b.drained
	b.mu.Unlock()
	select {
	case <-drained:
		b.stopSenders()
		b.stopCall(nil)
		return nil
	case <-ctx.Done():
		select {
		case <-drained: // both: nothing was lost
			b.stopSenders()
			b.stopCall(nil)
			return nil
		default:
		}
	}
	cause := fmt.Errorf("%w: %w", errStopped, context.Cause(ctx))
	b.stopCall(cause)
	b.mu.Lock()
	b.stopped = true
	var left [2][]item
	for kind := range left {
		for _, t := range []*time.Timer{b.timer[kind], b.retryTimer[kind]} {
			if t != nil {
				t.Stop()
			}
		}
		b.armed[kind], b.retryTimer[kind] = false, nil
		left[kind] = append(b.pending[kind], b.retries[kind]...)
		b.pending[kind], b.retries[kind] = nil, nil
	}
	for _, r := range b.ready[b.head:] { // not yet taken by a sender
		left[r.kind] = append(left[r.kind], r.items...)
	}
	b.ready, b.head = nil, 0
	b.mu.Unlock()
	for kind, items := range left {
		b.giveUp(Kind(kind), items, cause)
	}
	b.stopSenders()
	return fmt.Errorf("ackbatch: flushing: %w", context.Cause(ctx))
}

// send makes one batch call for items, and hands what failed, worth another
// try, to retry.
func (b *Batcher) send(kind Kind, items []item) {
	if b.stop.Err() != nil { // Close's deadline passed while this waited
		b.giveUp(kind, items, context.Cause(b.stop))
		return
	}
	items = b.dropExpired(kind, items)
	if len(items) == 0 {
		return
	}
	if retry := b.call(kind, items); len(retry) > 0 {
		b.retry(kind, retry)
	}
}

// dropExpired finishes the items whose Valid returns false, and returns the
// others. A Delete item's first call goes without asking (see Owner.Valid).
func (b *Batcher) dropExpired(kind Kind, items []item) []item {
	keep := items[:0]
	now := time.Now() // one reading of the clock for the batch
	for _, it := range items {
		if it.Owner != nil && (kind != Delete || it.attempts > 0) && !it.Owner.Valid(now) {
			b.expire(kind, it)
			continue
		}
		keep = append(keep, it)
	}
	return keep
}

// expire finishes an item whose receipt handle can no longer work.
func (b *Batcher) expire(kind Kind, it item) {
	if it.attempts == 0 {
		b.done(kind, it, fmt.Errorf("%s of message %s: not sent: %w", kind, it.MessageID, ErrExpired))
		return
	}
	b.done(kind, it, fmt.Errorf("%s of message %s: %w after %d attempts: %w", kind, it.MessageID, ErrExpired, it.attempts, it.err))
}

// retry schedules the next attempt of items, which failed together: each
// waits its backoff, shortened by the same random part for all, so that
// those of one attempt stay together. Items out of attempts or expired
// finish instead.
func (b *Batcher) retry(kind Kind, items []item) {
	now := time.Now()
	jitter := rand.Float64()
	again := items[:0]
	var first time.Time
	for _, it := range items {
		switch {
		case it.Owner == nil && it.attempts >= b.cfg.MaxAttempts:
			b.done(kind, it, fmt.Errorf("%s of message %s: gave up after %d attempts: %w", kind, it.MessageID, it.attempts, it.err))
		case it.Owner != nil && !it.Owner.Valid(now):
			b.expire(kind, it)
		default:
			it.due = now.Add(backoff(it.attempts, jitter))
			if first.IsZero() || it.due.Before(first) {
				first = it.due
			}
			again = append(again, it)
		}
	}
	if len(again) == 0 {
		return
	}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		b.giveUp(kind, again, context.Cause(b.stop))
		return
	}
	b.retries[kind] = append(b.retries[kind], again...)
	b.scheduleLocked(kind, first)
	b.mu.Unlock()
}

// backoff is the wait after attempts failed attempts: FirstBackoff doubling
// up to MaxBackoff, less up to half of it, by jitter in [0, 1).
func backoff(attempts int, jitter float64) time.Duration {
	d := MaxBackoff
	if attempts <= 6 { // 100ms << 6 is past MaxBackoff
		d = min(FirstBackoff<<max(attempts-1, 0), MaxBackoff)
	}
	return d - time.Duration(jitter*float64(d/2))
}

// scheduleLocked makes the retry timer of kind fire by due. b.mu is held.
func (b *Batcher) scheduleLocked(kind Kind, due time.Time) {
	if b.retryTimer[kind] != nil {
		if !due.Before(b.retryAt[kind]) {
			return
		}
		b.retryTimer[kind].Stop()
	}
	b.retryAt[kind] = due
	b.retrySeq[kind]++
	seq := b.retrySeq[kind]
	b.retryTimer[kind] = time.AfterFunc(time.Until(due), func() { b.retryDue(kind, seq) })
}

// retryDue sends the retries of kind that are due, or will be within
// Interval, with the pending entries, in as few batches as first fit makes
// without splitting the entries that failed together (see pack).
func (b *Batcher) retryDue(kind Kind, seq uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped || seq != b.retrySeq[kind] {
		return // stopped, or replaced by an earlier timer
	}
	b.retryTimer[kind] = nil
	horizon := time.Now().Add(b.cfg.Interval)
	var next time.Time
	var due []item
	waiting := b.retries[kind][:0]
	for _, it := range b.retries[kind] {
		if it.due.After(horizon) {
			waiting = append(waiting, it)
			if next.IsZero() || it.due.Before(next) {
				next = it.due
			}
			continue
		}
		due = append(due, it)
	}
	clear(b.retries[kind][len(waiting):])
	b.retries[kind] = waiting
	b.disarmLocked(kind)
	for _, items := range pack(b.pending[kind], due) {
		b.readyLocked(kind, items)
	}
	b.pending[kind] = nil
	if !next.IsZero() {
		b.scheduleLocked(kind, next)
	}
}

// pack puts pending entries (fewer than MaxBatch) and due retries into
// batches. The retries that failed together, and so share a due time and
// stand next to each other, form a group that pack does not split: an
// outage does not fragment batches, and groups that meet merge for good.
// The groups go, largest first, into the first batch with room.
func pack(pending, due []item) [][]item {
	var groups [][]item
	for i := 0; i < len(due); {
		j := i + 1
		for j < len(due) && j-i < MaxBatch && due[j].due.Equal(due[i].due) {
			j++
		}
		groups = append(groups, due[i:j])
		i = j
	}
	slices.SortStableFunc(groups, func(a, b []item) int { return len(b) - len(a) })
	var batches [][]item
	if len(pending) > 0 {
		batches = append(batches, append(make([]item, 0, MaxBatch), pending...))
	}
next:
	for _, g := range groups {
		for k := range batches {
			if len(batches[k])+len(g) <= MaxBatch {
				batches[k] = append(batches[k], g...)
				continue next
			}
		}
		batches = append(batches, append(make([]item, 0, MaxBatch), g...))
	}
	return batches
}

// giveUp finishes items that will not be sent again because Close's context
// ended: with the error of their last attempt, or cause when not sent.
func (b *Batcher) giveUp(kind Kind, items []item, cause error) {
	for _, it := range items {
		if it.attempts == 0 {
			b.done(kind, it, fmt.Errorf("%s of message %s: not sent: %w", kind, it.MessageID, cause))
			continue
		}
		b.done(kind, it, fmt.Errorf("%s of message %s: gave up after %d attempts: %w: %w", kind, it.MessageID, it.attempts, cause, it.err))
	}
}

// errUnanswered is the error of an entry that the answer to its batch call
// lists neither as successful nor as failed.
var errUnanswered = errors.New("the answer lists the entry neither as successful nor as failed")

// entryIndex is the index of the entry whose ID is id, and whether id names
// one.
func entryIndex(id *string) (int, bool) {
	n, err := strconv.Atoi(aws.ToString(id))
	return n, err == nil && n >= 0 && n < MaxBatch
}

// markID sets the flag of the entry id names, if it names one.
func markID(flags *[MaxBatch]bool, id *string) {
	if n, ok := entryIndex(id); ok {
		flags[n] = true
	}
}

// entryError is the error of one failed entry of a batch call.
type entryError struct {
	Code, Message string
}

func (e *entryError) Error() string { return e.Code + ": " + e.Message }

// ids are the entry IDs of a batch call: the entries' indexes.
var ids = [MaxBatch]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// call makes one batch call. It finishes the items that succeeded or failed
// for good, and returns the others, worth another try, with their attempts
// and errors updated.
func (b *Batcher) call(kind Kind, items []item) (retry []item) {
	ctx, cancel := context.WithTimeout(b.stop, b.cfg.Timeout)
	defer cancel()
	var failed []types.BatchResultErrorEntry
	var answered [MaxBatch]bool // the entries the answer lists as successful
	var err error
	switch kind {
	case Delete:
		in := &sqs.DeleteMessageBatchInput{QueueUrl: &b.cfg.QueueURL, Entries: make([]types.DeleteMessageBatchRequestEntry, len(items))}
		for i := range items {
			in.Entries[i] = types.DeleteMessageBatchRequestEntry{Id: &ids[i], ReceiptHandle: &items[i].ReceiptHandle}
		}
		var out *sqs.DeleteMessageBatchOutput
		if out, err = b.api.DeleteMessageBatch(ctx, in); err == nil {
			failed = out.Failed
			for i := range out.Successful {
				markID(&answered, out.Successful[i].Id)
			}
		}
	case ChangeVisibility:
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &b.cfg.QueueURL, Entries: make([]types.ChangeMessageVisibilityBatchRequestEntry, len(items))}
		for i := range items {
			in.Entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
				Id:                &ids[i],
				ReceiptHandle:     &items[i].ReceiptHandle,
				VisibilityTimeout: int32(items[i].Visibility / time.Second),
			}
		}
		var out *sqs.ChangeMessageVisibilityBatchOutput
		if out, err = b.api.ChangeMessageVisibilityBatch(ctx, in); err == nil {
			failed = out.Failed
			for i := range out.Successful {
				markID(&answered, out.Successful[i].Id)
			}
		}
	}
	for i := range items {
		items[i].attempts++
	}
	if err != nil {
		if awserr.IsFatal(err) {
			for _, it := range items {
				b.done(kind, it, fmt.Errorf("%s of message %s: %w", kind, it.MessageID, err))
			}
			return nil
		}
		for i := range items {
			items[i].err = err
		}
		return items
	}
	var byID [MaxBatch]*types.BatchResultErrorEntry
	for i := range failed {
		if n, ok := entryIndex(failed[i].Id); ok {
			byID[n] = &failed[i]
		}
	}
	succeeded := 0
	for i, it := range items {
		f := byID[i]
		switch {
		case f == nil && answered[i]:
			b.finish(kind, it.Entry, nil)
			succeeded++
		case f == nil:
			// In neither list of the answer (SQS lists every entry in
			// one): not known to be applied. Sent again, as a failed
			// call's entries are; deleting a message twice, or setting its
			// visibility timeout twice, does no harm.
			it.err = errUnanswered
			retry = append(retry, it)
		case f.SenderFault:
			b.done(kind, it, fmt.Errorf("%s of message %s: %w", kind, it.MessageID,
				&entryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}))
		default:
			it.err = &entryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message)}
			retry = append(retry, it)
		}
	}
	b.doneN(succeeded)
	return retry
}

// done finishes an added entry, and lets Close return once none is left.
func (b *Batcher) done(kind Kind, it item, err error) {
	b.finish(kind, it.Entry, err)
	b.doneN(1)
}

// doneN counts n added entries finished (by finish), under one lock for a
// whole batch, and lets Close return once none is left.
func (b *Batcher) doneN(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	if b.open -= n; b.open == 0 && b.closed {
		close(b.drained)
	}
	b.mu.Unlock()
}

func (b *Batcher) finish(kind Kind, e Entry, err error) {
	if e.Owner != nil {
		e.Owner.Acked(err)
	}
	if b.cfg.Result != nil {
		b.cfg.Result(kind, e, err)
	}
}

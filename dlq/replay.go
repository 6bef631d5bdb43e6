package dlq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// moveTimeout bounds the send and the delete of one message, which run to
// their end even when the replay is interrupted.
const moveTimeout = 30 * time.Second

// ReplayConfig is what [Queue.Replay] and [Queue.Plan] move. The zero value
// moves every message back to its source queue, as fast as SQS takes them.
type ReplayConfig struct {
	// Filter selects the messages to move. Default: every message.
	Filter Filter
	// To is the queue (name, URL or ARN) every message is sent to. Default
	// "": each message goes back to its source queue, which must send its
	// dead letters to this queue: the queue SQS's redrive moved it from
	// (DeadLetterQueueSourceArn, set by SQS), else the one its failure
	// metadata names, checked against the sources [Open] found (or, where
	// they are unknown, against that queue's own redrive policy). A message
	// whose source does not pass stays, and is listed in
	// ReplayResult.Stayed.
	To string
	// Limit moves at most this many messages. Default 0: no limit.
	Limit int
	// PerSecond moves at most this many messages per second. Default 0: no
	// limit.
	PerSecond float64
	// Visibility is the visibility timeout of the messages while the
	// replay holds them (whole seconds, 1s to 12h). Default
	// [DefaultVisibility]. Those that stay are made visible again at once
	// when the replay ends.
	Visibility time.Duration
	// Audit records each message before it is copied and once it is moved
	// (not in a dry run).
	Audit Audit
	// Progress, when set, is called after each message read.
	Progress func(Progress)
}

// Progress is how far a replay has come: the messages read, those that
// matched and have a destination, and those moved.
type Progress struct {
	// Scanned is the number of messages read.
	Scanned int
	// Matched is the number of those that passed the filter and have a
	// destination.
	Matched int
	// Moved is the number of those moved.
	Moved int
}

// ReplayResult is what a replay did, or in a dry run would do.
type ReplayResult struct {
	// DryRun is true for [Queue.Plan].
	DryRun bool `json:"dryRun"`
	// DLQ is the dead-letter queue's URL.
	DLQ string `json:"dlq"`
	// Filter describes the filter, and the limit.
	Filter string `json:"filter"`
	// Scanned is the number of messages read.
	Scanned int `json:"scanned"`
	// Matched is the number of messages that passed the filter and have a
	// destination: moved, or in a dry run to be moved.
	Matched int `json:"matched"`
	// Moved is the number of messages copied and deleted from the
	// dead-letter queue.
	Moved int `json:"moved"`
	// NoSource counts matching messages that stay because nothing names
	// their source queue (no failure metadata, not moved by SQS's redrive):
	// give ReplayConfig.To.
	NoSource int `json:"noSource,omitempty"`
	// Refused counts matching messages that stay because the source queue
	// they name does not send its dead letters to this queue (or does not
	// exist): see Stayed.
	Refused int `json:"refused,omitempty"`
	// OtherSource counts matching messages that stay because To is one of
	// the source queues of this dead-letter queue and they failed in
	// another one (a dead-letter queue shared by several sources): sent to
	// To, they would run under a handler that is not theirs. See Stayed;
	// a replay without To sends each back to its own source.
	OtherSource int `json:"otherSource,omitempty"`
	// Unsent counts matching messages that stay because SQS refused their
	// copy as invalid, even without what a copy adds (larger than the
	// destination's MaximumMessageSize, say): see Stayed. The replay goes
	// on with the others.
	Unsent int `json:"unsent,omitempty"`
	// NotDeleted counts messages copied whose original could not be
	// deleted: they are in both queues.
	NotDeleted int `json:"notDeleted,omitempty"`
	// Expired counts matching messages that stay, not copied, because
	// their visibility timeout ran out before their turn came (a
	// destination slow to answer, a low PerSecond) and SQS would not hide
	// them again: another reader may have received them. See Stayed; a
	// later replay moves them.
	Expired int `json:"expired,omitempty"`
	// FailedAgain counts copies this replay sent that failed again and came
	// back while it ran: they are not replayed twice.
	FailedAgain int `json:"failedAgain,omitempty"`
	// Duplicates counts matching messages deleted (in a dry run, to be
	// deleted) without being replayed, as copies of a job this run
	// replayed (see [Message.DuplicateOf]): the job runs once. They are
	// listed in Dropped.
	Duplicates int `json:"duplicates,omitempty"`
	// LimitHit is true when the replay stopped at ReplayConfig.Limit.
	LimitHit bool `json:"limitReached,omitempty"`
	// Interrupted is true when ctx ended the replay.
	Interrupted bool `json:"interrupted,omitempty"`
	// Coverage compares what the replay read with the queue's count.
	Coverage Coverage `json:"coverage"`
	// Unmatched counts the messages read that the filter left out, by the
	// error class of their failure ("" for those without one: moved by
	// SQS's redrive, or copied without metadata), up to MaxUnmatchedClasses
	// classes, the others under "…": what a filter that matches nothing
	// missed.
	Unmatched map[string]int `json:"unmatched,omitempty"`
	// Messages are the messages moved (or to be moved), ordered by
	// [SortMessages].
	Messages []ReplayedMessage `json:"messages"`
	// Stayed are the matching messages refused a destination, and why.
	Stayed []StayedMessage `json:"stayed,omitempty"`
	// Dropped are the duplicate copies of replayed jobs that the replay
	// deleted (in a dry run, would delete), and those whose delete failed
	// (their Note says so; they stay).
	Dropped []DroppedMessage `json:"dropped,omitempty"`
}

// DroppedMessage is a copy of a job a replay moved, deleted rather than
// replayed a second time.
type DroppedMessage struct {
	// MessageID is its ID in the dead-letter queue.
	MessageID string `json:"messageId"`
	// OriginalMessageID is its ID in the queue it failed in.
	OriginalMessageID string `json:"originalMessageId"`
	// DuplicateOf is the ID in the dead-letter queue of the copy that was
	// replayed.
	DuplicateOf string `json:"duplicateOf"`
	// Note says what went wrong: the delete failed, the copy stays.
	Note string `json:"note,omitempty"`
}

// ReplayedMessage is a message a replay moved, or would move.
type ReplayedMessage struct {
	// MessageID is its ID in the dead-letter queue.
	MessageID string `json:"messageId"`
	// OriginalMessageID is its ID in the queue it failed in.
	OriginalMessageID string `json:"originalMessageId"`
	// ErrorClass and FailedAt are from its failure metadata.
	ErrorClass string    `json:"errorClass"`
	FailedAt   time.Time `json:"failedAt,omitzero"`
	// GroupID is its message group: a FIFO queue's, or a fair queue's
	// tenant.
	GroupID string `json:"groupId,omitempty"`
	// Destination is the URL of the queue it was (or would be) sent to.
	Destination string `json:"destination"`
	// NewMessageID is the ID of its copy; empty in a dry run.
	NewMessageID string `json:"newMessageId,omitempty"`
	// Replays is the copy's replay count (0: no room for the attribute).
	Replays int `json:"replays"`
	// Note says what else happened: the failure metadata compacted, the
	// original not deleted.
	Note string `json:"note,omitempty"`

	msg *Message
}

// StayedMessage is a matching message that a replay left in the
// dead-letter queue for want of a destination it can trust.
type StayedMessage struct {
	// MessageID is its ID in the dead-letter queue.
	MessageID string `json:"messageId"`
	// OriginalMessageID is its ID in the queue it failed in.
	OriginalMessageID string `json:"originalMessageId"`
	// Reason says why it has no destination.
	Reason string `json:"reason"`
}

// Plan is a dry run of [Queue.Replay]: it reads the queue as the replay
// would and returns what would move where, moving nothing. The messages it
// read are made visible again at once when it ends.
func (q *Queue) Plan(ctx context.Context, cfg ReplayConfig) (*ReplayResult, error) {
	return q.replay(ctx, cfg, true)
}

// Replay moves the messages that pass cfg.Filter back to their source
// queue, or to cfg.To, and records each in cfg.Audit. For each message it
// records that it starts ([ActionReplayStart]), sends the copy, then
// deletes the original and records the move ([ActionReplay]): an
// interruption loses nothing, at worst a message is in both queues
// (counted in NotDeleted), and a crash between the send and the delete
// leaves its replay-start record.
// When ctx ends it stops between two messages and returns an error that
// matches [ErrInterrupted], with the result so far.
//
// The copy keeps the body, every message attribute (the failure metadata
// stays as history; the runtimes replace it if the message fails again)
// but sqsworker.AttrPriorAttempts, so that the replayed job starts from
// fresh attempts (SQS's own redrive and its move tasks keep the attribute
// a copy waiting for a long backoff carries; the runtimes' dead-letter
// copies have none), the X-Ray trace header and the message group (a FIFO
// queue's, or a fair queue's tenant); on FIFO queues, its deduplication ID
// is the original message ID and its replay count. It gets the Number attribute
// [AttrReplays]: 1, or one more than the message had.
// A message without an idempotency-key attribute and without failure
// metadata naming its original (one SQS's redrive moved, which keeps its
// ID) gets idempotency-key "message-id:" and its ID, the key the idempotency
// middleware's DefaultKey gave the job, so that a replay does not apply the
// job's effect again (the one SQS moved and the runtime's dead-letter copy
// of the same job, when the runtime stopped between that copy and its
// delete, run once); it goes without when it has no attribute to spare or
// SQS refuses the copy with it (the message's Note says so).
// SQS allows 10 attributes: when the message already has 10, its failure
// metadata is compacted into the one JSON attribute sqsworker.failure, and
// when even that leaves no room the copy goes without the count (the
// message's Note says which). A copy that SQS refuses as invalid (a
// message of the queue's largest size has no room for what its copy adds)
// is sent again without the count, then without the idempotency-key the
// replay added. A copy without the job's key to a standard queue is not
// sent again by the SDK after an attempt SQS may have applied (its answer
// lost): a second copy would run the job twice, with nothing to tell it
// from the first; the replay stops instead, saying that the copy may be
// there.
//
// On a FIFO queue a group is replayed in order, up to its first message
// that stays. A copy that fails again and comes back while the replay runs
// is not replayed a second time.
//
// A matching message that is a copy of the same job as one the run moved
// (see [Message.DuplicateOf]: the same original message ID, source queue,
// body and attributes, as the SDK's retry of a runtime's dead-letter send
// whose reply was lost leaves) is deleted instead of replayed, recorded in
// cfg.Audit as [ActionDropDuplicate], and counted in
// ReplayResult.Duplicates: the job runs once, and leaves no copy behind.
// Messages that differ in any of these are never taken for one job. Only
// the copies the run reads are known to it: one read in the same receive
// as the limit's last message goes too, but a run stopped by cfg.Limit (or
// ctx) reads no further, and a copy it did not read stays, as one whose job
// an earlier run moved does; a later replay sends it under the job's
// idempotency key, so that a handler keyed by it applies the job once.
func (q *Queue) Replay(ctx context.Context, cfg ReplayConfig) (*ReplayResult, error) {
	return q.replay(ctx, cfg, false)
}

// CheckPace returns an error when a replay at perSecond messages a second
// (0: no limit) would keep a message waiting for its turn longer than half
// of visibility, the least a message must have left to be moved: SQS would
// show it again before its move, and the replay would leave it. It names
// the least visibility timeout that rate needs.
func CheckPace(perSecond float64, visibility time.Duration) error {
	if perSecond <= 0 || perSecond*visibility.Seconds() >= 2 {
		return nil
	}
	need := time.Duration(math.Ceil(2/perSecond)) * time.Second
	return fmt.Errorf("rate %v with a visibility timeout of %s: each message would wait %s for its turn, longer than half its visibility timeout, and SQS would show it again before its move: give a visibility timeout of %s or more, or a higher rate",
		perSecond, visibility, time.Duration(float64(time.Second)/perSecond).Round(time.Millisecond), need)
}

func (q *Queue) replay(ctx context.Context, cfg ReplayConfig, dryRun bool) (*ReplayResult, error) {
	if cfg.Visibility == 0 {
		cfg.Visibility = DefaultVisibility
	}
	var errs []error
	if err := validateVisibility(cfg.Visibility); err != nil {
		errs = append(errs, err)
	}
	if cfg.Limit < 0 {
		errs = append(errs, fmt.Errorf("limit %d: want 0 (no limit) or more", cfg.Limit))
	}
	if math.IsNaN(cfg.PerSecond) || math.IsInf(cfg.PerSecond, 0) || cfg.PerSecond < 0 {
		errs = append(errs, fmt.Errorf("rate %v: want messages per second, more than 0 (or 0: no limit)", cfg.PerSecond))
	} else if err := CheckPace(cfg.PerSecond, cfg.Visibility); err != nil {
		errs = append(errs, err)
	}
	if err := cfg.Filter.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("dlq: Replay: %w", errors.Join(errs...))
	}
	r := &replayer{q: q, cfg: cfg, dryRun: dryRun, blocked: map[string]bool{}, sent: map[string]bool{}, replayed: map[string]string{}, lost: map[string]string{}}
	r.res.DryRun, r.res.DLQ, r.res.Filter = dryRun, q.URL, cfg.Filter.String()
	if cfg.Limit > 0 {
		r.res.Filter += fmt.Sprintf(" (limit %d)", cfg.Limit)
	}
	if cfg.To != "" {
		to, err := q.Target(ctx, cfg.To)
		if err != nil {
			return nil, fmt.Errorf("dlq: destination: %w", err)
		}
		r.to = &to
		// A destination that is one of the sources of a shared dead-letter
		// queue takes only that source's messages.
		_, reason, err := q.source(ctx, to.URL)
		if err != nil {
			return nil, fmt.Errorf("dlq: destination: %w", err)
		}
		r.toFeeds = reason == ""
	}
	batch := 10
	if cfg.PerSecond > 0 {
		r.pace = rate.NewLimiter(rate.Limit(cfg.PerSecond), 1)
		// Receive no more than can be moved in half the visibility timeout.
		batch = int(min(max(cfg.PerSecond*cfg.Visibility.Seconds()/2, 1), 10))
	}
	r.s = q.newScanner(ctx, cfg.Visibility)
	err := r.run(ctx, batch)
	if rerr := r.s.release(ctx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	r.res.Coverage = r.s.coverage()
	ms := make([]*Message, len(r.res.Messages))
	byMsg := make(map[*Message]ReplayedMessage, len(r.res.Messages))
	for i, m := range r.res.Messages {
		ms[i] = m.msg
		byMsg[m.msg] = m
	}
	SortMessages(ms)
	for i, m := range ms {
		r.res.Messages[i] = byMsg[m]
	}
	if r.res.Messages == nil {
		r.res.Messages = []ReplayedMessage{}
	}
	return &r.res, err
}

type replayer struct {
	q       *Queue
	cfg     ReplayConfig
	dryRun  bool
	to      *Target
	toFeeds bool          // to is a source queue of this dead-letter queue
	pace    *rate.Limiter // nil: no limit
	s       *scanner
	blocked map[string]bool // FIFO groups stopped at a message that stays
	sent    map[string]bool // IDs of the copies this run sent
	// batch is what is left of the receive under way, the message handled
	// first, and until when its messages are hidden at least (see secure).
	// lost holds those of it SQS would not hide again, with the error code:
	// cleared at each receive, so that it does not grow with the run.
	batch []types.Message
	until time.Time
	lost  map[string]string
	// replayed maps the identity (jobIdentity) of each job this run
	// moved (or, in a dry run, would move) to the ID of its message.
	replayed map[string]string
	res      ReplayResult
}

// run scans the dead-letter queue, moving (or, in a dry run, noting) the
// messages that match, until the queue has no more, the limit is reached,
// an error or an interruption.
func (r *replayer) run(ctx context.Context, batch int) error {
	for {
		if r.cfg.Limit > 0 && r.res.Matched >= r.cfg.Limit {
			r.res.LimitHit = true
			return nil
		}
		fresh, drained, err := r.s.receive(ctx, batch)
		if err != nil {
			if ctx.Err() != nil {
				return r.interrupted(ctx)
			}
			return err
		}
		if drained {
			r.s.complete = true
			return nil
		}
		// A receive's messages share its visibility timeout, counted from
		// when the receive was sent. What secure found lost was of the
		// batch before: none of it comes fresh again (see scanner.receive).
		r.until = r.s.seen[aws.ToString(fresh[0].MessageId)].Add(r.cfg.Visibility)
		clear(r.lost)
		for i, raw := range fresh {
			r.batch = fresh[i:]
			m := newMessage(r.q.URL, raw)
			// A batch that secure keeps hidden may outlast the visibility
			// timeout: the messages held meanwhile are kept hidden too.
			r.s.keepHidden(ctx)
			var err error
			if ctx.Err() != nil {
				r.s.holdUntil(m.ID, m.ReceiptHandle, r.until)
				err = r.interrupted(ctx)
			} else {
				err = r.handle(ctx, m)
			}
			if err != nil {
				for _, rest := range fresh[i+1:] {
					r.s.holdUntil(aws.ToString(rest.MessageId), aws.ToString(rest.ReceiptHandle), r.until)
				}
				return err
			}
		}
	}
}

func (r *replayer) interrupted(ctx context.Context) error { return r.interruptedBy(ctx, nil) }

// interruptedBy is interrupted, by err when ctx has not ended yet: a rate
// limit's wait that would end past ctx's deadline.
func (r *replayer) interruptedBy(ctx context.Context, err error) error {
	r.res.Interrupted = true
	if cause := context.Cause(ctx); cause != nil || err == nil {
		err = cause
	} else {
		err = fmt.Errorf("%w: %v", context.DeadlineExceeded, err)
	}
	return fmt.Errorf("%w: %d message(s) moved, the others stay in %s: %w", ErrInterrupted, r.res.Moved, r.q.Name, err)
}

// MaxUnmatchedClasses bounds the error classes ReplayResult.Unmatched
// counts apart.
const MaxUnmatchedClasses = 20

// unmatched counts m, read and left out by the filter, in Unmatched.
func (res *ReplayResult) unmatched(m *Message) {
	class := ""
	if m.HasFailure && !m.Redriven() {
		class = m.Failure.ErrorClass
	}
	if res.Unmatched == nil {
		res.Unmatched = map[string]int{}
	}
	if _, ok := res.Unmatched[class]; !ok && len(res.Unmatched) >= MaxUnmatchedClasses {
		class = "…"
	}
	res.Unmatched[class]++
}

// handle decides the fate of one message. Every message that is not deleted
// is held, to be released at the end.
func (r *replayer) handle(ctx context.Context, m *Message) error {
	r.res.Scanned++
	if r.cfg.Progress != nil {
		defer func() { r.cfg.Progress(Progress{Scanned: r.res.Scanned, Matched: r.res.Matched, Moved: r.res.Moved}) }()
	}
	group := m.GroupID
	stay := func() {
		r.s.holdUntil(m.ID, m.ReceiptHandle, r.until)
		if r.q.FIFO {
			r.blocked[group] = true // later messages of the group must stay behind it
		}
	}
	if !r.cfg.Filter.Match(m) {
		r.res.unmatched(m)
		stay()
		return nil
	}
	identity, hasIdentity := jobIdentity(m)
	if first, dup := r.replayed[identity]; hasIdentity && dup {
		// Its job was moved: even past the limit (a copy read in the same
		// receive), this copy goes.
		m.DuplicateOf = first
		return r.drop(ctx, m)
	}
	if (r.cfg.Limit > 0 && r.res.Matched >= r.cfg.Limit) || (r.q.FIFO && r.blocked[group]) {
		stay()
		return nil
	}
	if r.sent[m.ID] || (m.HasFailure && r.sent[m.Failure.MessageID]) {
		// A copy this run sent failed again already: it is not replayed
		// again, or a replay while the handler still fails would never end.
		// Dead-lettered by a runtime, it is a copy of the copy whose
		// failure names it; moved by SQS's redrive (its handler's process
		// died, say), it is the copy itself, its ID kept, and its failure
		// still the one this run replayed.
		r.res.FailedAgain++
		stay()
		return nil
	}
	dest, ok, err := r.destination(ctx, m)
	if err != nil {
		stay()
		if cutShort(ctx, err) { // a lookup the interruption cut short
			return r.interrupted(ctx)
		}
		return err
	}
	if !ok {
		stay()
		return nil
	}
	r.res.Matched++
	rm := ReplayedMessage{
		MessageID: m.ID, OriginalMessageID: m.OriginalID(), ErrorClass: m.Failure.ErrorClass,
		FailedAt: m.Failure.FailedAt, GroupID: group, Destination: dest.URL, msg: m,
	}
	if r.dryRun {
		_, rm.Replays, rm.Note = copyAttributes(m)
		r.s.holdUntil(m.ID, m.ReceiptHandle, r.until)
		r.res.Messages = append(r.res.Messages, rm)
		if hasIdentity {
			r.replayed[identity] = m.ID
		}
		return nil
	}
	if err := r.wait(ctx); err != nil {
		r.res.Matched--
		stay()
		return r.interruptedBy(ctx, err)
	}
	// Recorded first: a crash between the send and the delete leaves its
	// trace.
	if err := r.cfg.Audit.record(ctx, AuditRecord{
		Action: ActionReplayStart, DLQ: r.q.URL, Destination: dest.URL, OriginalMessageID: m.OriginalID(),
		DLQMessageID: m.ID, Filter: r.res.Filter,
	}); err != nil {
		r.res.Matched--
		stay()
		if cutShort(ctx, err) {
			return r.interrupted(ctx)
		}
		return fmt.Errorf("dlq: message %s was not moved: the audit record failed: %w", m.ID, err)
	}
	// What runs from here runs to its end even if ctx is cancelled now:
	// the start is recorded, and its end must be, each closing record
	// within its own bound (closing).
	if _, err := r.secure(ctx, m); err != nil {
		r.res.Matched--
		stay()
		reason := fmt.Sprintf("it could not be hidden for its move: %v", err)
		if errors.Is(err, errExpired) {
			r.res.Expired++
			reason = fmt.Sprintf("its visibility timeout ran out before its turn (a destination slow to answer, or a low rate) and SQS would not hide it again: another reader may have received it, so it was not copied; replay %s again for it", r.q.Name)
			r.res.Stayed = append(r.res.Stayed, StayedMessage{MessageID: m.ID, OriginalMessageID: m.OriginalID(), Reason: reason})
		}
		if aerr := r.closing(ctx, AuditRecord{
			Action: ActionReplayFailed, DLQ: r.q.URL, Destination: dest.URL, OriginalMessageID: m.OriginalID(),
			DLQMessageID: m.ID, Filter: r.res.Filter, Note: "not copied: " + reason,
		}); aerr != nil {
			return fmt.Errorf("dlq: message %s was not moved (%s), and the audit record failed: %w", m.ID, reason, aerr)
		}
		if !errors.Is(err, errExpired) {
			return fmt.Errorf("dlq: message %s was not moved: %w; it stays in %s", m.ID, err, r.q.Name)
		}
		return nil
	}
	// The send runs to its end even if ctx is cancelled now, within
	// moveTimeout; the delete and the last audit record have their own.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.q.moveTimeout)
	defer cancel()
	// The send is not bounded by the hide: it names no receipt handle,
	// and cutting it short would not undo it, only lose its copy's ID.
	newID, replays, note, failure, err := r.send(mctx, m, dest)
	if err != nil {
		r.res.Matched--
		stay()
		refused := queue.IsInvalidParameter(err)
		what := "the send failed"
		if failure.mayBeSent {
			what += " (it may have been applied)"
		}
		if refused {
			what = "SQS refused it"
		}
		if aerr := r.closing(ctx, AuditRecord{
			Action: ActionReplayFailed, DLQ: r.q.URL, Destination: dest.URL, OriginalMessageID: m.OriginalID(),
			DLQMessageID: m.ID, Filter: r.res.Filter, Note: fmt.Sprintf("not copied: %s: %v", what, err),
		}); aerr != nil {
			return fmt.Errorf("dlq: message %s was not moved, and the audit record failed: %w", m.ID, errors.Join(err, aerr))
		}
		if !refused {
			return r.sendFailed(mctx, m, dest, failure, err)
		}
		// This message's own refusal: the others may go.
		r.res.Unsent++
		r.res.Stayed = append(r.res.Stayed, StayedMessage{MessageID: m.ID, OriginalMessageID: m.OriginalID(), Reason: fmt.Sprintf(
			"SQS refused its copy to %s (%v): a message larger than the queue's MaximumMessageSize, say; raise the MaximumMessageSize of %s, or replay it to a queue that takes it",
			dest.Name, err, dest.Name)})
		return nil
	}
	rm.NewMessageID, rm.Replays, rm.Note = newID, replays, note
	r.sent[newID] = true
	if hasIdentity {
		r.replayed[identity] = m.ID
	}
	deleted := true
	var stopErr error // a delete SQS refused stops the run
	dctx, cancelDelete := context.WithTimeout(context.WithoutCancel(ctx), r.q.moveTimeout)
	defer cancelDelete()
	if err := r.deleteHeld(dctx, m); err != nil {
		deleted = false
		r.res.NotDeleted++
		r.s.holdUntil(m.ID, m.ReceiptHandle, r.until) // if it comes back in this run, it is not copied again
		rm.Note = joinNotes(rm.Note, fmt.Sprintf("copied, but not deleted from the dead-letter queue: %v", err))
		r.q.log.Warn("dlq: a message was copied but not deleted from the dead-letter queue: it is in both queues",
			"queue", r.q.URL, "message", m.ID, "destination", dest.URL, "error", err)
		if !errors.Is(err, errNotHeld) {
			// SQS refuses deletes (throttled, unreachable, denied): each
			// message copied from now on would stay in both queues too.
			stopErr = fmt.Errorf("dlq: stopped after message %s: copied to %s as %s, but SQS refused its delete from the dead-letter queue (%w); the messages not yet copied stay there: run the replay again once SQS takes deletes", m.ID, dest.Name, newID, err)
		}
	} else {
		r.s.forget(m.ID)
		r.res.Moved++
	}
	r.res.Messages = append(r.res.Messages, rm)
	// Recorded as the move ran: to its end, even if ctx is cancelled now.
	if err := r.closing(ctx, AuditRecord{
		Action: ActionReplay, DLQ: r.q.URL, Destination: dest.URL, OriginalMessageID: m.OriginalID(),
		DLQMessageID: m.ID, NewMessageID: newID, Replays: rm.Replays, Filter: r.res.Filter, Deleted: deleted, Note: rm.Note,
	}); err != nil {
		return errors.Join(fmt.Errorf("dlq: message %s was moved to %s as %s, but the audit record failed: %w", m.ID, dest.Name, newID, err), stopErr)
	}
	return stopErr
}

// sendFailure is what send tells of a copy that failed: whether SQS may
// have applied it all the same, and whether it carries the job's key.
type sendFailure struct{ mayBeSent, keyed bool }

// sendFailed is the error of a replay stopped by a copy that failed
// otherwise than by SQS's refusal: it names a send SQS did not answer
// within moveTimeout, and says when the copy may have been sent all the
// same (see send), and what to do.
func (r *replayer) sendFailed(mctx context.Context, m *Message, dest Target, f sendFailure, err error) error {
	what := ""
	if errors.Is(mctx.Err(), context.DeadlineExceeded) {
		what = fmt.Sprintf(" (SQS did not answer within %v)", r.q.moveTimeout)
	}
	next := "replay it again once SQS answers"
	switch {
	case f.mayBeSent && f.keyed:
		next = fmt.Sprintf("its copy may be in %s all the same (SQS may have applied the send before the failure); "+
			"a replay once SQS answers sends another copy of the same job (the same job key: behind the idempotency middleware, the job runs once)", dest.Name)
	case f.mayBeSent:
		next = fmt.Sprintf("its copy may be in %s all the same (SQS may have applied the send before the failure), without the job's key (the message had no attribute to spare for it, or SQS refused the copy with it), which the SDK was therefore not let send again: "+
			"look for it there before you replay this message again, or its job runs twice", dest.Name)
	}
	return fmt.Errorf("dlq: sending the copy of message %s to %s%s: %w; it stays in %s: %s", m.ID, dest.Name, what, err, r.q.Name, next)
}

// closing records rec, which ends a move whose start was recorded: to its
// end even if ctx is cancelled now, within a bound of its own (not what a
// slow send or delete left of theirs).
func (r *replayer) closing(ctx context.Context, rec AuditRecord) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.q.moveTimeout)
	defer cancel()
	return r.cfg.Audit.record(actx, rec)
}

// cutShort reports whether err is ctx's ending: a call made with ctx that
// the interruption (or the caller's deadline) cut short.
func cutShort(ctx context.Context, err error) bool {
	return ctx.Err() != nil && errors.Is(err, ctx.Err())
}

// errExpired: a message's visibility timeout ran out before its move, and
// SQS would not hide it again.
var errExpired = errors.New("its visibility timeout ran out before its turn")

// secure makes sure m is held for half the visibility timeout at least,
// and returns until when it is hidden at least. The replay calls it before
// it copies m and again before it deletes m, and sends the delete within
// that hide (see deleteHeld). A message waiting its turn behind a destination
// slow to answer, or behind a low PerSecond, would otherwise outlive its
// visibility timeout, and another reader could receive it before its copy
// was sent or before its delete: the delete, its receipt handle stale, then
// refused (a FIFO queue) or applied without effect (SQS may accept a stale
// handle and do nothing), its job would be in both queues, or replayed
// twice. When less is left, it hides m and the rest of its receive's batch
// for the visibility timeout again, in one call: a replay that moves a
// batch within half the visibility timeout makes none. It returns
// errExpired when SQS would not hide m again (its receipt handle no longer
// holds it: it was received again, or is visible; its 12 hours from its
// receive are up), and the call's error when that failed. That SQS refuses
// a stale handle, which a queue's own SQS does and the local emulator does
// not, is what tells a message another reader received from one hidden
// again.
func (r *replayer) secure(ctx context.Context, m *Message) (time.Time, error) {
	now := r.q.now()
	switch {
	case r.lost[m.ID] != "":
		return time.Time{}, errExpired
	case r.until.Sub(now) >= r.cfg.Visibility/2:
		return r.until, nil
	}
	d := r.cfg.Visibility
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(r.q.URL)}
	for i, b := range r.batch[:min(len(r.batch), 10)] {
		id := aws.ToString(b.MessageId)
		if r.lost[id] != "" {
			continue
		}
		// Within SQS's 12 hours from the receive, less holdSlack: what is
		// left of them, if less than d.
		room := r.s.seen[id].Add(sqsworker.MaxVisibilityTimeout - holdSlack).Sub(now)
		if room < time.Second {
			r.lost[id] = "its 12 hours from its receive are up"
			continue
		}
		in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), ReceiptHandle: b.ReceiptHandle,
			VisibilityTimeout: int32(min(d, room) / time.Second),
		})
	}
	if r.lost[m.ID] != "" {
		return time.Time{}, errExpired
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	out, err := r.q.api.ChangeMessageVisibilityBatch(cctx, in, r.q.opts...)
	if err != nil {
		return time.Time{}, fmt.Errorf("hiding it for its move: %w", err)
	}
	var own error
	failed := false // an entry failed but for a lost message
	for _, f := range out.Failed {
		i, _ := strconv.Atoi(aws.ToString(f.Id))
		if i < 0 || i >= len(r.batch) {
			continue
		}
		id := aws.ToString(r.batch[i].MessageId)
		if staleReceipt(f) {
			r.lost[id] = aws.ToString(f.Code)
			continue
		}
		failed = true
		if id == m.ID {
			own = fmt.Errorf("hiding it for its move: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
		}
	}
	if r.lost[m.ID] != "" {
		return time.Time{}, errExpired
	}
	if own != nil {
		return time.Time{}, own
	}
	// The entries' shortest hide: the rest of the batch is hidden at least
	// until then, but for the lost.
	until := now.Add(d)
	for _, e := range in.Entries {
		if u := now.Add(time.Duration(e.VisibilityTimeout) * time.Second); u.Before(until) {
			until = u
		}
	}
	if !failed {
		r.until = until
	}
	// Else another message of the batch is hidden no longer than before:
	// its turn hides them again.
	return until, nil
}

// leaseMargin is what a delete keeps of a hide for the request's way to
// SQS: a second, or an eighth of the visibility timeout if less.
func (r *replayer) leaseMargin() time.Duration { return min(time.Second, r.cfg.Visibility/8) }

// deleteHeld deletes m from the dead-letter queue while the replay holds
// it: hidden again first if half the visibility timeout is no longer left
// (its copy's send took that long), and the delete bounded by what is left
// of the hide, less leaseMargin: a delete with a receipt handle that no
// longer holds m may be refused, or applied without effect (SQS may accept
// a stale handle and do nothing), which would leave the job in both queues
// unsaid. A message SQS would not hide again (visible again, or received
// by another reader: SQS need not say which) is not deleted, and said so.
// A re-hide that failed otherwise (throttled, say) leaves the delete to
// the hide m had, if enough of it is left.
func (r *replayer) deleteHeld(ctx context.Context, m *Message) error {
	before := r.until
	until, err := r.secure(ctx, m)
	switch {
	case errors.Is(err, errExpired):
		return fmt.Errorf("%w: its visibility timeout ran out before its delete, and SQS would not hide it again (%s): it may be visible again, or held by another reader", errNotHeld, r.lost[m.ID])
	case err != nil:
		until = before
	}
	left := until.Sub(r.q.now()) - r.leaseMargin()
	if left <= 0 {
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: its visibility timeout ran out while it was hidden again (SQS was slow to answer)", errNotHeld)
	}
	dctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	_, err = r.q.api.DeleteMessage(dctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.q.URL), ReceiptHandle: aws.String(m.ReceiptHandle)}, r.q.opts...)
	var api smithy.APIError
	if errors.As(err, &api) && staleCode(api.ErrorCode(), api.ErrorMessage()) {
		// The receipt handle stale or expired: this message's alone.
		return fmt.Errorf("%w: %w", errNotHeld, err)
	}
	return err
}

// errNotHeld is matched by the error of a delete of a message no longer
// held (its receipt handle stale, or its hide run out): that message's
// fault, not SQS refusing deletes.
var errNotHeld = errors.New("the message is no longer held")

// drop deletes m, a copy of a job this run replayed (m.DuplicateOf), from
// the dead-letter queue, or in a dry run notes that it would. It is
// recorded before the delete ([ActionReplayStart], its Note saying that the
// copy is dropped), as every message a replay takes from the queue: an
// audit record that fails leaves it there, and a crash between the delete
// and its [ActionDropDuplicate] record leaves a trace. A copy whose delete
// fails stays, noted in ReplayResult.Dropped and recorded as
// [ActionReplayFailed].
func (r *replayer) drop(ctx context.Context, m *Message) error {
	dm := DroppedMessage{MessageID: m.ID, OriginalMessageID: m.OriginalID(), DuplicateOf: m.DuplicateOf}
	if r.dryRun {
		r.s.holdUntil(m.ID, m.ReceiptHandle, r.until)
		r.res.Duplicates++
		r.res.Dropped = append(r.res.Dropped, dm)
		return nil
	}
	what := "a copy of the job replayed from message " + m.DuplicateOf
	if err := r.cfg.Audit.record(ctx, AuditRecord{
		Action: ActionReplayStart, DLQ: r.q.URL, OriginalMessageID: m.OriginalID(), DLQMessageID: m.ID,
		Filter: r.res.Filter, Note: "to be deleted: " + what,
	}); err != nil {
		r.s.holdUntil(m.ID, m.ReceiptHandle, r.until)
		if cutShort(ctx, err) {
			return r.interrupted(ctx)
		}
		return fmt.Errorf("dlq: message %s, a copy of the replayed message %s, was not deleted: the audit record failed: %w", m.ID, m.DuplicateOf, err)
	}
	// The delete runs to its end even if ctx is cancelled now.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.q.moveTimeout)
	defer cancel()
	if err := r.deleteHeld(mctx, m); err != nil {
		r.s.holdUntil(m.ID, m.ReceiptHandle, r.until)
		dm.Note = fmt.Sprintf("a copy of a replayed job, not deleted: %v", err)
		r.res.Dropped = append(r.res.Dropped, dm)
		r.q.log.Warn("dlq: a duplicate copy of a replayed job could not be deleted from the dead-letter queue",
			"queue", r.q.URL, "message", m.ID, "duplicate_of", m.DuplicateOf, "error", err)
		if aerr := r.closing(ctx, AuditRecord{
			Action: ActionReplayFailed, DLQ: r.q.URL, OriginalMessageID: m.OriginalID(), DLQMessageID: m.ID,
			Filter: r.res.Filter, Note: fmt.Sprintf("not deleted: %s; it stays: %v", what, err),
		}); aerr != nil {
			return fmt.Errorf("dlq: message %s, a copy of the replayed message %s, was not deleted, and the audit record failed: %w", m.ID, m.DuplicateOf, errors.Join(err, aerr))
		}
		return nil
	}
	r.s.forget(m.ID)
	r.res.Duplicates++
	r.res.Dropped = append(r.res.Dropped, dm)
	if err := r.closing(ctx, AuditRecord{
		Action: ActionDropDuplicate, DLQ: r.q.URL, OriginalMessageID: m.OriginalID(), DLQMessageID: m.ID,
		Filter: r.res.Filter, Deleted: true, Note: what,
	}); err != nil {
		return fmt.Errorf("dlq: message %s, a copy of the replayed message %s, was deleted, but the audit record failed: %w", m.ID, m.DuplicateOf, err)
	}
	return nil
}

// destination returns where m goes: ReplayConfig.To, else its source queue
// if that sends its dead letters to this queue. ok is false when m stays,
// counted in NoSource or Refused.
func (r *replayer) destination(ctx context.Context, m *Message) (Target, bool, error) {
	ref, _ := m.claimedSource()
	if r.to != nil {
		if !r.toFeeds || ref == "" {
			return *r.to, true, nil
		}
		src, reason, err := r.q.source(ctx, ref)
		if err != nil {
			return Target{}, false, fmt.Errorf("dlq: message %s: checking its source queue: %w; nothing was moved for it", m.ID, err)
		}
		if reason != "" || sameQueue(src, *r.to) {
			return *r.to, true, nil // not one of this queue's sources, or To itself
		}
		r.res.OtherSource++
		r.res.Stayed = append(r.res.Stayed, StayedMessage{MessageID: m.ID, OriginalMessageID: m.OriginalID(), Reason: fmt.Sprintf(
			"it failed in %s, which sends its dead letters to %s too, not in %s (the destination), whose handler is not its own: replay it without a destination, which sends it back to %s",
			src.Name, r.q.Name, r.to.Name, src.Name)})
		return Target{}, false, nil
	}
	if ref == "" {
		r.res.NoSource++
		return Target{}, false, nil
	}
	t, reason, err := r.q.source(ctx, ref)
	if err != nil {
		return Target{}, false, fmt.Errorf("dlq: message %s: checking its source queue: %w; nothing was moved for it", m.ID, err)
	}
	if reason != "" {
		r.res.Refused++
		r.res.Stayed = append(r.res.Stayed, StayedMessage{MessageID: m.ID, OriginalMessageID: m.OriginalID(), Reason: reason})
		return Target{}, false, nil
	}
	return t, true, nil
}

// copyAttributes returns the message attributes of m's copy, and its replay
// count (0 when the copy cannot carry one, then note says why).
func copyAttributes(m *Message) (attrs map[string]types.MessageAttributeValue, replays int, note string) {
	attrs = make(map[string]types.MessageAttributeValue, len(m.raw.MessageAttributes)+1)
	for k, v := range m.raw.MessageAttributes {
		if k != sqsworker.AttrPriorAttempts {
			attrs[k] = v
		}
	}
	_, has := attrs[AttrReplays]
	if !has && len(attrs) >= sqsworker.MaxMessageAttributes {
		if c, ok := compactFailure(m); ok && len(c) < sqsworker.MaxMessageAttributes {
			attrs = c
			note = fmt.Sprintf("failure metadata kept as the one attribute %s, to make room for %s", sqsworker.AttrFailure, AttrReplays)
		}
	}
	if key, need := originalKey(m); need {
		if len(attrs) < sqsworker.MaxMessageAttributes {
			attrs[jobkey.Attribute] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(key)}
		} else {
			note = joinNotes(note, fmt.Sprintf("%s not added: the message already has SQS's maximum of %d attributes, so the idempotency middleware's DefaultKey gives the copy its own new ID", jobkey.Attribute, sqsworker.MaxMessageAttributes))
		}
	}
	if !has && len(attrs) >= sqsworker.MaxMessageAttributes {
		return attrs, 0, joinNotes(note, fmt.Sprintf("%s not added: the message already has SQS's maximum of %d attributes", AttrReplays, sqsworker.MaxMessageAttributes))
	}
	replays = m.Replays + 1
	attrs[AttrReplays] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(replays))}
	return attrs, replays, note
}

// originalKey returns the key the idempotency middleware's DefaultKey gave
// m's job in its source queue, "message-id:" and the message's ID, and
// whether its copy needs it as an idempotency-key attribute: m has none,
// and no failure metadata naming the message it was (a message SQS's
// redrive moved, which keeps its ID). Without it, DefaultKey would give the
// copy its own new ID, and a job whose effect was applied (its deletes
// failed until SQS moved it), or that is in the dead-letter queue twice (a
// runtime stopped between its dead-letter copy and the delete), would run
// its effect again.
func originalKey(m *Message) (string, bool) {
	if _, ok := m.raw.MessageAttributes[jobkey.Attribute]; ok {
		return "", false
	}
	if m.HasFailure && m.Failure.MessageID != "" {
		return "", false
	}
	return jobkey.OfID(m.ID), true
}

// compactFailure returns m's attributes with its failure metadata as the
// single JSON attribute sqsworker.Failure.AddTo falls back to (and
// sqsworker.ParseFailure reads), instead of one attribute per field. ok is
// false when m has no per-field metadata to compact.
func compactFailure(m *Message) (map[string]types.MessageAttributeValue, bool) {
	if _, perField := m.raw.MessageAttributes[sqsworker.AttrFailureClass]; !perField || !m.HasFailure {
		return nil, false
	}
	b, err := json.Marshal(m.Failure)
	if err != nil {
		return nil, false
	}
	out := make(map[string]types.MessageAttributeValue, len(m.raw.MessageAttributes))
	for k, v := range m.raw.MessageAttributes {
		if !sqsworker.IsFailureAttribute(k) && k != sqsworker.AttrPriorAttempts {
			out[k] = v
		}
	}
	out[sqsworker.AttrFailure] = types.MessageAttributeValue{DataType: aws.String("String.json"), StringValue: aws.String(string(b))}
	return out, true
}

// send sends the copy of m to dest and returns its message ID and its replay
// count.
//
// When it fails, failure tells whether SQS may have applied an attempt
// of it all the same (one that did not end in a refusal: an answer lost,
// or none within the bound), and whether the copy it sent last carries
// the job's key.
func (r *replayer) send(ctx context.Context, m *Message, dest Target) (newID string, replays int, note string, failure sendFailure, err error) {
	var attempts atomic.Int32
	var applied atomic.Bool
	opts := append(slices.Clip(r.q.opts), countAttempts(&attempts, &applied))
	var in *sqs.SendMessageInput
	defer func() {
		if err != nil {
			_, need := originalKey(m)
			_, added := in.MessageAttributes[jobkey.Attribute]
			failure = sendFailure{mayBeSent: applied.Load(), keyed: !need || added}
		}
	}()
	attrs, replays, note := copyAttributes(m)
	in = &sqs.SendMessageInput{
		QueueUrl:          aws.String(dest.URL),
		MessageBody:       m.raw.Body,
		MessageAttributes: attrs,
	}
	if len(attrs) == 0 {
		in.MessageAttributes = nil
	}
	// The destination is of the dead-letter queue's type (see Target):
	// a FIFO group goes to a FIFO queue, a fair queue's tenant to a
	// standard one.
	sqsmsg.Carry(in, m.GroupID, m.Attributes[sqsworker.AttrAWSTraceHeader], dest.FIFO)
	if dest.FIFO {
		// The same replay retried is deduplicated; the next replay of the
		// message (it failed again) is not.
		dedup := fmt.Sprintf("%s-%d", m.OriginalID(), replays)
		if replays == 0 { // no count: the dead-letter message's ID is new on every failure
			dedup = m.OriginalID() + "-" + m.ID
		}
		in.MessageDeduplicationId = aws.String(dedup)
	}
	sendCopy := func() (*sqs.SendMessageOutput, error) {
		if _, need := originalKey(m); need && !dest.FIFO { // a FIFO queue drops a second copy by its deduplication ID
			if _, added := in.MessageAttributes[jobkey.Attribute]; !added {
				// Nothing would tell a second copy from the first.
				return r.q.api.SendMessage(ctx, in, append(slices.Clip(opts), retryOnlyUnapplied)...)
			}
		}
		return r.q.api.SendMessage(ctx, in, opts...)
	}
	out, err := sendCopy()
	// Refused, perhaps over the queue's MaximumMessageSize, which the
	// message fit without what its copy adds: the copy goes without its
	// replay count, then without the key, which matters more.
	if _, ok := in.MessageAttributes[AttrReplays]; ok && err != nil && queue.IsInvalidParameter(err) {
		delete(in.MessageAttributes, AttrReplays)
		replays = 0
		if dest.FIFO {
			in.MessageDeduplicationId = aws.String(m.OriginalID() + "-" + m.ID)
		}
		note = joinNotes(note, fmt.Sprintf("%s left out: SQS refused the copy with it (%v)", AttrReplays, err))
		out, err = sendCopy()
	}
	if _, need := originalKey(m); err != nil && need && queue.IsInvalidParameter(err) {
		if _, added := in.MessageAttributes[jobkey.Attribute]; added {
			delete(in.MessageAttributes, jobkey.Attribute)
			note = joinNotes(note, fmt.Sprintf("%s not added: SQS refused the copy with it (%v)", jobkey.Attribute, err))
			out, err = sendCopy()
		}
	}
	if err != nil {
		return "", 0, "", sendFailure{}, err
	}
	return aws.ToString(out.MessageId), replays, note, sendFailure{}, nil
}

// retryOnlyUnapplied keeps the SDK from sending a request again after an
// attempt SQS may have applied (its answer lost, a server error): for a
// copy without the job's key to a standard queue, a second copy would run
// the job twice, with nothing to tell it from the first. Refusals (throttling, a connection
// never made) are retried as before.
func retryOnlyUnapplied(o *sqs.Options) {
	o.Retryer = unappliedRetryer{o.Retryer}
}

type unappliedRetryer struct{ aws.Retryer }

func (r unappliedRetryer) IsErrorRetryable(err error) bool {
	return !awserr.MayHaveApplied(err) && r.Retryer.IsErrorRetryable(err)
}

// GetAttemptToken keeps the wrapped retryer's per-attempt token (the
// adaptive mode's rate limit), which the SDK would otherwise replace by
// the initial token of every attempt.
func (r unappliedRetryer) GetAttemptToken(ctx context.Context) (func(error) error, error) {
	if v2, ok := r.Retryer.(aws.RetryerV2); ok {
		return v2.GetAttemptToken(ctx)
	}
	return r.Retryer.GetInitialToken(), nil
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// wait waits for the next message's turn under the rate limit, or until ctx
// ends.
func (r *replayer) wait(ctx context.Context) error {
	if r.pace == nil {
		return ctx.Err()
	}
	return r.pace.Wait(ctx)
}

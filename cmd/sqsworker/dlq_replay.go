package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"
	"golang.org/x/time/rate"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/queue"
)

// defaultAuditFile is where replay appends its audit log by default, in the
// current directory.
const defaultAuditFile = "sqsworker-replay.jsonl"

// moveTimeout bounds the send and the delete of one message, which run to
// their end even when the command is interrupted.
const moveTimeout = 30 * time.Second

type replayOptions struct {
	filter     filterFlags
	to         string
	limit      int
	rate       float64
	yes        bool
	audit      string
	visibility time.Duration
}

func newDLQReplayCmd(a *app) *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay DLQ",
		Short: "Move chosen dead-letter messages back to their source queue (dry run unless --yes)",
		Long: `Move the dead-letter messages that pass every filter back to the queue they
failed in (the source queue in their failure metadata), or to --to QUEUE.

Without --yes it is a dry run: it prints what would move and where, and moves
nothing. With --yes, for each message it sends the copy first, then deletes
the original from the dead-letter queue: an interruption loses nothing, at
worst a message is in both queues. Ctrl-C stops between two messages.

The copy keeps the body, every message attribute (the failure metadata stays
as history; the runtimes replace it if the message fails again), the
idempotency key, the X-Ray trace header and, on FIFO queues, the message
group; its deduplication ID is the original message ID and its replay count.
It gets the Number attribute sqsworker.replays: 1, or one more than the
message had. SQS allows 10 attributes: when the message already has 10, its
failure metadata is kept as the one JSON attribute sqsworker.failure instead
of one attribute per field (the form the runtimes use when room is short),
and when even that leaves no room the copy goes without the count. The audit
log says which.

Filters (all optional; a message must pass every one given):
  --error-class C       the failure's error class is C (repeat for any of several)
  --attr NAME=VALUE     the message attribute NAME has the value VALUE (repeatable)
  --since T, --until T  failed at or after T / before T: RFC 3339
                        (2026-11-29T14:00:00Z) or a duration ago (2h ago, 30m, 7d)
  --body-contains S     the body contains S
  --json-field P=V      the body is JSON whose field at the dot path P (order.id,
                        items.0.sku) is V (repeatable)
  --limit N             move at most N messages

Messages are received with a visibility timeout of --visibility; those left
in place are all made visible again at once when the replay ends. On a FIFO
queue a group is replayed in order, up to its first message that stays. A
copy that fails again and comes back while the replay runs is not replayed
a second time.
With --yes, each moved message is appended as one JSON line to the audit log
(--audit; "-" for standard error): time, dead-letter queue, destination,
original, dead-letter and new message IDs, replay count, filter.`,
		Example: `  # what would move: the messages that failed with one class in the last 2 hours
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago"

  # move them, 20 per second, to their source queue
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago" --rate 20 --yes

  # one tenant's orders for one customer, to another queue
  sqsworker dlq replay orders-dlq --attr tenant=acme --json-field order.customer=c-42 --to orders-retry --yes`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.replay(cmd.Context(), args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.filter.classes, "error-class", nil, "replay messages whose failure has this error class (repeatable: any of them)")
	f.StringArrayVar(&o.filter.attrs, "attr", nil, "replay messages whose attribute NAME has VALUE, as NAME=VALUE (repeatable: all of them)")
	f.StringVar(&o.filter.since, "since", "", `replay messages that failed at or after this time: RFC 3339 or a duration ago ("2h ago")`)
	f.StringVar(&o.filter.until, "until", "", `replay messages that failed before this time: RFC 3339 or a duration ago ("30m ago")`)
	f.StringVar(&o.filter.bodyContains, "body-contains", "", "replay messages whose body contains this text")
	f.StringArrayVar(&o.filter.jsonFields, "json-field", nil, "replay messages whose JSON body has this value at a dot path, as PATH=VALUE (repeatable: all of them)")
	f.IntVar(&o.limit, "limit", 0, "move at most this many messages (0: no limit)")
	f.Float64Var(&o.rate, "rate", 0, "move at most this many messages per second (0: no limit)")
	f.StringVar(&o.to, "to", "", "send the messages to this queue instead of their source queue")
	f.BoolVar(&o.yes, "yes", false, "move the messages (without it: a dry run)")
	f.StringVar(&o.audit, "audit", defaultAuditFile, `append one JSON line per moved message to this file ("-": standard error)`)
	f.DurationVar(&o.visibility, "visibility", defaultPeekVisibility, "visibility timeout of the messages while the replay holds them (whole seconds, 1s to 12h)")
	return cmd
}

// replayResult is what a replay did, in -o json output.
type replayResult struct {
	DryRun      bool          `json:"dryRun"`
	DLQ         string        `json:"dlq"`
	Filter      string        `json:"filter"`
	Scanned     int           `json:"scanned"`
	Matched     int           `json:"matched"`
	Moved       int           `json:"moved"`
	NoSource    int           `json:"noSource,omitempty"`
	NotDeleted  int           `json:"notDeleted,omitempty"`
	FailedAgain int           `json:"failedAgain,omitempty"`
	LimitHit    bool          `json:"limitReached,omitempty"`
	Interrupted bool          `json:"interrupted,omitempty"`
	Messages    []replayedMsg `json:"messages"`
}

type replayedMsg struct {
	MessageID         string    `json:"messageId"`
	OriginalMessageID string    `json:"originalMessageId"`
	ErrorClass        string    `json:"errorClass"`
	FailedAt          time.Time `json:"failedAt,omitzero"`
	GroupID           string    `json:"groupId,omitempty"`
	Destination       string    `json:"destination"`
	NewMessageID      string    `json:"newMessageId,omitempty"`
	Replays           int       `json:"replays"`
	Note              string    `json:"note,omitempty"`
	sortKey           *dlqMessage
}

// auditRecord is one line of the audit log.
type auditRecord struct {
	Time              time.Time `json:"time"`
	DLQ               string    `json:"dlq"`
	Destination       string    `json:"destination"`
	OriginalMessageID string    `json:"originalMessageId"`
	DLQMessageID      string    `json:"dlqMessageId"`
	NewMessageID      string    `json:"newMessageId"`
	Replays           int       `json:"replays"`
	Filter            string    `json:"filter"`
	Deleted           bool      `json:"deleted"`
	Note              string    `json:"note,omitempty"`
}

func (a *app) replay(ctx context.Context, dlqArg string, o replayOptions) error {
	// Everything that can be checked is checked before anything moves.
	var errs []error
	if err := validateVisibility(o.visibility); err != nil {
		errs = append(errs, err)
	}
	if o.limit < 0 {
		errs = append(errs, fmt.Errorf("--limit %d: want 0 (no limit) or more", o.limit))
	}
	if math.IsNaN(o.rate) || math.IsInf(o.rate, 0) || o.rate < 0 {
		errs = append(errs, fmt.Errorf("--rate %v: want messages per second, more than 0 (or 0: no limit)", o.rate))
	}
	if o.yes && o.audit == "" {
		errs = append(errs, errors.New(`--audit: empty file name (use "-" for standard error)`))
	}
	filter, err := o.filter.parse(time.Now())
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	dlq, err := a.loadQueue(ctx, dlqArg)
	if err != nil {
		return err
	}
	r := &replayer{a: a, c: c, dlq: dlq, filter: filter, limit: o.limit, yes: o.yes,
		dests: map[string]queue.Info{}, blocked: map[string]bool{}, sent: map[string]bool{}}
	r.desc = filter.String()
	if o.limit > 0 {
		r.desc += fmt.Sprintf(" (limit %d)", o.limit)
	}
	if o.to != "" {
		to, err := a.loadQueue(ctx, o.to)
		if err != nil {
			return fmt.Errorf("--to: %w", err)
		}
		if err := r.checkDestination(to); err != nil {
			return fmt.Errorf("--to: %w", err)
		}
		r.to = &to
	}
	r.limiter = rate.NewLimiter(rate.Inf, 1)
	batch := 10
	if o.rate > 0 {
		r.limiter = rate.NewLimiter(rate.Limit(o.rate), 1)
		// Receive no more than can be moved in half the visibility timeout.
		batch = int(min(max(o.rate*o.visibility.Seconds()/2, 1), 10))
	}
	if o.yes {
		w, closeAudit, err := a.openAudit(o.audit)
		if err != nil {
			return err
		}
		defer closeAudit()
		r.audit = w
		if o.audit != "-" && isTerminal(a.err) {
			r.progress = a.err
		}
	}
	r.h = newHolder(c, dlq.URL, o.visibility)
	runErr := r.run(ctx, batch)
	if rerr := r.h.release(ctx); rerr != nil {
		runErr = errors.Join(runErr, rerr)
	}
	if r.progress != nil && r.res.Scanned > 0 {
		fmt.Fprintln(r.progress)
	}
	if err := a.printReplay(r, o); err != nil {
		return errors.Join(runErr, err)
	}
	switch {
	case runErr != nil:
		return runErr
	case r.res.NotDeleted > 0:
		return fmt.Errorf("%d message(s) were copied but could not be deleted from %s: they are in both queues (see the audit log)",
			r.res.NotDeleted, queueName(dlq.URL))
	}
	return nil
}

// openAudit opens the audit log for appending.
func (a *app) openAudit(name string) (io.Writer, func(), error) {
	if name == "-" {
		return a.err, func() {}, nil
	}
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("opening the audit log: %w", err)
	}
	return f, func() { _ = f.Close() }, nil
}

type replayer struct {
	a        *app
	c        *sqs.Client
	dlq      queue.Info
	to       *queue.Info
	filter   replayFilter
	desc     string
	limit    int
	limiter  *rate.Limiter
	yes      bool
	audit    io.Writer
	auditMu  sync.Mutex
	progress io.Writer
	h        *holder
	dests    map[string]queue.Info // checked destinations by URL
	blocked  map[string]bool       // FIFO groups stopped at a message that stays
	sent     map[string]bool       // IDs of the copies this run sent
	res      replayResult
}

// checkDestination refuses a destination that is the dead-letter queue
// itself or of another type.
func (r *replayer) checkDestination(to queue.Info) error {
	if to.URL == r.dlq.URL || (to.ARN != "" && to.ARN == r.dlq.ARN) {
		return fmt.Errorf("destination %s is the dead-letter queue itself", queueName(to.URL))
	}
	if to.FIFO != r.dlq.FIFO {
		return fmt.Errorf("destination %s is a %s queue but dead-letter queue %s is a %s queue: messages can only be replayed to a queue of the same type",
			queueName(to.URL), queueKind(to.FIFO), queueName(r.dlq.URL), queueKind(r.dlq.FIFO))
	}
	return nil
}

// destination returns where m goes: --to, else its source queue, checked
// the first time it is seen. ok is false when m names no source queue.
func (r *replayer) destination(ctx context.Context, m *dlqMessage) (q queue.Info, ok bool, err error) {
	if r.to != nil {
		return *r.to, true, nil
	}
	src := m.failure.SourceQueue
	if !m.hasMeta || src == "" {
		return queue.Info{}, false, nil
	}
	if q, found := r.dests[src]; found {
		return q, true, nil
	}
	q, err = r.a.loadQueue(ctx, src)
	if err == nil {
		err = r.checkDestination(q)
	}
	if err != nil {
		return queue.Info{}, false, fmt.Errorf("message %s: source queue: %w; nothing was moved for it (use --to to choose another queue)", m.msg.ID, err)
	}
	r.dests[src] = q
	return q, true, nil
}

// run scans the dead-letter queue, moving (or, in a dry run, noting) the
// messages that match, until the queue has no more, the limit is reached,
// an error or an interruption.
func (r *replayer) run(ctx context.Context, batch int) error {
	r.res.DryRun, r.res.DLQ, r.res.Filter = !r.yes, r.dlq.URL, r.desc
	for {
		if r.limit > 0 && r.res.Matched >= r.limit {
			r.res.LimitHit = true
			return nil
		}
		if ctx.Err() != nil {
			return r.interrupted()
		}
		fresh, got, err := r.h.receive(ctx, batch)
		if err != nil {
			if ctx.Err() != nil {
				return r.interrupted()
			}
			return err
		}
		if got == 0 || len(fresh) == 0 {
			return nil
		}
		for i, raw := range fresh {
			var err error
			if ctx.Err() != nil {
				r.h.hold(aws.ToString(raw.MessageId), aws.ToString(raw.ReceiptHandle))
				err = r.interrupted()
			} else {
				err = r.handle(ctx, newDLQMessage(r.dlq.URL, raw))
			}
			if err != nil {
				for _, rest := range fresh[i+1:] {
					r.h.hold(aws.ToString(rest.MessageId), aws.ToString(rest.ReceiptHandle))
				}
				return err
			}
		}
	}
}

func (r *replayer) interrupted() error {
	r.res.Interrupted = true
	return fmt.Errorf("interrupted: %d message(s) moved, the others stay in %s", r.res.Moved, queueName(r.dlq.URL))
}

// handle decides the fate of one message. Every message that is not deleted
// is held, to be released at the end.
func (r *replayer) handle(ctx context.Context, m *dlqMessage) error {
	r.res.Scanned++
	defer r.showProgress()
	group := m.msg.GroupID
	stay := func() {
		r.h.hold(m.msg.ID, m.receipt())
		if r.dlq.FIFO {
			r.blocked[group] = true // later messages of the group must stay behind it
		}
	}
	if (r.limit > 0 && r.res.Matched >= r.limit) || (r.dlq.FIFO && r.blocked[group]) || !r.filter.match(m) {
		stay()
		return nil
	}
	if r.sent[m.failure.MessageID] {
		// A copy this run sent failed again already: it is not replayed
		// again, or a replay while the handler still fails would never end.
		r.res.FailedAgain++
		stay()
		return nil
	}
	dest, ok, err := r.destination(ctx, m)
	if err != nil {
		stay()
		return err
	}
	if !ok {
		r.res.NoSource++
		stay()
		return nil
	}
	r.res.Matched++
	rm := replayedMsg{
		MessageID: m.msg.ID, OriginalMessageID: m.originalID(), ErrorClass: m.failure.ErrorClass,
		FailedAt: m.failure.FailedAt, GroupID: group, Destination: dest.URL, sortKey: m,
	}
	if !r.yes {
		_, rm.Replays, rm.Note = copyAttributes(m)
		r.h.hold(m.msg.ID, m.receipt())
		r.res.Messages = append(r.res.Messages, rm)
		return nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		r.res.Matched--
		stay()
		return r.interrupted()
	}
	// The send and the delete run to their end even if ctx is cancelled now.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), moveTimeout)
	defer cancel()
	newID, replays, note, err := r.send(mctx, m, dest)
	if err != nil {
		r.res.Matched--
		stay()
		return fmt.Errorf("sending the copy of message %s to %s: %w; it stays in %s", m.msg.ID, queueName(dest.URL), err, queueName(r.dlq.URL))
	}
	rm.NewMessageID, rm.Replays, rm.Note = newID, replays, note
	r.sent[newID] = true
	deleted := true
	if _, err := r.c.DeleteMessage(mctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(r.dlq.URL), ReceiptHandle: aws.String(m.receipt())}); err != nil {
		deleted = false
		r.res.NotDeleted++
		r.h.hold(m.msg.ID, m.receipt()) // if it comes back in this run, it is not copied again
		rm.Note = joinNotes(rm.Note, fmt.Sprintf("copied, but not deleted from the dead-letter queue: %v", err))
		fmt.Fprintf(r.a.err, "warning: message %s was copied to %s but not deleted from %s: %v\n",
			m.msg.ID, queueName(dest.URL), queueName(r.dlq.URL), err)
	} else {
		r.h.forget(m.msg.ID)
		r.res.Moved++
	}
	r.res.Messages = append(r.res.Messages, rm)
	return r.writeAudit(auditRecord{
		Time: time.Now().UTC(), DLQ: r.dlq.URL, Destination: dest.URL, OriginalMessageID: m.originalID(),
		DLQMessageID: m.msg.ID, NewMessageID: newID, Replays: rm.Replays, Filter: r.desc, Deleted: deleted, Note: rm.Note,
	})
}

// copyAttributes returns the message attributes of m's copy, and its replay
// count (0 when the copy cannot carry one, then note says why).
func copyAttributes(m *dlqMessage) (attrs map[string]types.MessageAttributeValue, replays int, note string) {
	attrs = make(map[string]types.MessageAttributeValue, len(m.raw.MessageAttributes)+1)
	for k, v := range m.raw.MessageAttributes {
		attrs[k] = v
	}
	_, has := attrs[AttrReplays]
	if !has && len(attrs) >= sqsworker.MaxMessageAttributes {
		if c, ok := compactFailure(m); ok && len(c) < sqsworker.MaxMessageAttributes {
			attrs = c
			note = fmt.Sprintf("failure metadata kept as the one attribute %s, to make room for %s", sqsworker.AttrFailure, AttrReplays)
		}
	}
	if !has && len(attrs) >= sqsworker.MaxMessageAttributes {
		return attrs, 0, fmt.Sprintf("%s not added: the message already has SQS's maximum of %d attributes", AttrReplays, sqsworker.MaxMessageAttributes)
	}
	replays = m.replays + 1
	attrs[AttrReplays] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(replays))}
	return attrs, replays, note
}

// send sends the copy of m to dest and returns its message ID and its replay
// count.
func (r *replayer) send(ctx context.Context, m *dlqMessage, dest queue.Info) (newID string, replays int, note string, err error) {
	attrs, replays, note := copyAttributes(m)
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(dest.URL),
		MessageBody:       m.raw.Body,
		MessageAttributes: attrs,
	}
	if len(attrs) == 0 {
		in.MessageAttributes = nil
	}
	if th := m.msg.Attributes[sqsworker.AttrAWSTraceHeader]; th != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameForSendsAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(th)},
		}
	}
	if dest.FIFO {
		group := m.msg.GroupID
		if group == "" {
			group = "sqsworker"
		}
		in.MessageGroupId = aws.String(group)
		// The same replay retried is deduplicated; the next replay of the
		// message (it failed again) is not.
		dedup := fmt.Sprintf("%s-%d", m.originalID(), replays)
		if replays == 0 { // no count: the dead-letter message's ID is new on every failure
			dedup = m.originalID() + "-" + m.msg.ID
		}
		in.MessageDeduplicationId = aws.String(dedup)
	}
	out, err := r.c.SendMessage(ctx, in)
	if err != nil {
		return "", 0, "", err
	}
	return aws.ToString(out.MessageId), replays, note, nil
}

// compactFailure returns m's attributes with its failure metadata as the
// single JSON attribute sqsworker.Failure.AddTo falls back to (and
// sqsworker.ParseFailure reads), instead of one attribute per field. ok is
// false when m has no per-field metadata to compact.
func compactFailure(m *dlqMessage) (map[string]types.MessageAttributeValue, bool) {
	if _, perField := m.raw.MessageAttributes[sqsworker.AttrFailureClass]; !perField || !m.hasMeta {
		return nil, false
	}
	b, err := json.Marshal(m.failure)
	if err != nil {
		return nil, false
	}
	out := make(map[string]types.MessageAttributeValue, len(m.raw.MessageAttributes))
	for k, v := range m.raw.MessageAttributes {
		if !sqsworker.IsFailureAttribute(k) {
			out[k] = v
		}
	}
	out[sqsworker.AttrFailure] = types.MessageAttributeValue{DataType: aws.String("String.json"), StringValue: aws.String(string(b))}
	return out, true
}

func (r *replayer) writeAudit(rec auditRecord) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(rec); err != nil {
		return err
	}
	r.auditMu.Lock()
	defer r.auditMu.Unlock()
	if _, err := r.audit.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing the audit log (message %s was moved to %s as %s): %w",
			rec.DLQMessageID, queueName(rec.Destination), rec.NewMessageID, err)
	}
	return nil
}

func (r *replayer) showProgress() {
	if r.progress != nil {
		fmt.Fprintf(r.progress, "\rscanned %d, moved %d", r.res.Scanned, r.res.Moved)
	}
}

func joinNotes(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// printReplay prints the messages a replay moved, or would move, and a
// summary on standard error.
func (a *app) printReplay(r *replayer, o replayOptions) error {
	res := &r.res
	ms := make([]*dlqMessage, len(res.Messages))
	byMsg := make(map[*dlqMessage]replayedMsg, len(res.Messages))
	for i, m := range res.Messages {
		ms[i] = m.sortKey
		byMsg[m.sortKey] = m
	}
	sortMessages(ms)
	for i, m := range ms {
		res.Messages[i] = byMsg[m]
	}
	if res.Messages == nil {
		res.Messages = []replayedMsg{}
	}
	if a.output == "json" {
		if err := a.printJSON(res); err != nil {
			return err
		}
	} else if len(res.Messages) > 0 {
		header := []string{"MESSAGE ID", "ORIGINAL ID", "ERROR CLASS", "FAILED AT", "DESTINATION"}
		if r.dlq.FIFO {
			header = append(header, "GROUP")
		}
		if r.yes {
			header = append(header, "NEW MESSAGE ID")
		}
		var rows [][]string
		for _, m := range res.Messages {
			row := []string{m.MessageID, m.OriginalMessageID, orDash(m.ErrorClass), fmtTime(m.FailedAt), queueName(m.Destination)}
			if r.dlq.FIFO {
				row = append(row, m.GroupID)
			}
			if r.yes {
				row = append(row, orDash(m.NewMessageID))
			}
			rows = append(rows, row)
		}
		if err := a.table(header, rows); err != nil {
			return err
		}
	}
	w := a.err
	if res.NoSource > 0 {
		fmt.Fprintf(w, "%d matching message(s) stay: their failure metadata names no source queue (use --to)\n", res.NoSource)
	}
	if res.LimitHit {
		fmt.Fprintf(w, "stopped at --limit %d\n", o.limit)
	}
	if res.FailedAgain > 0 {
		fmt.Fprintf(w, "%d message(s) replayed by this run failed again and came back to the dead-letter queue: not replayed twice\n", res.FailedAgain)
	}
	if !r.yes {
		fmt.Fprintf(w, "dry run: nothing moved, use --yes to move the %d matching message(s) (scanned %d; filter: %s)\n",
			res.Matched, res.Scanned, res.Filter)
		return nil
	}
	audit := o.audit
	if audit == "-" {
		audit = "standard error"
	}
	fmt.Fprintf(w, "moved %d message(s) (scanned %d; filter: %s); audit log: %s\n", res.Moved, res.Scanned, res.Filter, audit)
	return nil
}

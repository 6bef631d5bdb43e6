package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/dlq"
)

// replayResult is what a replay did, in -o json output.
type replayResult = dlq.ReplayResult

// auditRecord is one line of the audit log.
type auditRecord = dlq.AuditRecord

type replayOptions struct {
	filter     filterFlags
	to         string
	limit      int
	rate       float64
	audit      auditFlags
	visibility time.Duration
	// at is when the filter's times were read (a dry run's "now"), and
	// since and until the times they gave.
	at, since, until time.Time
	// fresh: run as redrive --fresh, which takes no filter.
	fresh bool
}

func (d *dlqCmd) newReplayCmd() *cobra.Command {
	var o replayOptions
	cmd := &cobra.Command{
		Use:   "replay DLQ",
		Short: "Move chosen dead-letter messages back to their source queue (dry run unless --yes)",
		Long: `Move the dead-letter messages that pass every filter back to the queue they
failed in, or to --to QUEUE.

Without --yes it is a dry run: it prints what would move and where, and moves
nothing. With --yes, for each message it sends the copy first, then deletes
the original from the dead-letter queue: an interruption loses nothing, at
worst a message is in both queues. Ctrl-C stops between two messages.

Without --to a message goes back only to a queue that sends its dead letters
to this dead-letter queue (ListDeadLetterSourceQueues, or the queues' redrive
policies where the endpoint lacks it): the queue SQS's own redrive moved it
from (DeadLetterQueueSourceArn, which only SQS sets), else the source queue in
its failure metadata. That metadata is message attributes, which whoever sends
a message can set: a message naming another queue stays, and is listed with
the reason; give --to to send it elsewhere. With --to one of the source
queues of a dead-letter queue that several queues share, only the messages
that failed in that queue go there: the others stay, listed with the reason
(their handler is another queue's), for a replay without --to. A --to queue
that is itself a dead-letter queue, where messages would not run, is refused
unless --force.

The copy keeps the body, every message attribute (the failure metadata stays
as history; the runtimes replace it if the message fails again), the
idempotency key, the X-Ray trace header and, on FIFO queues, the message
group; its deduplication ID is the original message ID and its replay count.
It gets the Number attribute sqsworker.replays: 1, or one more than the
message had. SQS allows 10 attributes: when the message already has 10, its
failure metadata is kept as the one JSON attribute sqsworker.failure instead
of one attribute per field (the form the runtimes use when room is short),
and when even that leaves no room the copy goes without the count. A message
of the largest size SQS takes (1 MiB, attributes included) has no room for
the count either: its copy goes without. The audit log says which. A message
whose copy SQS refuses all the same (larger than the destination's
MaximumMessageSize) stays, listed with the reason, and the replay goes on.
` + filterHelp + `
  --limit N             move at most N messages

Messages are received with a visibility timeout of --visibility; those left
in place are all made visible again at once when the replay ends. A message
is copied, and deleted, only while half of --visibility or more is left of
its hide: one with less is hidden again first (one call for the rest of its
receive), and one that SQS will not hide again (visible again, or received
by another reader meanwhile) is not copied, or not deleted, and the replay
exits non-zero. Give --visibility more than twice the time one move takes.
On a FIFO queue a group is replayed in order, up to its first message that
stays. A copy that fails again and comes back while the replay runs is not
replayed a second time. A message that is a copy of a job the replay moved already
(the same original message ID, source queue, body and attributes: a
dead-letter send whose reply was lost, sent again by the SDK) is deleted
instead of replayed, and counted as a dropped duplicate: the job runs once.
A copy the replay did not read (it stopped at --limit first) stays; a later
replay sends it under the job's idempotency key.
What was read is compared with the queue's approximate count.
With --yes, each moved message is appended as one JSON line to the audit log
(--audit; "-" for standard error; created readable by you only, never through
a symbolic link): time, caller (sts:GetCallerIdentity), dead-letter queue,
destination, original, dead-letter and new message IDs, replay count, filter;
a dropped duplicate as action drop-duplicate.
A line with the action "replay-start" comes before each copy is sent (and
before each duplicate is deleted: its note says so), and a "replay-failed"
line after a copy that could not be sent (or a duplicate not deleted): a
replay-start without its "replay", "drop-duplicate" or "replay-failed" line
(same dead-letter message ID) is a message whose replay was killed between
the two. Its copy may have been sent, and its original is back in the
dead-letter queue: a rerun sends it again, with the same idempotency key, so
that a handler keyed by it runs the job once.`,
		Example: `  # what would move: the messages that failed with one class in the last 2 hours
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago"

  # move them, 20 per second, to their source queue
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago" --rate 20 --yes

  # one tenant's orders for one customer, to another queue
  sqsworker dlq replay orders-dlq --attr tenant=acme --json-field order.customer=c-42 --to orders-retry --yes`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return d.replay(cmd, args[0], o)
		},
	}
	o.filter.add(cmd, "replay")
	f := cmd.Flags()
	f.IntVar(&o.limit, "limit", 0, "move at most this many messages (0: no limit)")
	f.Float64Var(&o.rate, "rate", 0, "move at most this many messages per second (0: no limit)")
	f.StringVar(&o.to, "to", "", "send the messages to this queue instead of their source queue (not a dead-letter queue, unless --force)")
	f.DurationVar(&o.visibility, "visibility", defaultPeekVisibility, "visibility timeout of the messages while the replay holds them (whole seconds, 1s to 12h)")
	o.audit.add(cmd, "move the messages (without it: a dry run)")
	return cmd
}

// warnForeign warns, for a destination given with --to as arg, when it is
// not a source of q (see dlq.Queue.ForeignDestination): a slip (orders-v2
// for orders) is the operator's to catch, said before a dry run's plan and
// before a replay or a redrive. The check only warns: should it fail, the
// command goes on, and says so. It returns ctx's error once ctx is done.
func (d *dlqCmd) warnForeign(ctx context.Context, q *dlq.Queue, to dlq.Target, arg string) error {
	switch warn, err := q.ForeignDestination(ctx, to); {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		fmt.Fprintf(d.a.err, "warning: --to %s: could not check that it sends its dead letters to %s: %v\n", arg, q.Name, err)
	case warn != "":
		fmt.Fprintf(d.a.err, "warning: --to %s: %s\n", arg, warn)
	}
	return nil
}

func (d *dlqCmd) replay(cmd *cobra.Command, dlqArg string, o replayOptions) error {
	a, ctx := d.a, cmd.Context()
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
	} else if err := dlq.CheckPace(o.rate, o.visibility); err != nil {
		errs = append(errs, fmt.Errorf("--rate and --visibility: %w", err))
	}
	if o.audit.yes {
		if err := o.audit.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	o.at = time.Now()
	filter, err := o.filter.parse(o.at)
	o.since, o.until = filter.Since, filter.Until
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	q, err := d.open(ctx, dlqArg)
	if err != nil {
		return err
	}
	cfg := dlq.ReplayConfig{Filter: filter, Limit: o.limit, PerSecond: o.rate, Visibility: o.visibility}
	if o.to != "" {
		to, err := q.Target(ctx, o.to)
		if err != nil {
			return toError(err)
		}
		if err := d.warnForeign(ctx, q, to, o.to); err != nil {
			return err
		}
		cfg.To = to.URL
	}
	var res *dlq.ReplayResult
	var runErr error
	if !o.audit.yes {
		res, runErr = q.Plan(ctx, cfg)
	} else {
		audit, closeAudit, err := d.openAudit(ctx, o.audit)
		if err != nil {
			return err
		}
		defer closeAudit()
		cfg.Audit = audit
		// On a terminal (and not with the audit on standard error): the
		// messages read, how fast, and how long is left.
		var pr *progress
		if o.audit.file != "-" {
			pr = a.progress("read", "messages")
		}
		if pr != nil {
			if n, err := q.Counts(ctx); err == nil && n.Visible+n.InFlight > 0 {
				pr.SetTotal(int64(n.Visible + n.InFlight))
			}
			read := 0
			cfg.Progress = func(p dlq.Progress) { pr.Add(int64(p.Scanned - read)); read = p.Scanned }
		}
		res, runErr = q.Replay(ctx, cfg)
		pr.Finish()
	}
	if res == nil {
		return runErr
	}
	if err := d.printReplay(q, res, o); err != nil {
		return errors.Join(runErr, err)
	}
	undeleted := 0 // duplicate copies whose delete failed
	for _, m := range res.Dropped {
		if m.Note != "" {
			undeleted++
		}
	}
	switch {
	case runErr != nil:
		return runErr
	case res.NotDeleted > 0:
		return fmt.Errorf("%d message(s) were copied but could not be deleted from %s: they are in both queues (see the audit log); each copy carries its job's idempotency key (unless its note above says not), so a later `sqsworker dlq replay %s` sends the originals again under the same key, and a handler behind the idempotency middleware runs each job once",
			res.NotDeleted, q.Name, q.Name)
	case undeleted > 0:
		return fmt.Errorf("%d duplicate copy(ies) of replayed jobs could not be deleted from %s: they stay, and a later replay sends their jobs again, under the same idempotency key (see above and the audit log)",
			undeleted, q.Name)
	case res.OtherSource > 0:
		return fmt.Errorf("%d matching message(s) stay in %s: they failed in another of its source queues than --to %s (see above); replay them without --to, which sends each back to its own",
			res.OtherSource, q.Name, queueName(cfg.To))
	case res.Unsent > 0:
		return fmt.Errorf("%d matching message(s) stay in %s: SQS refused their copies (see above)", res.Unsent, q.Name)
	case res.Expired > 0:
		return fmt.Errorf("%d matching message(s) stay in %s, not copied: their visibility timeout ran out before their turn and SQS would not hide them again, so another reader may hold them (a destination slow to answer, or a low --rate; see above); run the replay again once no other reader holds them",
			res.Expired, q.Name)
	case res.Refused > 0:
		return fmt.Errorf("%d matching message(s) stay in %s: their source queue does not send its dead letters there (see above); give --to to send them to a queue of your choice",
			res.Refused, q.Name)
	case res.NoSource > 0 && !res.DryRun:
		return fmt.Errorf("%d matching message(s) stay in %s: nothing names their source queue (no failure metadata); give --to to send them to a queue of your choice",
			res.NoSource, q.Name)
	}
	return nil
}

// sumValues adds up the values of m.
func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// unmatchedClasses lists the counts of ReplayResult.Unmatched, the largest
// first: "rate-limited 3, (none) 1".
func unmatchedClasses(u map[string]int) string {
	classes := slices.Collect(maps.Keys(u))
	slices.SortFunc(classes, func(a, b string) int { return cmp.Or(u[b]-u[a], strings.Compare(a, b)) })
	parts := make([]string, len(classes))
	for i, c := range classes {
		name := c
		if c == "" {
			name = "(none)"
		}
		parts[i] = fmt.Sprintf("%s %d", name, u[c])
	}
	return strings.Join(parts, ", ")
}

// printReplay prints the messages a replay moved, or would move, and a
// summary on standard error.
func (d *dlqCmd) printReplay(q *dlq.Queue, res *dlq.ReplayResult, o replayOptions) error {
	a := d.a
	if a.output == "json" {
		if err := a.printJSON(res); err != nil {
			return err
		}
	} else if len(res.Messages) > 0 {
		header := []string{"MESSAGE ID", "ORIGINAL ID", "ERROR CLASS", "FAILED AT", "DESTINATION"}
		if q.FIFO {
			header = append(header, "GROUP")
		}
		if !res.DryRun {
			header = append(header, "NEW MESSAGE ID")
		}
		var rows [][]string
		for _, m := range res.Messages {
			row := []string{m.MessageID, m.OriginalMessageID, orDash(m.ErrorClass), fmtTime(m.FailedAt), queueName(m.Destination)}
			if q.FIFO {
				row = append(row, m.GroupID)
			}
			if !res.DryRun {
				row = append(row, orDash(m.NewMessageID))
			}
			rows = append(rows, row)
		}
		if err := a.table(header, rows); err != nil {
			return err
		}
	}
	w := a.err
	if a.output != "json" {
		for _, m := range res.Messages {
			if m.Note != "" {
				fmt.Fprintf(w, "note: message %s (original %s): %s\n", m.MessageID, m.OriginalMessageID, m.Note)
			}
		}
	}
	for _, s := range res.Stayed {
		fmt.Fprintf(w, "stays: message %s (original %s): %s\n", s.MessageID, s.OriginalMessageID, s.Reason)
	}
	if res.NoSource > 0 {
		fmt.Fprintf(w, "%d matching message(s) stay: nothing names their source queue (no failure metadata; use --to)\n", res.NoSource)
	}
	if res.LimitHit {
		fmt.Fprintf(w, "stopped at --limit %d\n", o.limit)
	}
	if res.FailedAgain > 0 {
		fmt.Fprintf(w, "%d message(s) replayed by this run failed again and came back to the dead-letter queue: not replayed twice\n", res.FailedAgain)
	}
	for _, m := range res.Dropped {
		if m.Note != "" {
			fmt.Fprintf(w, "duplicate: message %s (original %s), a copy of the job of message %s: %s\n", m.MessageID, m.OriginalMessageID, m.DuplicateOf, m.Note)
		}
	}
	if res.Duplicates > 0 {
		verb := "dropped"
		if res.DryRun {
			verb = "would drop"
		}
		fmt.Fprintf(w, "%s %d duplicate copy(ies) of replayed jobs (the same original message ID, source queue, body and attributes; a dead-letter send whose reply was lost, sent again): each job is replayed once\n",
			verb, res.Duplicates)
	}
	d.coverage(res.Coverage)
	if left := sumValues(res.Unmatched); left > 0 && left == res.Scanned {
		fmt.Fprintf(w, "no message matched the filter (%s); the %d it left out, by error class: %s (--error-class and --attr match exactly)\n",
			res.Filter, left, unmatchedClasses(res.Unmatched))
	}
	if res.DryRun {
		fmt.Fprintf(w, "dry run: nothing moved, use --yes to move the %d matching message(s) (scanned %d; filter: %s)\n",
			res.Matched, res.Scanned, res.Filter)
		// With --yes the queue is read again, and the times too: jobs
		// that fail meanwhile (an outage under way) would match and
		// move unseen.
		// To the nanosecond, as the filter reads them: a time to the
		// second would take in the failures of the second it cut.
		exact := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
		relative := func(flag string) bool { _, err := time.Parse(time.RFC3339Nano, flag); return flag != "" && err != nil }
		var fixed []string
		if relative(o.filter.since) {
			fixed = append(fixed, "--since "+exact(o.since))
		}
		// A time bound matches only messages with a failure time: those
		// SQS moved, and copies without metadata, have none. Suggested
		// where the filter leaves them out already (a time bound, an
		// error class), it changes nothing else.
		stamped := o.filter.since != "" || o.filter.until != "" || len(o.filter.classes) > 0
		switch {
		case o.filter.until == "" && stamped:
			fixed = append(fixed, "--until "+exact(o.at))
		case relative(o.filter.until):
			fixed = append(fixed, "--until "+exact(o.until))
		}
		switch {
		case o.fresh:
		case len(fixed) > 0:
			fmt.Fprintf(w, "with --yes the queue is read again: to leave out the messages that fail from now on, give the times of this dry run: %s\n", strings.Join(fixed, " "))
		case !stamped:
			fmt.Fprintln(w, "with --yes the queue is read again: messages that fail from now on match too (--until would leave out those with no failure time, which SQS moved, as well)")
		}
		return nil
	}
	fmt.Fprintf(w, "moved %d message(s) (scanned %d; filter: %s); audit log: %s\n", res.Moved, res.Scanned, res.Filter, o.audit.where())
	return nil
}

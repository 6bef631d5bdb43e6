package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
)

// redriveError points to replay when the endpoint has no move tasks, and
// to --fresh when messages carry earlier attempts.
func redriveError(dlqArg string, err error) error {
	if errors.Is(err, dlq.ErrUnsupported) {
		return fmt.Errorf("%w: use `sqsworker dlq replay %s` instead, which moves messages itself (dry run first, then --yes)", err, dlqArg)
	}
	var pe *dlq.PriorAttemptsError
	if errors.As(err, &pe) {
		return &rewordedError{err: err, msg: fmt.Sprintf("not started: %d of the %d message(s) read from %s carry %s (jobs that waited as copies for a long backoff), which a message move task keeps: they would come back counting their earlier attempts. "+
			"Give --fresh to move them as \"dlq replay\" does, without it, or --keep-attempts to start the task anyway",
			pe.Carrying, pe.Sampled, pe.Queue, sqsworker.AttrPriorAttempts)}
	}
	return err
}

// rewordedError is err in the command's own words (its flags, not the
// library's fields).
type rewordedError struct {
	err error
	msg string
}

func (e *rewordedError) Error() string { return e.msg }
func (e *rewordedError) Unwrap() error { return e.err }

// defaultRedriveSample is how many messages redrive reads before the task.
const defaultRedriveSample = 100

func (d *dlqCmd) newRedriveCmd() *cobra.Command {
	var to string
	var perSecond, sample int
	var fresh, keepAttempts bool
	var af auditFlags
	cmd := &cobra.Command{
		Use:   "redrive DLQ [--to QUEUE] [--rate N] [--yes]",
		Short: "Start an SQS message move task from a dead-letter queue (dry run unless --yes; status, cancel)",
		Long: `Start SQS's own redrive (StartMessageMoveTask): SQS moves every message of the
dead-letter queue back to the queue its redrive moved it from, or to --to
QUEUE, at up to --rate messages per second (0: as fast as SQS chooses).

Without --yes it is a dry run: it checks that the endpoint has message move
tasks, and prints what the task would move and where, starting nothing. With
--yes it starts the task, appends it to the audit log (--audit, with the
caller from sts:GetCallerIdentity: a "redrive-start" line before the call,
then "redrive" with the task's handle, or "redrive-failed"; a call whose
reply was lost may have started the task, which "redrive status" shows), and
returns at once with the task's handle; "redrive status" follows the task and
"redrive cancel" stops it.

SQS documents of a moved message only its new ID and enqueue time, no
message attribute the task drops: redrive takes it that the task keeps them
all. A job that waited as a copy for a backoff longer than 12 hours carries
the attempts of its earlier copies (sqsworker.prior-attempts), and moved
back it would count them: a long backoff, a high attempt number, a retry limit reached at
its first failure. So redrive first reads up to --sample messages (default
100; 0: none) with a visibility timeout of 5s, makes them all visible again
before the task starts, and when some carry the attribute it says so and,
with --yes, does not start: give --fresh to move the messages the way
"dlq replay" does (a copy of each without the attribute, sent to the queue
SQS's redrive moved it from or to --to, then the original deleted; dry run
unless --yes; --rate applies), or --keep-attempts to start the task anyway.
A sample reads some of the messages only: --fresh is the way to be sure
every job starts fresh. Each message read counts as a receive of it, the
dry run's too; no sample is read from a queue with a redrive policy of its
own, nor while a move task of the queue runs.

SQS's redrive moves all the messages, keeps no sqsworker replay count, and
sends a message back only to the queue SQS's own redrive moved it from: the
copies sqsworker's runtimes dead-letter (with failure metadata) are not such
messages, give them --to or use "sqsworker dlq replay", which chooses messages
by error class, attributes, time or body. A move task moves every message:
--to one of the source queues of a dead-letter queue that several queues
share is refused, as it would move the others' dead letters there too. Endpoints without message move tasks
(such as the fauxqs and ElasticMQ emulators) are reported as such, with exit
code 1: use "dlq replay" there.

A dead-letter queue named "status" or "cancel" must be given by URL.`,
		Example: `  sqsworker dlq redrive orders-dlq                 # dry run
  sqsworker dlq redrive orders-dlq --yes
  sqsworker dlq redrive orders-dlq --to orders-retry --rate 50 --yes
  sqsworker dlq redrive orders-dlq --fresh --yes   # copies, without earlier attempts
  sqsworker dlq redrive status orders-dlq
  sqsworker dlq redrive cancel "$TASK_HANDLE"`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := d.a
			if perSecond < 0 || perSecond > 500 {
				return usageError{fmt.Errorf("--rate %d: SQS accepts 1 to 500 messages per second (0: its own choice)", perSecond)}
			}
			if sample < 0 {
				return usageError{fmt.Errorf("--sample %d: want 0 (read none) or more messages", sample)}
			}
			if fresh && (keepAttempts || cmd.Flags().Changed("sample")) {
				return usageError{errors.New("--fresh moves every message without its earlier attempts: --keep-attempts and --sample are for the move task")}
			}
			if fresh {
				return d.replay(cmd, args[0], replayOptions{to: to, rate: float64(perSecond), audit: af, visibility: defaultPeekVisibility, fresh: true})
			}
			if af.yes {
				if err := af.validate(); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			q, err := d.open(ctx, args[0])
			if err != nil {
				return err
			}
			cfg := dlq.RedriveConfig{PerSecond: perSecond, Sample: sample, KeepAttempts: keepAttempts}
			if to != "" {
				t, err := q.Target(ctx, to)
				if err != nil {
					return toError(err)
				}
				if err := d.warnForeign(ctx, q, t, to); err != nil {
					return err
				}
				cfg.To = t.URL
			}
			if !af.yes {
				p, err := q.PlanRedrive(ctx, cfg)
				if err != nil {
					return redriveError(args[0], err)
				}
				return d.printRedrive(q, p, false)
			}
			audit, closeAudit, err := d.openAudit(ctx, af)
			if err != nil {
				return err
			}
			defer closeAudit()
			cfg.Audit = audit
			p, err := q.StartRedrive(ctx, cfg)
			if p != nil && !errors.Is(err, dlq.ErrPriorAttempts) { // the error says it
				d.printSample(p)
			}
			if p != nil && p.TaskHandle != "" {
				if perr := d.printRedrive(q, p, true); perr != nil {
					err = errors.Join(err, perr)
				}
				fmt.Fprintf(a.err, "follow it with: sqsworker dlq redrive status %s; audit log: %s\n", args[0], af.where())
			}
			return redriveError(args[0], err)
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "move the messages to this queue instead of the queues SQS moved them from")
	cmd.Flags().IntVar(&perSecond, "rate", 0, "messages per second, 1 to 500 (0: SQS's choice; with --fresh: no limit)")
	cmd.Flags().IntVar(&sample, "sample", defaultRedriveSample, "read up to this many messages first, to find jobs that carry earlier attempts (0: none)")
	cmd.Flags().BoolVar(&fresh, "fresh", false, "move the messages as replay does, without their earlier attempts (sqsworker.prior-attempts), instead of a move task")
	cmd.Flags().BoolVar(&keepAttempts, "keep-attempts", false, "start the move task even though sampled messages carry earlier attempts")
	af.add(cmd, "start the task (without it: a dry run)")
	cmd.AddCommand(d.newRedriveStatusCmd(), d.newRedriveCancelCmd())
	return cmd
}

func (d *dlqCmd) printRedrive(q *dlq.Queue, p *dlq.RedrivePlan, started bool) error {
	a := d.a
	if a.output == "json" {
		return a.printJSON(p)
	}
	dest := "the queues SQS's redrive moved them from"
	if p.Destination != nil {
		dest = p.Destination.Name
	} else if len(p.Sources) > 0 {
		names := make([]string, len(p.Sources))
		for i, s := range p.Sources {
			names[i] = queueName(s)
		}
		dest += " (sources: " + strings.Join(names, ", ") + ")"
	}
	count := "its messages"
	if p.Approximate >= 0 {
		count = fmt.Sprintf("about %d message(s)", p.Approximate)
	}
	rate := "as fast as SQS chooses"
	if p.PerSecond > 0 {
		rate = fmt.Sprintf("at up to %d per second", p.PerSecond)
	}
	if started {
		fmt.Fprintf(a.out, "started moving %s of %s to %s, %s\ntask handle: %s\n", count, q.Name, dest, rate, p.TaskHandle)
		return nil
	}
	for _, t := range p.Running {
		fmt.Fprintf(a.err, "a message move task is running already: %s (%d moved); SQS runs one at a time\n", t.TaskHandle, t.Moved)
	}
	d.printSample(p)
	next := "use --yes to start the task"
	if p.PriorAttempts > 0 {
		next = "--yes alone would not start it (see the warning): use --fresh --yes to move them without earlier attempts, or --keep-attempts --yes to start the task anyway"
	}
	if p.NoSource > 0 {
		fmt.Fprintf(a.err, "warning: %d of the %d message(s) read carry no DeadLetterQueueSourceArn (SQS's redrive did not move them here: copies the runtimes sent): a move task without --to fails on them; use `sqsworker dlq replay %s` instead\n", p.NoSource, p.Sampled, q.Name)
		next = "--yes would not start it (see the warning)"
	}
	_, err := fmt.Fprintf(a.out, "dry run: would move %s of %s to %s, %s; %s\n", count, q.Name, dest, rate, next)
	return err
}

// printSample says on standard error what the sample read before a
// redrive found.
func (d *dlqCmd) printSample(p *dlq.RedrivePlan) {
	w := d.a.err
	if p.SampleNote != "" {
		fmt.Fprintf(w, "note: sample: %s\n", p.SampleNote)
	}
	switch {
	case p.PriorAttempts > 0 && p.TaskHandle != "":
		fmt.Fprintf(w, "warning: %d of the %d message(s) read carry %s: moved as they are (--keep-attempts), they come back counting their earlier attempts\n",
			p.PriorAttempts, p.Sampled, sqsworker.AttrPriorAttempts)
	case p.PriorAttempts > 0:
		fmt.Fprintf(w, "warning: %d of the %d message(s) read carry %s (jobs that waited as copies for a long backoff): "+
			"a move task keeps it, and they would come back counting their earlier attempts; use --fresh to move them without it\n",
			p.PriorAttempts, p.Sampled, sqsworker.AttrPriorAttempts)
	}
	if p.Duplicates > 0 {
		fmt.Fprintf(w, "warning: %d of the %d message(s) read are duplicate copies of a job read before them (a dead-letter send whose reply was lost, sent again): "+
			"a move task moves every copy, and the job runs once per copy unless its handler is idempotent; dlq replay moves one copy per job and deletes the others\n",
			p.Duplicates, p.Sampled)
	}
}

func (d *dlqCmd) newRedriveStatusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status DLQ",
		Short: "List the message move tasks of a dead-letter queue (ListMessageMoveTasks)",
		Long: `List the most recent message move tasks (up to 10) of a dead-letter queue:
their handle (of a running task), status, progress and destination.`,
		Example: `  sqsworker dlq redrive status orders-dlq
  sqsworker dlq redrive status orders-dlq -o json`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := d.a
			ctx := cmd.Context()
			q, err := d.open(ctx, args[0])
			if err != nil {
				return err
			}
			tasks, err := q.Redrives(ctx)
			if err != nil {
				return redriveError(args[0], err)
			}
			if a.output == "json" {
				return a.printJSON(tasks)
			}
			if len(tasks) == 0 {
				fmt.Fprintf(a.out, "no message move task for %s\n", q.Name)
				return nil
			}
			rows := make([][]string, len(tasks))
			for i, t := range tasks {
				toMove := "-"
				if t.ToMove != nil {
					toMove = strconv.FormatInt(*t.ToMove, 10)
				}
				dest := "source queues"
				if t.Destination != "" {
					dest = t.Destination
					if arn, err := dlq.ParseARN(t.Destination); err == nil {
						dest = arn.Name
					}
				}
				rows[i] = []string{orDash(t.TaskHandle), t.Status, fmtTime(t.Started), strconv.FormatInt(t.Moved, 10), toMove, dest, orDash(t.FailureReason)}
			}
			return a.table([]string{"TASK HANDLE", "STATUS", "STARTED", "MOVED", "TO MOVE", "DESTINATION", "FAILURE"}, rows)
		},
	}
}

func (d *dlqCmd) newRedriveCancelCmd() *cobra.Command {
	var af auditFlags
	cmd := &cobra.Command{
		Use:   "cancel TASK_HANDLE",
		Short: "Cancel a running message move task (CancelMessageMoveTask)",
		Long: `Cancel a running message move task, given its handle (from "redrive" or
"redrive status"), and append it to the audit log (--audit). The messages
already moved stay where they are.`,
		Example: `  sqsworker dlq redrive cancel "$TASK_HANDLE"`,
		Args:    exactArgs(1, "TASK_HANDLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := d.a
			if err := af.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := a.sqs(ctx)
			if err != nil {
				return err
			}
			audit, closeAudit, err := d.openAudit(ctx, af)
			if err != nil {
				return err
			}
			defer closeAudit()
			moved, err := dlq.CancelRedrive(ctx, c, args[0], audit)
			if err != nil {
				return redriveError("DLQ", err)
			}
			if a.output == "json" {
				return a.printJSON(map[string]any{"taskHandle": args[0], "cancelled": true, "moved": moved})
			}
			_, err = fmt.Fprintf(a.out, "cancelled; about %d message(s) had been moved\n", moved)
			return err
		},
	}
	af.add(cmd, "")
	return cmd
}

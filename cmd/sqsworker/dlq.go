package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/dlq"
)

func init() {
	commands = append(commands, newDLQCmd)
}

// dlqCmd holds what the dlq commands share.
type dlqCmd struct {
	a     *app
	force bool
}

func newDLQCmd(a *app) *cobra.Command {
	d := &dlqCmd{a: a}
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect a dead-letter queue, replay chosen messages, redrive or purge it",
		Long: `Inspect a dead-letter queue and move its messages back.

Messages dead-lettered by sqsworker's runtimes carry failure metadata (error
class and text, attempts, first-received and failed-at times, source queue,
original message ID): ls and show print it, and replay selects messages by it
and sends them back to the queue they came from.

The dlq commands act on dead-letter queues only: a queue with a redrive policy
of its own, or that no queue names as its dead-letter queue, is a live queue,
which receiving from would consume (each read counts as a receive, and SQS
moves a message to the dead-letter queue after its redrive policy's count) and
purging would empty. Such a queue is refused before anything is received from
it, unless --force. The sources are listed with ListDeadLetterSourceQueues, or
where the endpoint lacks it (emulators), from the redrive policies of the
queues ListQueues lists.

SQS has no peek: ls, show and replay receive the messages with a short
visibility timeout (--visibility) and make the ones they leave in place
visible again at once (ChangeMessageVisibilityBatch to 0) when they are done.
While they run, other consumers of the dead-letter queue do not see the
messages they hold. Each read is compared with the queue's approximate count:
"saw 65 of about 75" says that some messages were not seen, and why.

replay, redrive and purge are dry runs or ask first, and append what they do
to an audit log (--audit), with who did it (sts:GetCallerIdentity).

Queues are given by name, URL or ARN.`,
		Example: `  sqsworker dlq ls orders-dlq
  sqsworker dlq show orders-dlq 5f1c0a4e-8d0b-4c1e-9a57-3f2b6d1e0c11 --body
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago"
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago" --yes
  sqsworker dlq redrive orders-dlq --yes
  sqsworker dlq purge orders-dlq`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q; see --help", args[0], cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().BoolVar(&d.force, "force", false,
		"act on the queue even if it does not look like a dead-letter queue (it has a redrive policy of its own, or no queue names it as its dead-letter queue); send to a --to queue that is a dead-letter queue")
	cmd.AddCommand(d.newListCmd(), d.newShowCmd(), d.newReplayCmd(), d.newRedriveCmd(), d.newPurgeCmd())
	return cmd
}

// open opens a dead-letter queue given by name or URL, refusing a queue that
// does not look like one unless --force, and prints what Open noted.
func (d *dlqCmd) open(ctx context.Context, nameOrURL string) (*dlq.Queue, error) {
	c, err := d.a.sqs(ctx)
	if err != nil {
		return nil, err
	}
	// The library's warnings (a receive that lost its response, a release
	// that failed) go to standard error; its notes are printed below.
	log := slog.New(slog.NewTextHandler(d.a.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	q, err := dlq.Open(ctx, c, nameOrURL, dlq.Config{Force: d.force, Logger: log})
	if nd := (*dlq.NotDeadLetterError)(nil); errors.As(err, &nd) && nd.DeadLetterQueue != "" {
		// Most likely the source queue was given for its dead-letter queue.
		return nil, fmt.Errorf("%w; did you mean its dead-letter queue, %s? (give --force to act on %s itself anyway)",
			err, nd.DeadLetterQueue, queueName(nd.Queue))
	}
	if errors.Is(err, dlq.ErrNotDeadLetterQueue) || errors.Is(err, dlq.ErrCannotCheck) {
		return nil, fmt.Errorf("%w (give --force to act on it anyway)", err)
	}
	if dlq.IsQueueMissing(err) {
		// Named with the region and endpoint asked, as the other commands
		// name a missing queue.
		return nil, d.a.queueError(nameOrURL, err)
	}
	if err != nil {
		return nil, err
	}
	for _, n := range q.Notes {
		kind := "note"
		if strings.HasPrefix(n, "opened with force") {
			kind = "warning"
		}
		fmt.Fprintf(d.a.err, "%s: %s\n", kind, n)
	}
	return q, nil
}

// toError is the error of a --to queue that is refused.
func toError(err error) error {
	if errors.Is(err, dlq.ErrDeadLetterDestination) {
		return fmt.Errorf("--to: %w (or give --force to send them there anyway)", err)
	}
	return fmt.Errorf("--to: %w", err)
}

// coverage prints how a read fell short of the queue's count, if it did.
func (d *dlqCmd) coverage(c dlq.Coverage) {
	if s := c.Shortfall(); s != "" {
		fmt.Fprintf(d.a.err, "warning: %s\n", s)
	}
}

// queueName returns the name of a queue from its URL (or the text itself
// when it is not a URL).
func queueName(url string) string {
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		return url[i+1:]
	}
	return url
}

// Defaults of the flags that bound a peek at a dead-letter queue.
const (
	defaultPeekVisibility = dlq.DefaultVisibility
	defaultPeekMax        = 1000
)

// validateVisibility checks a --visibility flag.
func validateVisibility(v time.Duration) error {
	if v < time.Second || v > 12*time.Hour || v%time.Second != 0 {
		return usageError{fmt.Errorf("--visibility %s: want a whole number of seconds from 1s to 12h", v)}
	}
	return nil
}

// exactArgs is cobra.ExactArgs with a usage error that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %s (%d argument(s)), got %d; see --help",
				cmd.CommandPath(), names, n, len(args))}
		}
		return nil
	}
}

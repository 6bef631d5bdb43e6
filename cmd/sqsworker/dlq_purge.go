package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/dlq"
)

func (d *dlqCmd) newPurgeCmd() *cobra.Command {
	var af auditFlags
	cmd := &cobra.Command{
		Use:   "purge DLQ",
		Short: "Delete every message of a dead-letter queue (PurgeQueue), after confirmation",
		Long: `Delete every message of a dead-letter queue with SQS's PurgeQueue. There is no
undo: the messages and their failure metadata are gone. A queue that is not a
dead-letter queue (it has a redrive policy of its own, or no queue names it as
its dead-letter queue) is refused, unless --force.

Without --yes it says about how many messages go and, when several source
queues share the dead-letter queue, names every one of them (all lose their
dead letters); then it asks for the queue's name on standard input and purges
only when the name typed matches; anything else, or no input, refuses with exit
code 1. The purge is appended to the audit log (--audit) before it is sent,
with the caller (sts:GetCallerIdentity) and the approximate number of
messages. SQS allows one purge per queue every 60 seconds and may take that
long to delete the messages. When the reply to the purge is lost and the
retry of it is told a purge is under way, the purge is this one: it is
reported done, with a warning.`,
		Example: `  sqsworker dlq purge orders-dlq          # asks you to type "orders-dlq"
  sqsworker dlq purge orders-dlq --yes    # in scripts`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			a := d.a
			if err := af.validate(); err != nil {
				return err
			}
			ctx := cmd.Context()
			q, err := d.open(ctx, args[0])
			if err != nil {
				return err
			}
			name := q.Name
			if !af.yes {
				fmt.Fprintf(a.err, "%s%s\nType the queue name (%s) to confirm: ", q.PurgeWarning(ctx), whose(q.ARN), name)
				line, ok, rerr := readConfirmation(ctx, a.in)
				if !ok {
					fmt.Fprintln(a.err)
					return fmt.Errorf("not purged: interrupted: %w", context.Cause(ctx))
				}
				typed := strings.TrimSpace(line)
				switch {
				case typed == "" && rerr != nil:
					fmt.Fprintln(a.err)
					return fmt.Errorf("not purged: no confirmation (give --yes to purge %s without asking)", name)
				case typed != name:
					return fmt.Errorf("not purged: %q is not the queue name %q", typed, name)
				}
			}
			audit, closeAudit, err := d.openAudit(ctx, af)
			if err != nil {
				return fmt.Errorf("not purged: %w", err)
			}
			defer closeAudit()
			if err := q.Purge(ctx, dlq.PurgeConfig{Audit: audit}); err != nil {
				if errors.Is(err, dlq.ErrPurgeInProgress) {
					return fmt.Errorf("not purged: %w", err)
				}
				return err
			}
			if a.output == "json" {
				return a.printJSON(map[string]any{"queue": q.URL, "purged": true})
			}
			_, err = fmt.Fprintf(a.out, "purged %s (SQS may take up to 60 seconds to delete every message); audit log: %s\n", name, af.where())
			return err
		},
	}
	af.add(cmd, "purge without asking for the queue name")
	return cmd
}

// readConfirmation reads a line of in, or gives up when ctx ends first (an
// interrupt): ok is false then. The read runs in a goroutine of its own,
// which ends with the read, at the latest with the process: a read of a
// terminal cannot be cut short.
func readConfirmation(ctx context.Context, in io.Reader) (line string, ok bool, err error) {
	type read struct {
		line string
		err  error
	}
	got := make(chan read, 1)
	go func() {
		l, err := bufio.NewReader(in).ReadString('\n')
		got <- read{l, err}
	}()
	select {
	case r := <-got:
		return r.line, true, r.err
	case <-ctx.Done():
		return "", false, nil
	}
}

// whose says, after a purge's warning, whose queue arn is: the account and
// region it is in, so that a purge of the wrong account's queue of the same
// name (the wrong profile) is seen before the name is typed.
func whose(arn string) string {
	a, err := dlq.ParseARN(arn)
	if err != nil {
		return ""
	}
	return fmt.Sprintf(" The queue is in account %s, region %s.", a.Account, a.Region)
}

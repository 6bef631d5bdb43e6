package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/dlq"
)

func init() {
	commands = append(commands, newBatchCmd)
}

func newBatchCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Inspect batches of chunk jobs (package batch)",
		Long: `Inspect the batches that producers create with the batch package: a job
split into chunk jobs, counted in the idempotency table as they succeed, with
a completion job sent once every chunk has succeeded.`,
		Example: `  sqsworker batch show report-2026-12 --table jobs-idempotency
  sqsworker batch show report-2026-12 --table jobs-idempotency --dlq report-chunks-dlq`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newBatchShowCmd(a))
	return cmd
}

type batchShowFlags struct {
	table string
	dlq   string
	force bool
	peek  peekFlags
}

func newBatchShowCmd(a *app) *cobra.Command {
	var f batchShowFlags
	cmd := &cobra.Command{
		Use:   "show BATCH_ID --table TABLE [--dlq DLQ]",
		Short: "Show a batch's progress: done, failed and pending chunks, and why chunks failed",
		Long: `Show a batch's progress from the idempotency table it was created in:

  CHUNKS     the chunks in the batch, and when the producer had sent them all
  DONE       chunks that succeeded, each counted once
  FAILED     chunks recorded as failed for good (Permanent, or their last
             attempt) and not succeeded since
  PENDING    the rest: queued, running, retrying, or dead-lettered by SQS
             without the consumer knowing it was their last attempt
  COMPLETED  whether every chunk succeeded, and when the completion job was
             sent to the callback queue

then the failed chunks with their error class and error, as many as the
batch's item lists (at most ` + strconv.Itoa(batch.MaxFailedIndexes) + `: FAILED counts every one, and says how
many are not listed; --dlq finds those in the dead-letter queue). With --dlq, the
dead-letter queue of the chunks' queue is read too (each message received
once and released at once, as dlq ls does) and the batch's chunks found there
are listed with the failure metadata the runtimes added: their dead-letter
reasons. Message bodies are never printed.`,
		Example: `  sqsworker batch show report-2026-12 --table jobs-idempotency
  sqsworker batch show report-2026-12 --table jobs-idempotency --dlq report-chunks-dlq -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("batch show takes one BATCH_ID argument; see --help")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.table == "" {
				return usageError{errors.New("--table is required: the idempotency table the batch was created in (the producer's batch.Config.Table)")}
			}
			if err := batch.CheckID(args[0]); err != nil {
				return usageError{err}
			}
			if f.dlq != "" {
				if err := f.peek.validate(); err != nil {
					return err
				}
			}
			return a.showBatch(cmd.Context(), args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.table, "table", "", "the idempotency table the batch was created in (name or ARN); required")
	fl.StringVar(&f.dlq, "dlq", "", "also list the batch's chunks found in this dead-letter queue (name, URL or ARN), with their dead-letter reasons")
	fl.BoolVar(&f.force, "force", false, "read --dlq even if it does not look like a dead-letter queue")
	fl.DurationVar(&f.peek.visibility, "visibility", defaultPeekVisibility,
		"with --dlq: visibility timeout of the messages while they are read (whole seconds, 1s to 12h); they are released at once after")
	fl.IntVar(&f.peek.max, "max", defaultPeekMax, "with --dlq: read at most this many messages")
	return cmd
}

// batchShown is what batch show prints with -o json.
type batchShown struct {
	*batch.Progress
	Table       string            `json:"table"`
	DeadLetters []batchDeadLetter `json:"deadLetters,omitempty"`
	DLQ         string            `json:"dlq,omitempty"`
	Coverage    *dlq.Coverage     `json:"dlqCoverage,omitempty"`
}

type batchDeadLetter struct {
	Index      int    `json:"index"`
	MessageID  string `json:"messageId"`
	ErrorClass string `json:"errorClass"`
	Error      string `json:"error"`
	Attempts   int    `json:"attempts"`
	FailedAt   string `json:"failedAt,omitempty"`
	Verified   bool   `json:"verified"`
}

func (a *app) showBatch(ctx context.Context, id string, f batchShowFlags) error {
	cfg, err := a.loadAWSConfig(ctx)
	if err != nil {
		return err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	db := dynamodb.NewFromConfig(cfg)
	// The table's partition key is the idempotency store's KeyAttr, "id"
	// unless it was set: take it from the table, which batch.New checks.
	desc, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &f.table})
	var missing *ddbtypes.ResourceNotFoundException
	if errors.As(err, &missing) {
		return fmt.Errorf("table %s does not exist in region %s: pass --table the idempotency table the batch was created in (the producer's batch.Config.Table): %w", f.table, cfg.Region, missing)
	}
	if err != nil {
		return fmt.Errorf("reading table %s: %w", f.table, err)
	}
	keyAttr := ""
	for _, k := range desc.Table.KeySchema {
		if k.KeyType == ddbtypes.KeyTypeHash {
			keyAttr = aws.ToString(k.AttributeName)
		}
	}
	coord, err := batch.New(ctx, db, c, batch.Config{Table: f.table, KeyAttr: keyAttr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	p, err := coord.Get(ctx, id)
	if err != nil {
		return err
	}
	shown := batchShown{Progress: p, Table: f.table}
	if f.dlq != "" {
		d := &dlqCmd{a: a, force: f.force}
		q, err := d.open(ctx, f.dlq)
		if err != nil {
			return err
		}
		// By name: a queue's URL has more than one form.
		isSource := func(u string) bool { return queueName(u) == queueName(p.Queue) }
		if q.SourcesFrom != dlq.SourcesUnknown && !slices.ContainsFunc(q.Sources, isSource) {
			// The batch's dead-lettered chunks are elsewhere: an empty
			// list below would reassure falsely.
			srcs := make([]string, len(q.Sources))
			for i, u := range q.Sources {
				srcs[i] = queueName(u)
			}
			fmt.Fprintf(a.err, "warning: %s is not the dead-letter queue of %s, the batch's chunks' queue (it is that of: %s): the batch's dead-lettered chunks are in that queue's dead-letter queue\n",
				q.Name, queueName(p.Queue), orDash(strings.Join(srcs, ", ")))
		}
		dls, res, err := batch.DeadLetters(ctx, q, id, dlq.ScanConfig{Max: f.peek.max, Visibility: f.peek.visibility})
		if err != nil {
			return err
		}
		d.coverage(res.Coverage)
		shown.DLQ, shown.Coverage = q.Name, &res.Coverage
		for _, m := range dls {
			dl := batchDeadLetter{Index: m.Index, MessageID: m.ID, Verified: m.Verified()}
			if m.HasFailure {
				dl.ErrorClass, dl.Error, dl.Attempts = m.Failure.ErrorClass, m.Failure.Error, m.Failure.Attempts
				if !m.Failure.FailedAt.IsZero() {
					dl.FailedAt = fmtTime(m.Failure.FailedAt)
				}
			}
			shown.DeadLetters = append(shown.DeadLetters, dl)
		}
	}
	if a.output == "json" {
		return a.printJSON(shown)
	}
	return a.printBatch(shown)
}

func (a *app) printBatch(s batchShown) error {
	p := s.Progress
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("Batch", p.ID)
	line("Table", s.Table)
	sent := "all sent " + fmtTime(p.Sent)
	if p.Sent.IsZero() {
		sent = "not all sent yet (or the producer stopped: it may create the batch again)"
	}
	line("Chunks", fmt.Sprintf("%d, %s", p.Total, sent))
	line("Done", strconv.Itoa(p.Done))
	failed := strconv.Itoa(p.Failed)
	if p.FailedUnlisted > 0 {
		failed += fmt.Sprintf(", %d of them not listed below: the batch lists at most %d failed chunks (--dlq finds the dead-lettered ones)",
			p.FailedUnlisted, batch.MaxFailedIndexes)
	}
	line("Failed", failed)
	line("Pending", strconv.Itoa(p.Pending))
	switch {
	case p.Completed && !p.Notified.IsZero():
		line("Completed", fmt.Sprintf("yes, completion job %s sent %s to %s", p.NotificationMessageID, fmtTime(p.Notified), queueName(p.CallbackQueue)))
	case p.Completed:
		line("Completed", "yes, completion job not yet sent to "+queueName(p.CallbackQueue))
	default:
		line("Completed", "no; the completion job goes to "+queueName(p.CallbackQueue))
	}
	line("Created", fmtTime(p.Created))
	line("Chunks' queue", queueName(p.Queue))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.FailedChunks) > 0 {
		fmt.Fprintln(a.out)
		rows := make([][]string, len(p.FailedChunks))
		for i, c := range p.FailedChunks {
			rows[i] = []string{strconv.Itoa(c.Index), strconv.Itoa(c.Attempts), orDash(c.ErrorClass), fmtTime(c.FailedAt), orDash(oneLine(c.Error, 80))}
		}
		if err := a.table([]string{"FAILED CHUNK", "ATTEMPTS", "ERROR CLASS", "FAILED AT", "ERROR"}, rows); err != nil {
			return err
		}
	}
	if p.FailedUnlisted > 0 {
		fmt.Fprintf(a.out, "%d more failed chunks, not listed: the batch lists at most %d.\n", p.FailedUnlisted, batch.MaxFailedIndexes)
	}
	if s.DLQ != "" {
		fmt.Fprintln(a.out)
		if len(s.DeadLetters) == 0 {
			fmt.Fprintf(a.out, "No chunk of batch %s in %s.\n", p.ID, s.DLQ)
			return nil
		}
		rows := make([][]string, len(s.DeadLetters))
		for i, d := range s.DeadLetters {
			attempts := "-"
			if d.Attempts > 0 {
				attempts = strconv.Itoa(d.Attempts)
			}
			rows[i] = []string{strconv.Itoa(d.Index), d.MessageID, attempts, orDash(d.ErrorClass), orDash(d.FailedAt), orDash(oneLine(d.Error, 80))}
		}
		fmt.Fprintf(a.out, "In %s:\n", s.DLQ)
		return a.table([]string{"DEAD-LETTERED CHUNK", "MESSAGE ID", "ATTEMPTS", "ERROR CLASS", "FAILED AT", "ERROR"}, rows)
	}
	return nil
}

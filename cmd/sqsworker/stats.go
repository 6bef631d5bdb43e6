package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/cmd/sqsworker/internal/brief"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/metrics"
)

func init() {
	commands = append(commands, newStatsCmd)
}

// ANSI escape sequences that move the cursor home and clear the screen.
const ansiHomeClear = "\x1b[H\x1b[2J"

func newStatsCmd(a *app) *cobra.Command {
	var (
		watch    bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "stats QUEUE...",
		Short: "Show the figures of queues and of their dead-letter queues",
		Long: `Show, for each queue (by name, URL or ARN), from GetQueueAttributes:

  VISIBLE       messages available (ApproximateNumberOfMessages)
  IN FLIGHT     messages received and not yet deleted or visible again
                (ApproximateNumberOfMessagesNotVisible)
  DELAYED       messages not yet delivered (ApproximateNumberOfMessagesDelayed)
  VISIBILITY    the queue's visibility timeout
  FIFO          whether it is a FIFO queue
  DLQ           the dead-letter queue of its redrive policy, if any,
  MAX RECEIVES  and the policy's maxReceiveCount,
  DLQ DEPTH     and the messages in the dead-letter queue (visible, in flight
                and delayed together; -o json gives each)

SQS's figures are approximate. The age of the oldest message is not shown:
SQS does not return it, it is the CloudWatch metric
ApproximateAgeOfOldestMessage.

With --watch, stats shows the figures again every --interval until
interrupted: in place on a terminal, otherwise as successive snapshots
separated by a blank line (with -o json, one JSON document each).`,
		Example: `  sqsworker stats orders
  sqsworker stats orders payments.fifo -o json
  sqsworker stats orders --watch --interval 5s
  sqsworker stats https://sqs.eu-west-1.amazonaws.com/123456789012/orders`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("stats takes one or more QUEUE arguments; see --help")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("interval") && !watch {
				return usageError{errors.New("--interval is for --watch")}
			}
			if interval <= 0 {
				return usageError{fmt.Errorf("--interval %s: want a positive duration", interval)}
			}
			s, err := a.newStatsReader(cmd.Context(), args)
			if err != nil {
				return err
			}
			if watch {
				return s.watch(cmd.Context(), interval)
			}
			rows, err := s.read(cmd.Context())
			if err != nil {
				return err
			}
			return a.printStats(rows)
		},
	}
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "show the figures again every --interval until interrupted")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "time between refreshes with --watch")
	return cmd
}

// statsRow is the figures of one queue.
type statsRow struct {
	Queue                    string `json:"queue"`
	URL                      string `json:"url"`
	Visible                  int    `json:"visible"`
	InFlight                 int    `json:"inFlight"`
	Delayed                  int    `json:"delayed"`
	VisibilityTimeoutSeconds int    `json:"visibilityTimeoutSeconds"`
	FIFO                     bool   `json:"fifo"`
	// DeadLetterQueue is null when the queue has no redrive policy.
	DeadLetterQueue *statsDLQ `json:"deadLetterQueue"`
}

// statsDLQ is the dead-letter queue of a redrive policy.
type statsDLQ struct {
	Queue           string `json:"queue"`
	URL             string `json:"url,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount"`
	// Missing is true when the redrive policy's target does not exist.
	Missing  bool `json:"missing,omitempty"`
	Visible  int  `json:"visible"`
	InFlight int  `json:"inFlight"`
	Delayed  int  `json:"delayed"`
}

// statsReader reads the figures of queues.
type statsReader struct {
	a       *app
	client  *sqs.Client
	args    []string
	urls    []string
	dlqURLs map[string]string // by ARN
}

func (a *app) newStatsReader(ctx context.Context, args []string) (*statsReader, error) {
	c, err := a.sqs(ctx)
	if err != nil {
		return nil, err
	}
	s := &statsReader{a: a, client: c, args: args, dlqURLs: map[string]string{}}
	for _, arg := range args {
		u, err := resolveQueueArg(ctx, a, arg)
		if err != nil {
			return nil, err
		}
		s.urls = append(s.urls, u)
	}
	return s, nil
}

var statsAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	types.QueueAttributeNameVisibilityTimeout,
	types.QueueAttributeNameFifoQueue,
	types.QueueAttributeNameRedrivePolicy,
}

// read returns the figures of every queue, in the order given.
func (s *statsReader) read(ctx context.Context) ([]statsRow, error) {
	rows := make([]statsRow, 0, len(s.urls))
	for i, u := range s.urls {
		r, err := s.readOne(ctx, s.args[i], u)
		if err != nil {
			return nil, err
		}
		rows = append(rows, r)
	}
	return rows, nil
}

func (s *statsReader) readOne(ctx context.Context, arg, url string) (statsRow, error) {
	out, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: statsAttributes})
	if err != nil {
		return statsRow{}, queueError(arg, err)
	}
	at := out.Attributes
	r := statsRow{
		Queue:                    metrics.QueueName(url),
		URL:                      url,
		Visible:                  statsAtoi(at["ApproximateNumberOfMessages"]),
		InFlight:                 statsAtoi(at["ApproximateNumberOfMessagesNotVisible"]),
		Delayed:                  statsAtoi(at["ApproximateNumberOfMessagesDelayed"]),
		VisibilityTimeoutSeconds: statsAtoi(at["VisibilityTimeout"]),
		FIFO:                     at["FifoQueue"] == "true" || strings.HasSuffix(url, ".fifo"),
	}
	rp := at["RedrivePolicy"]
	if rp == "" {
		return r, nil
	}
	policy, err := dlq.ParseRedrivePolicy(rp)
	if err != nil {
		return statsRow{}, fmt.Errorf("queue %s: %w", arg, err)
	}
	arn := policy.DeadLetterTargetARN
	target, err := dlq.ParseARN(arn)
	if err != nil {
		return statsRow{}, fmt.Errorf("queue %s: redrive policy: %w", arg, err)
	}
	name, account := target.Name, target.Account
	d := &statsDLQ{Queue: name, MaxReceiveCount: policy.MaxReceiveCount}
	r.DeadLetterQueue = d
	dlqURL, ok := s.dlqURLs[arn]
	if !ok {
		u, err := s.client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name), QueueOwnerAWSAccountId: aws.String(account)})
		switch {
		case dlq.IsQueueMissing(err):
			d.Missing = true
			return r, nil
		case err != nil:
			return statsRow{}, fmt.Errorf("queue %s: dead-letter queue %s: %w", arg, name, err)
		}
		dlqURL = aws.ToString(u.QueueUrl)
		s.dlqURLs[arn] = dlqURL
	}
	d.URL = dlqURL
	dout, err := s.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlqURL), AttributeNames: statsAttributes[:3]})
	switch {
	case dlq.IsQueueMissing(err):
		delete(s.dlqURLs, arn) // it may be created again
		d.Missing, d.URL = true, ""
		return r, nil
	case err != nil:
		return statsRow{}, fmt.Errorf("queue %s: dead-letter queue %s: %w", arg, name, err)
	}
	d.Visible = statsAtoi(dout.Attributes["ApproximateNumberOfMessages"])
	d.InFlight = statsAtoi(dout.Attributes["ApproximateNumberOfMessagesNotVisible"])
	d.Delayed = statsAtoi(dout.Attributes["ApproximateNumberOfMessagesDelayed"])
	return r, nil
}

func (a *app) printStats(rows []statsRow) error {
	if a.output == "json" {
		return a.printJSON(rows)
	}
	table := make([][]string, len(rows))
	for i, r := range rows {
		fifo := "no"
		if r.FIFO {
			fifo = "yes"
		}
		dlq, maxReceive, depth := "-", "-", "-"
		if d := r.DeadLetterQueue; d != nil {
			dlq, maxReceive = d.Queue, strconv.Itoa(d.MaxReceiveCount)
			depth = strconv.Itoa(d.Visible + d.InFlight + d.Delayed)
			if d.Missing {
				depth = "(missing)"
			}
		}
		table[i] = []string{
			r.Queue, strconv.Itoa(r.Visible), strconv.Itoa(r.InFlight), strconv.Itoa(r.Delayed),
			brief.Duration(time.Duration(r.VisibilityTimeoutSeconds) * time.Second), fifo, dlq, maxReceive, depth,
		}
	}
	return a.table([]string{"QUEUE", "VISIBLE", "IN FLIGHT", "DELAYED", "VISIBILITY", "FIFO", "DLQ", "MAX RECEIVES", "DLQ DEPTH"}, table)
}

// watch prints the figures every interval until ctx is cancelled. Errors
// that may pass are reported and the next refresh tried; others end it.
func (s *statsReader) watch(ctx context.Context, interval time.Duration) error {
	a := s.a
	tty := isTTY(a.out)
	t := time.NewTicker(interval)
	defer t.Stop()
	for printed := 0; ; {
		rows, err := s.read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err != nil && dlq.IsFatal(err):
			return err
		case err != nil:
			fmt.Fprintf(a.err, "sqsworker stats: %s: %v (retrying in %s)\n", time.Now().Format(time.TimeOnly), err, interval)
		default:
			if tty {
				fmt.Fprint(a.out, ansiHomeClear)
				fmt.Fprintf(a.out, "Every %s: %s  (Ctrl-C to stop)\n\n", interval, time.Now().Format(time.DateTime))
			} else if printed > 0 {
				fmt.Fprintln(a.out)
			}
			if err := a.printStats(rows); err != nil {
				return err
			}
			printed++
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func statsAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

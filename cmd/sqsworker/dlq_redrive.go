package main

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
	"github.com/spf13/cobra"
)

// unsupportedCodes are the error codes with which an endpoint says it does
// not know an operation at all: fauxqs and ElasticMQ answer InvalidAction
// ("Unknown action: StartMessageMoveTask"), other emulators and proxies
// UnknownOperationException or NotImplemented.
var unsupportedCodes = map[string]bool{
	"InvalidAction":             true,
	"UnknownOperationException": true,
	"UnknownOperation":          true,
	"NotImplemented":            true,
}

// errMoveTasksUnsupported marks the failure of a message move task call on
// an endpoint that lacks the API.
var errMoveTasksUnsupported = errors.New("this SQS endpoint does not support message move tasks")

// moveTaskError makes the error of a message move task call clear: a
// missing API says so and points to replay. It classifies by error code,
// never by message text.
func moveTaskError(op, dlq string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) && unsupportedCodes[api.ErrorCode()] {
		return fmt.Errorf("%w (%s answered %s: %s): use `sqsworker dlq replay %s` instead, which moves messages itself (dry run first, then --yes)",
			errMoveTasksUnsupported, op, api.ErrorCode(), api.ErrorMessage(), dlq)
	}
	return fmt.Errorf("%s: %w", op, err)
}

func newDLQRedriveCmd(a *app) *cobra.Command {
	var to string
	var perSecond int
	cmd := &cobra.Command{
		Use:   "redrive DLQ [--to QUEUE] [--rate N]",
		Short: "Start an SQS message move task from a dead-letter queue (and status, cancel)",
		Long: `Start SQS's own redrive (StartMessageMoveTask): SQS moves every message of the
dead-letter queue back to its source queue, or to --to QUEUE, at up to --rate
messages per second (0: as fast as SQS chooses). It returns at once with the
task's handle; "redrive status" follows the task and "redrive cancel" stops it.

SQS's redrive moves all the messages and keeps no sqsworker replay count; use
"sqsworker dlq replay" to choose messages by error class, attributes, time or
body. Endpoints without message move tasks (such as the fauxqs and ElasticMQ
emulators) are reported as such, with exit code 1: use "dlq replay" there.

A dead-letter queue named "status" or "cancel" must be given by URL.`,
		Example: `  sqsworker dlq redrive orders-dlq
  sqsworker dlq redrive orders-dlq --to orders-retry --rate 50
  sqsworker dlq redrive status orders-dlq
  sqsworker dlq redrive cancel "$TASK_HANDLE"`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if perSecond < 0 || perSecond > 500 {
				return usageError{fmt.Errorf("--rate %d: SQS accepts 1 to 500 messages per second (0: its own choice)", perSecond)}
			}
			ctx := cmd.Context()
			c, err := a.sqs(ctx)
			if err != nil {
				return err
			}
			dlq, err := a.loadQueue(ctx, args[0])
			if err != nil {
				return err
			}
			in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(dlq.ARN)}
			dest := "its source queues"
			if to != "" {
				toQ, err := a.loadQueue(ctx, to)
				if err != nil {
					return fmt.Errorf("--to: %w", err)
				}
				in.DestinationArn = aws.String(toQ.ARN)
				dest = queueName(toQ.URL)
			}
			if perSecond > 0 {
				in.MaxNumberOfMessagesPerSecond = aws.Int32(int32(perSecond))
			}
			out, err := c.StartMessageMoveTask(ctx, in)
			if err != nil {
				return moveTaskError("StartMessageMoveTask", args[0], err)
			}
			handle := aws.ToString(out.TaskHandle)
			if a.output == "json" {
				return a.printJSON(map[string]string{"taskHandle": handle, "source": dlq.ARN, "destination": aws.ToString(in.DestinationArn)})
			}
			fmt.Fprintf(a.out, "started moving the messages of %s to %s\ntask handle: %s\n", queueName(dlq.URL), dest, handle)
			fmt.Fprintf(a.err, "follow it with: sqsworker dlq redrive status %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to", "", "move the messages to this queue instead of their source queues")
	cmd.Flags().IntVar(&perSecond, "rate", 0, "messages per second, 1 to 500 (0: SQS's choice)")
	cmd.AddCommand(newRedriveStatusCmd(a), newRedriveCancelCmd(a))
	return cmd
}

func newRedriveStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status DLQ",
		Short: "List the message move tasks of a dead-letter queue (ListMessageMoveTasks)",
		Long: `List the most recent message move tasks (up to 10) of a dead-letter queue:
their handle (of a running task), status, progress and destination.`,
		Example: `  sqsworker dlq redrive status orders-dlq
  sqsworker dlq redrive status orders-dlq -o json`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.sqs(ctx)
			if err != nil {
				return err
			}
			dlq, err := a.loadQueue(ctx, args[0])
			if err != nil {
				return err
			}
			out, err := c.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(dlq.ARN), MaxResults: aws.Int32(10)})
			if err != nil {
				return moveTaskError("ListMessageMoveTasks", args[0], err)
			}
			type taskJSON struct {
				TaskHandle    string    `json:"taskHandle,omitempty"`
				Status        string    `json:"status"`
				Started       time.Time `json:"started,omitzero"`
				Moved         int64     `json:"moved"`
				ToMove        *int64    `json:"toMove,omitempty"`
				Destination   string    `json:"destination,omitempty"`
				RatePerSecond *int32    `json:"ratePerSecond,omitempty"`
				FailureReason string    `json:"failureReason,omitempty"`
			}
			tasks := make([]taskJSON, 0, len(out.Results))
			for _, t := range out.Results {
				tj := taskJSON{
					TaskHandle: aws.ToString(t.TaskHandle), Status: aws.ToString(t.Status),
					Moved: t.ApproximateNumberOfMessagesMoved, ToMove: t.ApproximateNumberOfMessagesToMove,
					Destination: aws.ToString(t.DestinationArn), RatePerSecond: t.MaxNumberOfMessagesPerSecond,
					FailureReason: aws.ToString(t.FailureReason),
				}
				if t.StartedTimestamp > 0 {
					tj.Started = time.UnixMilli(t.StartedTimestamp).UTC()
				}
				tasks = append(tasks, tj)
			}
			if a.output == "json" {
				return a.printJSON(tasks)
			}
			if len(tasks) == 0 {
				fmt.Fprintf(a.out, "no message move task for %s\n", queueName(dlq.URL))
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
					dest = queueName(t.Destination)
				}
				rows[i] = []string{orDash(t.TaskHandle), t.Status, fmtTime(t.Started), strconv.FormatInt(t.Moved, 10), toMove, dest, orDash(t.FailureReason)}
			}
			return a.table([]string{"TASK HANDLE", "STATUS", "STARTED", "MOVED", "TO MOVE", "DESTINATION", "FAILURE"}, rows)
		},
	}
}

func newRedriveCancelCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_HANDLE",
		Short: "Cancel a running message move task (CancelMessageMoveTask)",
		Long: `Cancel a running message move task, given its handle (from "redrive" or
"redrive status"). The messages already moved stay where they are.`,
		Example: `  sqsworker dlq redrive cancel "$TASK_HANDLE"`,
		Args:    exactArgs(1, "TASK_HANDLE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.sqs(ctx)
			if err != nil {
				return err
			}
			out, err := c.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(args[0])})
			if err != nil {
				return moveTaskError("CancelMessageMoveTask", "DLQ", err)
			}
			if a.output == "json" {
				return a.printJSON(map[string]any{"taskHandle": args[0], "cancelled": true, "moved": out.ApproximateNumberOfMessagesMoved})
			}
			_, err = fmt.Fprintf(a.out, "cancelled; about %d message(s) had been moved\n", out.ApproximateNumberOfMessagesMoved)
			return err
		},
	}
}

package main

import (
	"bufio"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/spf13/cobra"
)

func newDLQPurgeCmd(a *app) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "purge DLQ",
		Short: "Delete every message of a dead-letter queue (PurgeQueue), after confirmation",
		Long: `Delete every message of a dead-letter queue with SQS's PurgeQueue. There is no
undo: the messages and their failure metadata are gone.

Without --yes it asks for the queue's name on standard input and purges only
when the name typed matches; anything else, or no input, refuses with exit
code 1. SQS allows one purge per queue every 60 seconds and may take that
long to delete the messages.`,
		Example: `  sqsworker dlq purge orders-dlq          # asks you to type "orders-dlq"
  sqsworker dlq purge orders-dlq --yes    # in scripts`,
		Args: exactArgs(1, "DLQ"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := a.sqs(ctx)
			if err != nil {
				return err
			}
			q, err := a.loadQueue(ctx, args[0])
			if err != nil {
				return err
			}
			name := queueName(q.URL)
			if !yes {
				count := "its messages"
				out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
					QueueUrl:       aws.String(q.URL),
					AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
				})
				if err == nil {
					count = fmt.Sprintf("about %s visible and %s in-flight message(s)",
						out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)],
						out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
				}
				fmt.Fprintf(a.err, "Purging deletes %s of %s for good.\nType the queue name (%s) to confirm: ", count, name, name)
				line, rerr := bufio.NewReader(a.in).ReadString('\n')
				typed := strings.TrimSpace(line)
				switch {
				case typed == "" && rerr != nil:
					fmt.Fprintln(a.err)
					return fmt.Errorf("not purged: no confirmation (give --yes to purge %s without asking)", name)
				case typed != name:
					return fmt.Errorf("not purged: %q is not the queue name %q", typed, name)
				}
			}
			if _, err := c.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(q.URL)}); err != nil {
				var inProgress *types.PurgeQueueInProgress
				var api smithy.APIError
				if errors.As(err, &inProgress) || (errors.As(err, &api) && api.ErrorCode() == "AWS.SimpleQueueService.PurgeQueueInProgress") {
					return fmt.Errorf("not purged: %s was purged less than 60 seconds ago; SQS allows one purge a minute", name)
				}
				return fmt.Errorf("purging %s: %w", name, err)
			}
			if a.output == "json" {
				return a.printJSON(map[string]any{"queue": q.URL, "purged": true})
			}
			_, err = fmt.Fprintf(a.out, "purged %s (SQS may take up to 60 seconds to delete every message)\n", name)
			return err
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "purge without asking for the queue name")
	return cmd
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"
)

// app holds what every command shares.
type app struct {
	in       io.Reader
	out, err io.Writer

	output  string // "table" or "json"
	profile string
	region  string

	client *sqs.Client // made on first use
}

func newRoot(in io.Reader, out, errOut io.Writer) *cobra.Command {
	a := &app{in: in, out: out, err: errOut}
	root := &cobra.Command{
		Use:   "sqsworker",
		Short: "Operate SQS job queues: send, stats, dead-letter inspection and replay, run",
		Long: `sqsworker operates SQS job queues.

Queues are given by name or URL. Credentials, region and endpoints come from
the AWS SDK's standard configuration: environment variables, shared config
and credentials files, profiles, and AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_SQS
to point at a local emulator.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			switch a.output {
			case "table", "json":
				return nil
			}
			return usageError{fmt.Errorf("--output %q: want table or json", a.output)}
		},
	}
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.StringVar(&a.profile, "profile", "", "AWS shared config profile (default: the SDK's, e.g. AWS_PROFILE)")
	f.StringVar(&a.region, "region", "", "AWS region (default: the SDK's, e.g. AWS_REGION)")
	// Commands are added by the files that define them.
	for _, add := range commands {
		root.AddCommand(add(a))
	}
	return root
}

// commands are the constructors of the sub-commands, registered by their
// files' init functions.
var commands []func(*app) *cobra.Command

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

func (usageError) ExitCode() int   { return 2 }
func (e usageError) Unwrap() error { return e.error }

// sqs returns the SQS client, made from the SDK's default configuration.
func (a *app) sqs(ctx context.Context) (*sqs.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	var opts []func(*config.LoadOptions) error
	if a.profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(a.profile))
	}
	if a.region != "" {
		opts = append(opts, config.WithRegion(a.region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	a.client = sqs.NewFromConfig(cfg)
	return a.client, nil
}

// queueURL turns a queue name or URL into its URL.
func (a *app) queueURL(ctx context.Context, nameOrURL string) (string, error) {
	if strings.HasPrefix(nameOrURL, "https://") || strings.HasPrefix(nameOrURL, "http://") {
		return nameOrURL, nil
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return "", err
	}
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(nameOrURL)})
	if err != nil {
		return "", fmt.Errorf("queue %q: %w", nameOrURL, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

// printJSON writes v as indented JSON.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes rows under a header, aligned in columns.
func (a *app) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

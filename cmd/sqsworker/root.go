package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/internal/queue"
)

// app holds what every command shares.
type app struct {
	in       io.Reader
	out, err io.Writer
	// errs is err for writers on several goroutines (logs, progress, the
	// AWS SDK's notes): one write at a time.
	errs *syncWriter

	output  string // "table" or "json"
	profile string
	region  string
	quiet   bool

	// outputSet is true when --output was given: commands whose default
	// is a summary print their rows with -o table.
	outputSet bool

	// sqsOptions are applied to the SQS client (tests point it at a
	// proxy).
	sqsOptions []func(*sqs.Options)

	// progressTo, when set, receives the progress lines whether or not
	// stderr is a terminal, with progressClock as the time (tests).
	progressTo    io.Writer
	progressClock func() time.Time

	client *sqs.Client // made on first use
	aws    awsTarget   // where client sends its requests
}

// rootOption changes an app before its commands are made.
type rootOption func(*app)

// withSQSOptions applies options to the SQS client the commands use.
func withSQSOptions(opts ...func(*sqs.Options)) rootOption {
	return func(a *app) { a.sqsOptions = append(a.sqsOptions, opts...) }
}

// withProgressTo draws progress lines on w, with now as the clock, as if it
// were a terminal.
func withProgressTo(w io.Writer, now func() time.Time) rootOption {
	return func(a *app) { a.progressTo, a.progressClock = w, now }
}

const rootLong = `sqsworker operates SQS job queues: create and list them, send jobs, watch
their figures, inspect dead-letter queues and replay chosen messages, and run
a worker that hands each message to a command or an HTTP endpoint.

Queues are given by name, URL or ARN. Credentials, region and endpoints come from
the AWS SDK's standard configuration: environment variables (AWS_REGION, or
AWS_DEFAULT_REGION as the AWS CLI reads it), shared config and credentials
files, profiles, and AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_SQS to point at a
local emulator (for this repository's: eval "$(localstack/stack.sh env)").

Exit status:
  0     success (for run: a graceful shutdown)
  1     the work failed: a queue is missing, a message was not sent, ...
  2     a mistake in the command line: unknown command or flag, bad value
  130   interrupted by Ctrl-C (SIGINT) before the work was done; 143 for
        SIGTERM. A command that winds down on the first interrupt (send
        finishes the batch under way, run its long polls and handlers)
        stops at once on a second one.`

func newRoot(in io.Reader, out, errOut io.Writer, opts ...rootOption) *cobra.Command {
	a := &app{in: in, out: out, err: errOut, errs: &syncWriter{w: errOut}}
	for _, o := range opts {
		o(a)
	}
	root := &cobra.Command{
		Use:     "sqsworker",
		Short:   "Operate SQS job queues: queues, send, stats, dead-letter inspection and replay, run",
		Long:    rootLong,
		Version: version(),
		Example: `  sqsworker queue create jobs --dlq jobs-dlq --max-receives 5
  sqsworker send jobs '{"order":42}'
  sqsworker run jobs -- ./process.sh
  sqsworker dlq ls jobs-dlq`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          subcommandArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.outputSet = cmd.Flags().Changed("output")
			switch a.output {
			case "table", "json":
				return nil
			}
			return usageError{fmt.Errorf("--output %q: want table or json", a.output)}
		},
	}
	root.SetVersionTemplate("sqsworker {{.Version}}\n")
	root.SetIn(in)
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetFlagErrorFunc(flagError)
	f := root.PersistentFlags()
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.StringVar(&a.profile, "profile", "", "AWS shared config profile (default: the SDK's, e.g. AWS_PROFILE)")
	f.StringVar(&a.region, "region", "", "AWS region (default: the SDK's, e.g. AWS_REGION)")
	f.BoolVarP(&a.quiet, "quiet", "q", false, "print no progress nor summaries: only the output asked for with -o, and errors")
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

// subcommandArgs is the Args of a command that only groups others: an
// argument is an unknown command, reported with the nearest ones.
func subcommandArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	} else {
		msg += "; see " + cmd.CommandPath() + " --help"
	}
	return usageError{errors.New(msg)}
}

// flagError makes a flag's parse error a usage error, and names the nearest
// flags when the flag is unknown.
func flagError(cmd *cobra.Command, err error) error {
	const unknown = "unknown flag: --"
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, unknown); ok {
		if near := nearestFlags(cmd, name); len(near) > 0 {
			return usageError{fmt.Errorf("%w; did you mean --%s?", err, strings.Join(near, " or --"))}
		}
	}
	return usageError{err}
}

// nearestFlags returns the names of cmd's flags closest to name: within an
// edit distance of 2, or that start with it.
func nearestFlags(cmd *cobra.Command, name string) []string {
	best, dist := []string(nil), 3
	visit := func(f *pflag.Flag) {
		if f.Hidden || slices.Contains(best, f.Name) {
			return
		}
		d := editDistance(strings.ToLower(name), f.Name)
		if len(name) >= 3 && strings.HasPrefix(f.Name, name) {
			d = min(d, 1)
		}
		switch {
		case d < dist:
			best, dist = []string{f.Name}, d
		case d == dist:
			best = append(best, f.Name)
		}
	}
	cmd.Flags().VisitAll(visit)
	cmd.InheritedFlags().VisitAll(visit)
	slices.Sort(best)
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// sqs returns the SQS client, made from the SDK's default configuration and
// checked: a region and credentials are required, with errors that say how
// to provide them.
func (a *app) sqs(ctx context.Context) (*sqs.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	cfg, err := a.loadAWSConfig(ctx)
	if err != nil {
		return nil, err
	}
	a.client = sqs.NewFromConfig(cfg, a.sqsOptions...)
	a.aws = sqsTarget(ctx, a.client, cfg.Region)
	return a.client, nil
}

// queueURL turns a queue name, URL or ARN into its URL, without the
// trailing slash a URL copied from a console may have. An ARN of another
// region than the client's is refused: GetQueueUrl would find the queue of
// the same name in the client's region.
func (a *app) queueURL(ctx context.Context, nameOrURL string) (string, error) {
	c, err := a.sqs(ctx)
	if err != nil {
		return "", err
	}
	if arn, err := dlq.ParseARN(nameOrURL); err == nil && arn.Region != c.Options().Region {
		r := c.Options().Region
		return "", fmt.Errorf("queue %s is in region %s, not the client's %s: give --region %s (or AWS_REGION)", nameOrURL, arn.Region, r, arn.Region)
	}
	return queue.URLOf(ctx, c, nameOrURL)
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

// syncWriter serialises the writes of several goroutines to one writer
// (stderr: logs, progress, the AWS SDK's notes).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

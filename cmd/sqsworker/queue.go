package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker/dlq"
)

func init() {
	commands = append(commands, newQueueCmd)
}

// Defaults and bounds of queue create's flags.
const (
	defaultMaxReceives = 5
	maxMaxReceives     = 1000
)

// queueNameRE is what SQS accepts as a queue name, .fifo apart.
var queueNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func newQueueCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Create and list queues",
		Long: `Create queues, with a dead-letter queue and its redrive policy, and list them
with their figures.`,
		Args: subcommandArgs,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.newQueueCreateCmd(), a.newQueueListCmd())
	return cmd
}

type queueCreateFlags struct {
	dlq          string
	maxReceives  int
	visibility   time.Duration
	fifo         bool
	contentDedup bool
}

func (a *app) newQueueCreateCmd() *cobra.Command {
	var f queueCreateFlags
	cmd := &cobra.Command{
		Use:   "create NAME [--dlq NAME] [--max-receives N] [--visibility 30s] [--fifo]",
		Short: "Create a queue, and its dead-letter queue",
		Long: `Create a queue. With --dlq, create the dead-letter queue too (unless it
exists), and give the queue a redrive policy that moves a message there after
--max-receives receives (5 by default): the worker dead-letters a message at
that attempt with failure metadata, and the policy stays as the safety net
for crashes. An existing --dlq queue may be shared with other queues, but not
be a source queue itself (with a redrive policy of its own): the failed jobs
would run there again, so it is refused. A new dead-letter queue keeps its
messages 14 days, SQS's longest: a standard queue's message keeps its first
send time when SQS moves it there, so it must outlive the queue's own
retention; an existing one that keeps them less is warned of. Fewer than 3
--max-receives are warned of too: a crash or a deploy spends a receive
without any fault of the job.

A FIFO queue's name ends in .fifo (--fifo says so too); its dead-letter queue
is a FIFO queue as well. A queue that exists already with the same settings
is left as it is; with other settings, SQS refuses to create it.`,
		Example: `  sqsworker queue create jobs --dlq jobs-dlq
  sqsworker queue create jobs --dlq jobs-dlq --max-receives 3 --visibility 2m
  sqsworker queue create orders.fifo --dlq orders-dlq.fifo --content-dedup`,
		Args: exactArgsNamed(1, "a queue NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("max-receives") && f.dlq == "" {
				return usageError{errors.New("--max-receives is for the redrive policy: give --dlq NAME too")}
			}
			return a.createQueue(cmd.Context(), args[0], f, cmd.Flags().Changed("visibility"))
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dlq, "dlq", "", "dead-letter queue `NAME`: created unless it exists, and named in the queue's redrive policy")
	fl.IntVar(&f.maxReceives, "max-receives", defaultMaxReceives, "receives of a message before SQS moves it to the dead-letter queue (maxReceiveCount)")
	fl.DurationVar(&f.visibility, "visibility", 30*time.Second, "visibility timeout of the queue, whole seconds from 1s to 12h")
	fl.BoolVar(&f.fifo, "fifo", false, "a FIFO queue (its name ends in .fifo)")
	fl.BoolVar(&f.contentDedup, "content-dedup", false, "FIFO queues: deduplicate by the body's SHA-256, so that messages need no deduplication ID")
	return cmd
}

// exactArgsNamed is cobra.ExactArgs with a usage error that names the
// arguments.
func exactArgsNamed(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %s, got %d argument(s); see --help", cmd.CommandPath(), what, len(args))}
		}
		return nil
	}
}

// queueCreated is the outcome of queue create, per queue.
type queueCreated struct {
	Queue   string `json:"queue"`
	URL     string `json:"url"`
	Created bool   `json:"created"` // false when it existed
	FIFO    bool   `json:"fifo"`
	// DeadLetterQueue and MaxReceiveCount are the redrive policy's.
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount,omitempty"`
	// VisibilityTimeoutSeconds is 0 when SQS's default (30s) was kept.
	VisibilityTimeoutSeconds int `json:"visibilityTimeoutSeconds,omitempty"`
}

// check checks the names and flags of queue create.
func (f queueCreateFlags) check(name string, visibilitySet bool) (fifo bool, err error) {
	fifo = f.fifo || strings.HasSuffix(name, ".fifo")
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	checkName := func(what, n string) {
		base := strings.TrimSuffix(n, ".fifo")
		switch {
		case fifo && !strings.HasSuffix(n, ".fifo"):
			bad("%s %q: a FIFO queue's name ends in .fifo: %s.fifo", what, n, n)
		case !fifo && strings.HasSuffix(n, ".fifo"):
			bad("%s %q: the name of a standard queue cannot end in .fifo; the queue is FIFO, or its dead-letter queue is not", what, n)
		case !queueNameRE.MatchString(base) || len(n) > 80:
			bad("%s %q: a queue name is 1 to 80 letters, digits, - and _ (.fifo included)", what, n)
		}
	}
	checkName("queue", name)
	if f.dlq != "" {
		checkName("--dlq", f.dlq)
		if f.dlq == name {
			bad("--dlq %q: a queue cannot be its own dead-letter queue", f.dlq)
		}
	}
	if f.maxReceives < 1 || f.maxReceives > maxMaxReceives {
		bad("--max-receives %d: want 1 to %d", f.maxReceives, maxMaxReceives)
	}
	if v := f.visibility; visibilitySet && (v < time.Second || v > 12*time.Hour || v%time.Second != 0) {
		bad("--visibility %s: want whole seconds from 1s to 12h (at 0, a received message is visible to the next receive at once, and runs twice)", v)
	}
	if f.contentDedup && !fifo {
		bad("--content-dedup is for FIFO queues")
	}
	if len(errs) > 0 {
		return fifo, usageError{errors.Join(errs...)}
	}
	return fifo, nil
}

// maxRetentionSeconds is SQS's longest MessageRetentionPeriod, 14 days:
// a dead-letter queue's.
const maxRetentionSeconds = 14 * 24 * 3600

// minSafeMaxReceives is the least --max-receives queue create takes
// without a warning.
const minSafeMaxReceives = 3

func (a *app) createQueue(ctx context.Context, name string, f queueCreateFlags, visibilitySet bool) error {
	fifo, err := f.check(name, visibilitySet)
	if err != nil {
		return err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	attrs := map[string]string{}
	if fifo {
		attrs[string(types.QueueAttributeNameFifoQueue)] = "true"
		if f.contentDedup {
			attrs[string(types.QueueAttributeNameContentBasedDeduplication)] = "true"
		}
	}
	var done []queueCreated
	primary := queueCreated{Queue: name, FIFO: fifo}
	if visibilitySet {
		attrs[string(types.QueueAttributeNameVisibilityTimeout)] = strconv.Itoa(int(f.visibility / time.Second))
		primary.VisibilityTimeoutSeconds = int(f.visibility / time.Second)
	}
	if f.dlq != "" {
		if f.maxReceives < minSafeMaxReceives {
			fmt.Fprintf(a.err, "warning: --max-receives %d: a job is dead-lettered after %d receive(s), though a crash, a deploy or a throttled Lambda invocation spends one without any fault of the job; %d or more keeps healthy jobs out of the dead-letter queue (AWS advises 5 for a Lambda consumer)\n",
				f.maxReceives, f.maxReceives, minSafeMaxReceives)
		}
		dlqAttrs := map[string]string{}
		if fifo {
			dlqAttrs[string(types.QueueAttributeNameFifoQueue)] = "true"
		}
		if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(f.dlq)}); isQueueMissing(err) {
			// SQS keeps a standard message's first send time when its
			// redrive policy moves it: the dead-letter queue keeps its
			// messages as long as SQS allows, longer than the queue's.
			dlqAttrs[string(types.QueueAttributeNameMessageRetentionPeriod)] = strconv.Itoa(maxRetentionSeconds)
		}
		d, err := a.ensureQueue(ctx, c, f.dlq, dlqAttrs)
		if err != nil {
			return err
		}
		d.FIFO = fifo
		done = append(done, d)
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
			QueueUrl: aws.String(d.URL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn, types.QueueAttributeNameRedrivePolicy,
				types.QueueAttributeNameMessageRetentionPeriod},
		})
		if err != nil {
			return a.queueError(f.dlq, err)
		}
		if r, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMessageRetentionPeriod)]); err == nil && r < maxRetentionSeconds && !fifo {
			fmt.Fprintf(a.err, "warning: the dead-letter queue %s keeps messages %s: SQS keeps a job's first send time when it moves it there, so a job that waited in %s can expire from it within hours; keep them 14 days: aws sqs set-queue-attributes --queue-url %s --attributes MessageRetentionPeriod=%d\n",
				f.dlq, time.Duration(r)*time.Second, name, d.URL, maxRetentionSeconds)
		}
		if rp := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]; rp != "" {
			// An existing live queue: the failed jobs would run there.
			p, err := dlq.ParseRedrivePolicy(rp)
			if err != nil {
				return fmt.Errorf("--dlq %s: %w", f.dlq, err)
			}
			target := p.DeadLetterTargetARN
			if arn, err := dlq.ParseARN(target); err == nil {
				target = arn.Name
			}
			return fmt.Errorf("--dlq %s is not a dead-letter queue: it has a redrive policy of its own (its messages go to %s after %d receives): it is a source queue, and the failed jobs of %s would run there again; give its dead-letter queue, %s, or a new name. %s was not created",
				f.dlq, target, p.MaxReceiveCount, name, target, name)
		}
		policy, err := json.Marshal(map[string]any{"deadLetterTargetArn": out.Attributes["QueueArn"], "maxReceiveCount": f.maxReceives})
		if err != nil {
			return err
		}
		attrs[string(types.QueueAttributeNameRedrivePolicy)] = string(policy)
		primary.DeadLetterQueue, primary.MaxReceiveCount = f.dlq, f.maxReceives
	}
	q, err := a.ensureQueue(ctx, c, name, attrs)
	if err != nil {
		return err
	}
	primary.URL, primary.Created = q.URL, q.Created
	done = append(done, primary)
	return a.printCreated(done)
}

// ensureQueue creates a queue unless it exists with these attributes.
func (a *app) ensureQueue(ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (queueCreated, error) {
	existed := false
	if _, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)}); err == nil {
		existed = true
	} else if !isQueueMissing(err) {
		return queueCreated{}, a.queueError(name, err)
	}
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && (strings.Contains(ae.ErrorCode(), "QueueAlreadyExists") || strings.Contains(ae.ErrorCode(), "QueueNameExists")) {
			return queueCreated{}, fmt.Errorf("queue %s exists%s with other settings: SQS keeps them; see them with sqsworker stats %s, change them with aws sqs set-queue-attributes, or choose another name: %w",
				name, a.aws.where(), name, err)
		}
		return queueCreated{}, fmt.Errorf("creating queue %s%s: %w", name, a.aws.where(), err)
	}
	return queueCreated{Queue: name, URL: aws.ToString(out.QueueUrl), Created: !existed}, nil
}

func (a *app) printCreated(qs []queueCreated) error {
	if a.output == "json" {
		return a.printJSON(qs)
	}
	if a.quiet {
		return nil
	}
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	for _, q := range qs {
		verb := "created"
		if !q.Created {
			verb = "exists"
		}
		var notes []string
		if q.DeadLetterQueue != "" {
			notes = append(notes, fmt.Sprintf("dead-letter queue %s after %d receives", q.DeadLetterQueue, q.MaxReceiveCount))
		}
		if q.VisibilityTimeoutSeconds > 0 {
			notes = append(notes, "visibility timeout "+(time.Duration(q.VisibilityTimeoutSeconds)*time.Second).String())
		}
		line := verb + "\t" + q.Queue + "\t" + q.URL
		if len(notes) > 0 {
			line += "\t" + strings.Join(notes, ", ")
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func (a *app) newQueueListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls [PREFIX]",
		Aliases: []string{"list"},
		Short:   "List queues, with their figures and dead-letter queues",
		Long: `List the queues whose names start with PREFIX (all without one), with, from
GetQueueAttributes:

  VISIBLE    messages available (ApproximateNumberOfMessages)
  IN FLIGHT  messages received and not yet deleted or visible again
  DELAYED    messages not yet delivered
  DLQ        the dead-letter queue of its redrive policy; "(dlq of N)" for a
             queue that is the dead-letter queue of N listed queues
  DLQ DEPTH  the messages in that dead-letter queue

SQS's figures are approximate.`,
		Example: `  sqsworker queue ls
  sqsworker queue ls jobs -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usageError{fmt.Errorf("queue ls takes at most one PREFIX, got %d arguments", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			prefix := ""
			if len(args) == 1 {
				prefix = args[0]
			}
			return a.listQueues(cmd.Context(), prefix)
		},
	}
}

// queueListed is a row of queue ls.
type queueListed struct {
	Queue    string `json:"queue"`
	URL      string `json:"url"`
	Visible  int    `json:"visible"`
	InFlight int    `json:"inFlight"`
	Delayed  int    `json:"delayed"`
	// DeadLetterQueue is the redrive policy's target, with its depth
	// (visible, in flight and delayed); empty without a policy.
	DeadLetterQueue string `json:"deadLetterQueue,omitempty"`
	MaxReceiveCount int    `json:"maxReceiveCount,omitempty"`
	DLQDepth        *int   `json:"dlqDepth,omitempty"`
	// Sources counts the listed queues whose dead-letter queue this is.
	Sources int `json:"deadLetterQueueOf,omitempty"`

	dlqARN, arn string
}

func (a *app) listQueues(ctx context.Context, prefix string) error {
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	var urls []string
	pages := sqs.NewListQueuesPaginator(c, &sqs.ListQueuesInput{QueueNamePrefix: aws.String(prefix), MaxResults: aws.Int32(1000)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			if hint := unreachableHint(err, a.aws); hint != "" {
				return fmt.Errorf("listing queues%s: %s: %w", a.aws.where(), hint, err)
			}
			return fmt.Errorf("listing queues%s: %w", a.aws.where(), err)
		}
		urls = append(urls, page.QueueUrls...)
	}
	prog := a.progress("read", "queues")
	prog.SetTotal(int64(len(urls)))
	rows := make([]queueListed, 0, len(urls))
	byARN := map[string]*queueListed{}
	for _, u := range urls {
		row, err := a.readQueue(ctx, c, u)
		if isQueueMissing(err) {
			continue // deleted since the listing
		}
		if err != nil {
			prog.Finish()
			return a.queueError(u, err)
		}
		rows = append(rows, row)
		prog.Add(1)
	}
	prog.Finish()
	for i := range rows {
		byARN[rows[i].arn] = &rows[i]
	}
	for i := range rows {
		r := &rows[i]
		if r.dlqARN == "" {
			continue
		}
		if d, ok := byARN[r.dlqARN]; ok {
			d.Sources++
			n := d.Visible + d.InFlight + d.Delayed
			r.DLQDepth = &n
			continue
		}
		// A dead-letter queue outside the prefix.
		if d, err := a.readQueueByName(ctx, c, r.DeadLetterQueue); err == nil {
			n := d.Visible + d.InFlight + d.Delayed
			r.DLQDepth = &n
		}
	}
	if a.output == "json" {
		return a.printJSON(rows)
	}
	if len(rows) == 0 {
		if !a.quiet {
			if prefix != "" {
				fmt.Fprintf(a.err, "no queue%s has a name starting with %q\n", a.aws.where(), prefix)
			} else {
				fmt.Fprintf(a.err, "no queues%s; create one with: sqsworker queue create NAME --dlq NAME-dlq\n", a.aws.where())
			}
		}
		return nil
	}
	table := make([][]string, len(rows))
	for i, r := range rows {
		dlq, depth := "-", "-"
		switch {
		case r.DeadLetterQueue != "":
			dlq = r.DeadLetterQueue
			if r.DLQDepth != nil {
				depth = strconv.Itoa(*r.DLQDepth)
			} else {
				depth = "missing"
			}
		case r.Sources > 0:
			dlq = fmt.Sprintf("(dlq of %d)", r.Sources)
		}
		table[i] = []string{r.Queue, strconv.Itoa(r.Visible), strconv.Itoa(r.InFlight), strconv.Itoa(r.Delayed), dlq, depth}
	}
	return a.table([]string{"QUEUE", "VISIBLE", "IN FLIGHT", "DELAYED", "DLQ", "DLQ DEPTH"}, table)
}

// readQueue reads a queue's figures and redrive policy.
func (a *app) readQueue(ctx context.Context, c *sqs.Client, url string) (queueListed, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameQueueArn,
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
			types.QueueAttributeNameRedrivePolicy,
		},
	})
	if err != nil {
		return queueListed{}, err
	}
	at := out.Attributes
	num := func(k types.QueueAttributeName) int { n, _ := strconv.Atoi(at[string(k)]); return n }
	r := queueListed{
		Queue:    url[strings.LastIndexByte(url, '/')+1:],
		URL:      url,
		arn:      at[string(types.QueueAttributeNameQueueArn)],
		Visible:  num(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: num(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  num(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}
	if p := at[string(types.QueueAttributeNameRedrivePolicy)]; p != "" {
		var policy struct {
			Target string `json:"deadLetterTargetArn"`
			Max    any    `json:"maxReceiveCount"` // a number, or a string on some endpoints
		}
		if json.Unmarshal([]byte(p), &policy) == nil && policy.Target != "" {
			r.dlqARN = policy.Target
			r.DeadLetterQueue = policy.Target[strings.LastIndexByte(policy.Target, ':')+1:]
			r.MaxReceiveCount, _ = strconv.Atoi(strings.Trim(fmt.Sprint(policy.Max), `"`))
		}
	}
	return r, nil
}

// readQueueByName reads the figures of the queue name.
func (a *app) readQueueByName(ctx context.Context, c *sqs.Client, name string) (queueListed, error) {
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		return queueListed{}, err
	}
	return a.readQueue(ctx, c, aws.ToString(out.QueueUrl))
}

// Command sqsworker-demo shows the worker runtime on a local SQS: it creates a
// queue with a dead-letter queue, sends sample jobs (successes, transient
// failures, a rate limit, a permanent failure, a panic, a job that always
// fails), runs a worker until every job is settled, prints what happened to
// each, then replays the dead-lettered job that was "fixed".
//
// With -cli-replay it stops after the jobs settle and leaves both queues, so
// that the sqsworker CLI shows the dead-letter queue (`sqsworker dlq ls`) and
// replays the fixed job (`sqsworker dlq replay --error-class
// endpoint-unavailable --yes`); a second run with -drain then runs the fixed
// handler on the queue until it is empty, shows how each job ended, and
// deletes both queues. -queue-prefix names the queues in both runs.
//
// Run it with `make demo`, which starts the local stack, points the SDK at it
// through AWS_ENDPOINT_URL_SQS, and runs the three steps.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/worker"
)

type job struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	Note string `json:"note"`
}

// journal records each attempt of each job, and the retry delays the
// worker chose (read from its log records).
type journal struct {
	mu       sync.Mutex
	start    time.Time
	attempts map[string][]time.Duration
	last     map[string]string
	jobOf    map[string]string // message ID -> job ID
	delays   map[string][]string
}

func (j *journal) attempt(msgID, id, outcome string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.attempts[id] = append(j.attempts[id], time.Since(j.start))
	j.last[id] = outcome
	j.jobOf[msgID] = id
}

// journalHandler passes the worker's log records on, noting the retry delays.
type journalHandler struct {
	slog.Handler
	j   *journal
	pre []slog.Attr
}

func (h journalHandler) Handle(ctx context.Context, r slog.Record) error {
	var msgID, delay string
	note := func(a slog.Attr) bool {
		switch a.Key {
		case "message_id":
			msgID = a.Value.String()
		case "retry_in":
			delay = a.Value.String()
		}
		return true
	}
	for _, a := range h.pre {
		note(a)
	}
	r.Attrs(note)
	if msgID != "" && delay != "" {
		h.j.mu.Lock()
		id := h.j.jobOf[msgID]
		h.j.delays[id] = append(h.j.delays[id], delay)
		h.j.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h journalHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return journalHandler{h.Handler.WithAttrs(as), h.j, append(h.pre[:len(h.pre):len(h.pre)], as...)}
}

// options are the demo's flags.
type options struct {
	jobsFile  string
	verbose   bool
	prefix    string // the queue's name; its dead-letter queue is prefix+"-dlq"
	cliReplay bool
	drain     bool
}

func main() {
	var o options
	flag.StringVar(&o.jobsFile, "jobs", "testdata/demo-jobs.json", "JSON file of sample jobs")
	flag.BoolVar(&o.verbose, "v", false, "show the worker's info logs")
	flag.StringVar(&o.prefix, "queue-prefix", "", "name of the demo's queue; its dead-letter queue is NAME-dlq (default demo-jobs-HHMMSS)")
	flag.BoolVar(&o.cliReplay, "cli-replay", false, "stop once the jobs are settled and leave the queues for `sqsworker dlq ls` and `sqsworker dlq replay`")
	flag.BoolVar(&o.drain, "drain", false, "after -cli-replay and the CLI's replay: run the fixed handler on the -queue-prefix queue until it is empty, then delete the queues")
	flag.Parse()
	var err error
	switch {
	case o.drain && o.cliReplay:
		err = errors.New("-drain and -cli-replay are two separate steps")
	case o.drain && o.prefix == "":
		err = errors.New("-drain needs the -queue-prefix of the -cli-replay run")
	case o.drain:
		err = drain(o)
	default:
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func newLogger(verbose bool, j *journal) *slog.Logger {
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: shorten})
	if j != nil {
		h = journalHandler{Handler: h, j: j}
	}
	return slog.New(h)
}

func newClient(ctx context.Context) (*sqs.Client, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, err
	}
	return sqs.NewFromConfig(cfg), nil
}

func run(o options) error {
	ctx := context.Background()
	raw, err := os.ReadFile(o.jobsFile)
	if err != nil {
		return err
	}
	var jobs []job
	if err := json.Unmarshal(raw, &jobs); err != nil {
		return fmt.Errorf("%s: %w", o.jobsFile, err)
	}
	client, err := newClient(ctx)
	if err != nil {
		return err
	}

	name := o.prefix
	if name == "" {
		name = "demo-jobs-" + time.Now().Format("150405")
	}
	dlqURL, dlqARN, err := createQueue(ctx, client, name+"-dlq", nil)
	if err != nil {
		return err
	}
	queueURL, _, err := createQueue(ctx, client, name, map[string]string{
		"VisibilityTimeout": "30",
		"RedrivePolicy":     fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, dlqARN),
	})
	if err != nil {
		return err
	}
	fmt.Printf("queue       %s\ndead-letter %s (maxReceiveCount 3)\n\n", queueURL, dlqURL)

	for _, j := range jobs {
		_, err := client.SendMessage(ctx, &sqs.SendMessageInput{
			QueueUrl: &queueURL, MessageBody: aws.String(j.Kind),
			MessageAttributes: map[string]types.MessageAttributeValue{
				"job-id": {DataType: aws.String("String"), StringValue: aws.String(j.ID)},
			},
		})
		if err != nil {
			return fmt.Errorf("sending %s: %w", j.ID, err)
		}
	}
	fmt.Printf("sent %d jobs; running the worker (backoff: full jitter, 1s base, 4s cap)\n\n", len(jobs))

	jr := &journal{start: time.Now(), attempts: map[string][]time.Duration{}, last: map[string]string{},
		jobOf: map[string]string{}, delays: map[string][]string{}}
	logger := newLogger(o.verbose, jr)
	fixed := false
	var fixMu sync.Mutex
	handler := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		id, _ := m.Attribute("job-id")
		outcome, err := perform(m, func() bool { fixMu.Lock(); defer fixMu.Unlock(); return fixed }())
		jr.attempt(m.ID, id, outcome)
		if outcome == "panic" {
			panic("nil pointer in PDF renderer")
		}
		return err
	})
	figures := metrics.NewMemory()
	w, err := worker.New(client, worker.Config{
		QueueURL:        queueURL,
		Concurrency:     4,
		WaitTime:        time.Second,
		Backoff:         sqsworker.ExponentialBackoff{Base: time.Second, Cap: 4 * time.Second},
		Logger:          logger,
		Metrics:         figures,
		MetricsInterval: time.Second,
		HandlerName:     "demo",
	})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handler) }()

	settled := func() bool {
		s := w.Stats()
		return s.Succeeded+s.DeadLettered >= int64(len(jobs)) && s.InFlight == 0
	}
	if err := waitFor(60*time.Second, settled, done); err != nil {
		return err
	}
	printJournal(jobs, jr)
	if o.cliReplay {
		// The CLI takes over: stop this worker, whose handler still fails,
		// and leave the queues.
		if err := stopAndReport(ctx, w, done, figures); err != nil {
			return err
		}
		fmt.Printf("\nworker stopped; the queues stay for the sqsworker CLI (dead-letter queue %s-dlq)\n", name)
		return nil
	}
	if err := printDLQ(ctx, client, dlqURL); err != nil {
		return err
	}

	// The operator fixes the webhook endpoint and replays its job.
	fixMu.Lock()
	fixed = true
	fixMu.Unlock()
	before := w.Stats().Succeeded
	const class = "endpoint-unavailable"
	n, err := replay(ctx, client, dlqURL, queueURL, class)
	if err != nil {
		return err
	}
	fmt.Printf("\nendpoint fixed; replayed %d dead-lettered job(s) whose error class is %s\n", n, class)
	if err := waitFor(30*time.Second, func() bool { return w.Stats().Succeeded >= before+int64(n) }, done); err != nil {
		return err
	}
	fmt.Printf("replayed job(s) succeeded\n\n")

	if err := stopAndReport(ctx, w, done, figures); err != nil {
		return err
	}
	for _, u := range []string{queueURL, dlqURL} {
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	}
	return nil
}

type unavailableError struct{ endpoint string }

func (e *unavailableError) Error() string { return e.endpoint + ": 503 service unavailable" }

// ErrorClass names the failure in dead-letter metadata, for `sqsworker dlq
// replay --error-class`.
func (e *unavailableError) ErrorClass() string { return "endpoint-unavailable" }

type malformedError struct{ reason string }

func (e malformedError) Error() string      { return e.reason }
func (e malformedError) ErrorClass() string { return "malformed-payload" }

var errMalformed = malformedError{"csv row 17: expected 6 fields, got 4"}

// perform is the demo's job logic: it fails the way the job's kind says.
func perform(m *sqsworker.Message, fixed bool) (outcome string, err error) {
	switch m.Body {
	case "fail-twice":
		if m.ReceiveCount <= 2 {
			return "timeout", fmt.Errorf("payment gateway: %w", context.DeadlineExceeded)
		}
	case "rate-limited":
		if m.ReceiveCount == 1 {
			return "429", sqsworker.RetryAfter(2*time.Second, errors.New("crm: 429 too many requests"))
		}
	case "permanent":
		return "malformed", sqsworker.Permanent(errMalformed)
	case "panic-once":
		if m.ReceiveCount == 1 {
			return "panic", nil
		}
	case "always-fails":
		if !fixed {
			return "503", &unavailableError{endpoint: "https://hooks.example.com"}
		}
	}
	return "ok", nil
}

// stopAndReport shuts the worker down, waits for Run to return, and prints
// the worker's metrics.
func stopAndReport(ctx context.Context, w *worker.Worker, done <-chan error, figures *metrics.Memory) error {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-done; err != nil {
		return err
	}
	fmt.Printf("\nthe worker's metrics (package metrics; in production an EMF or Prometheus sink):\n")
	return figures.WriteTable(os.Stdout)
}

func waitFor(limit time.Duration, cond func() bool, done <-chan error) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case err := <-done:
			return fmt.Errorf("worker stopped early: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("jobs not settled after %s", limit)
		}
	}
	return nil
}

func printJournal(jobs []job, jr *journal) {
	jr.mu.Lock()
	defer jr.mu.Unlock()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tATTEMPTS\tAT (s)\tRETRY DELAYS\tOUTCOME\tWHAT HAPPENED")
	for _, j := range jobs {
		at := jr.attempts[j.ID]
		times := make([]string, len(at))
		for i, d := range at {
			times[i] = fmt.Sprintf("%.1f", d.Seconds())
		}
		outcome := "deleted"
		if jr.last[j.ID] != "ok" {
			outcome = "dead-lettered"
		}
		delays := strings.Join(jr.delays[j.ID], ", ")
		if delays == "" {
			delays = "-"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", j.ID, len(at), strings.Join(times, ", "), delays, outcome, j.Note)
	}
	tw.Flush()
}

// printDLQ shows the dead-letter queue's messages with their failure
// metadata. SQS has no peek: it receives them with a short visibility timeout
// and makes them visible again at once.
func printDLQ(ctx context.Context, c *sqs.Client, dlqURL string) error {
	msgs, err := receiveAll(ctx, c, dlqURL)
	if err != nil {
		return err
	}
	fmt.Printf("\ndead-letter queue: %d message(s)\n", len(msgs))
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tERROR CLASS\tATTEMPTS\tERROR")
	var rows []string
	for _, m := range msgs {
		attrs := toAttrs(m.MessageAttributes)
		f, _ := sqsworker.ParseFailure(attrs)
		rows = append(rows, fmt.Sprintf("%s\t%s\t%d\t%s", attrs["job-id"].StringValue, f.ErrorClass, f.Attempts, f.Error))
		_, _ = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &dlqURL, ReceiptHandle: m.ReceiptHandle})
	}
	sort.Strings(rows)
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	return tw.Flush()
}

// replay moves the dead-lettered messages of one error class back to the
// source queue: the copy is sent first, the original deleted after.
func replay(ctx context.Context, c *sqs.Client, dlqURL, queueURL, class string) (int, error) {
	msgs, err := receiveAll(ctx, c, dlqURL)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range msgs {
		if f, _ := sqsworker.ParseFailure(toAttrs(m.MessageAttributes)); f.ErrorClass != class {
			_, _ = c.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &dlqURL, ReceiptHandle: m.ReceiptHandle})
			continue
		}
		attrs := map[string]types.MessageAttributeValue{}
		for k, v := range m.MessageAttributes {
			if !sqsworker.IsFailureAttribute(k) {
				attrs[k] = v
			}
		}
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &queueURL, MessageBody: m.Body, MessageAttributes: attrs}); err != nil {
			return n, fmt.Errorf("replaying %s: %w", aws.ToString(m.MessageId), err)
		}
		if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &dlqURL, ReceiptHandle: m.ReceiptHandle}); err != nil {
			return n, fmt.Errorf("deleting replayed %s: %w", aws.ToString(m.MessageId), err)
		}
		n++
	}
	return n, nil
}

func toAttrs(in map[string]types.MessageAttributeValue) map[string]sqsworker.MessageAttribute {
	out := make(map[string]sqsworker.MessageAttribute, len(in))
	for k, v := range in {
		out[k] = sqsworker.MessageAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue), BinaryValue: v.BinaryValue}
	}
	return out
}

func receiveAll(ctx context.Context, c *sqs.Client, url string) ([]types.Message, error) {
	var all []types.Message
	for {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 30,
			MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			return nil, err
		}
		if len(out.Messages) == 0 {
			return all, nil
		}
		all = append(all, out.Messages...)
	}
}

func createQueue(ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (url, arn string, err error) {
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: attrs})
	if err != nil {
		return "", "", fmt.Errorf("creating queue %s: %w", name, err)
	}
	ga, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", err
	}
	return aws.ToString(out.QueueUrl), ga.Attributes["QueueArn"], nil
}

// shorten keeps panic stacks, queue URLs and times out of the demo's
// terminal output.
func shorten(_ []string, a slog.Attr) slog.Attr {
	switch a.Key {
	case "stack", "queue", "dead_letter_queue", slog.TimeKey:
		return slog.Attr{}
	}
	return a
}

// drain is the demo's last step after the CLI's replay: the endpoint is
// fixed, so a worker runs the handler on the queue until it is empty; each
// job it runs is shown with its replay count and the failure it had before.
// Then both queues are deleted.
func drain(o options) error {
	ctx := context.Background()
	client, err := newClient(ctx)
	if err != nil {
		return err
	}
	urls := map[string]string{}
	for _, name := range []string{o.prefix, o.prefix + "-dlq"} {
		out, err := client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("queue %s (run the demo with -cli-replay -queue-prefix %s first): %w", name, o.prefix, err)
		}
		urls[name] = aws.ToString(out.QueueUrl)
	}
	queueURL, dlqURL := urls[o.prefix], urls[o.prefix+"-dlq"]

	var mu sync.Mutex
	var rows []string
	handler := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		outcome, err := perform(m, true)
		id, _ := m.Attribute("job-id")
		replays, ok := m.Attribute("sqsworker.replays")
		if !ok {
			replays = "0"
		}
		before := "-"
		if f, ok := sqsworker.ParseFailure(m.MessageAttributes); ok {
			before = fmt.Sprintf("%s after %d attempt(s)", f.ErrorClass, f.Attempts)
		}
		if err == nil {
			outcome = "succeeded"
		}
		mu.Lock()
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s", id, replays, before, outcome))
		mu.Unlock()
		return err
	})
	w, err := worker.New(client, worker.Config{QueueURL: queueURL, Concurrency: 4, WaitTime: time.Second, Logger: newLogger(o.verbose, nil)})
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, handler) }()
	empty := func() bool {
		s := w.Stats()
		if s.Received == 0 || s.InFlight > 0 || s.Deleted < s.Succeeded {
			return false
		}
		n, err := depth(ctx, client, queueURL)
		return err == nil && n == 0
	}
	if err := waitFor(30*time.Second, empty, done); err != nil {
		return fmt.Errorf("%w (was a job replayed to %s?)", err, o.prefix)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-done; err != nil {
		return err
	}
	fmt.Printf("endpoint fixed; a worker runs the replayed job(s) of %s:\n", o.prefix)
	sort.Strings(rows)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tREPLAYS\tFAILED BEFORE WITH\tOUTCOME")
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	tw.Flush()
	left, err := depth(ctx, client, dlqURL)
	if err != nil {
		return err
	}
	fmt.Printf("the dead-letter queue holds %d job(s)\n", left)
	for _, u := range []string{queueURL, dlqURL} {
		if _, err := client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)}); err != nil {
			return err
		}
	}
	fmt.Printf("deleted the queues %s and %s-dlq\n", o.prefix, o.prefix)
	return nil
}

// depth returns the number of messages in a queue, visible, in flight or
// delayed.
func depth(ctx context.Context, c *sqs.Client, url string) (int, error) {
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, v := range out.Attributes {
		k, _ := strconv.Atoi(v)
		n += k
	}
	return n, nil
}

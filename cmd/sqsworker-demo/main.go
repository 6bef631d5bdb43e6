// Command sqsworker-demo shows the worker runtime on a local SQS: it creates a
// queue with a dead-letter queue, sends sample jobs (successes, transient
// failures, a rate limit, a permanent failure, a panic, a job that always
// fails), runs a worker until every job is settled, prints what happened to
// each, then replays the dead-lettered job that was "fixed".
//
// Run it with `make demo`, which starts the local stack and points the SDK at
// it through AWS_ENDPOINT_URL_SQS.
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
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
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

func main() {
	jobsFile := flag.String("jobs", "testdata/demo-jobs.json", "JSON file of sample jobs")
	verbose := flag.Bool("v", false, "show the worker's info logs")
	flag.Parse()
	if err := run(*jobsFile, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(jobsFile string, verbose bool) error {
	ctx := context.Background()
	raw, err := os.ReadFile(jobsFile)
	if err != nil {
		return err
	}
	var jobs []job
	if err := json.Unmarshal(raw, &jobs); err != nil {
		return fmt.Errorf("%s: %w", jobsFile, err)
	}
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	client := sqs.NewFromConfig(cfg)

	suffix := time.Now().Format("150405")
	dlqURL, dlqARN, err := createQueue(ctx, client, "demo-jobs-dlq-"+suffix, nil)
	if err != nil {
		return err
	}
	queueURL, _, err := createQueue(ctx, client, "demo-jobs-"+suffix, map[string]string{
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

	level := slog.LevelWarn
	if verbose {
		level = slog.LevelInfo
	}
	jr := &journal{start: time.Now(), attempts: map[string][]time.Duration{}, last: map[string]string{},
		jobOf: map[string]string{}, delays: map[string][]string{}}
	logger := slog.New(journalHandler{Handler: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: shorten}), j: jr})
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
	w, err := worker.New(client, worker.Config{
		QueueURL:    queueURL,
		Concurrency: 4,
		WaitTime:    time.Second,
		Backoff:     sqsworker.ExponentialBackoff{Base: time.Second, Cap: 4 * time.Second},
		Logger:      logger,
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
	if err := printDLQ(ctx, client, dlqURL); err != nil {
		return err
	}

	// The operator fixes the webhook endpoint and replays its job.
	fixMu.Lock()
	fixed = true
	fixMu.Unlock()
	before := w.Stats().Succeeded
	const class = "*main.unavailableError"
	n, err := replay(ctx, client, dlqURL, queueURL, class)
	if err != nil {
		return err
	}
	fmt.Printf("\nendpoint fixed; replayed %d dead-lettered job(s) whose error class is %s\n", n, class)
	if err := waitFor(30*time.Second, func() bool { return w.Stats().Succeeded >= before+int64(n) }, done); err != nil {
		return err
	}
	fmt.Printf("replayed job(s) succeeded\n\n")

	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-done; err != nil {
		return err
	}
	s := w.Stats()
	fmt.Printf("worker stats: received %d, succeeded %d, failed %d (%d panics), retried %d, dead-lettered %d, deleted %d\n",
		s.Received, s.Succeeded, s.Failed, s.Panics, s.Retried, s.DeadLettered, s.Deleted)
	for _, u := range []string{queueURL, dlqURL} {
		_, _ = client.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(u)})
	}
	return nil
}

type unavailableError struct{ endpoint string }

func (e *unavailableError) Error() string { return e.endpoint + ": 503 service unavailable" }

var errMalformed = errors.New("csv row 17: expected 6 fields, got 4")

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

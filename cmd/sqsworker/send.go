package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/producer"
)

func init() {
	commands = append(commands, newSendCmd)
}

// Bounds of the JSON lines send reads from stdin.
const (
	// sendMaxLine is the longest line read: a 1 MiB body, escaped in JSON,
	// with attributes. Longer lines are reported, not read into memory.
	sendMaxLine = 8 << 20
	// sendChunk and sendChunkBytes bound the messages held before they are
	// sent, so that a long stream is sent as it is read.
	sendChunk      = 100
	sendChunkBytes = 8 << 20
	// sendMaxDetails is the most failures named in the error message; the
	// output names them all.
	sendMaxDetails = 10
)

type sendFlags struct {
	attrs          []string
	delay          time.Duration
	group          string
	dedupID        string
	idempotencyKey string
}

func newSendCmd(a *app) *cobra.Command {
	var f sendFlags
	cmd := &cobra.Command{
		Use:   "send QUEUE [BODY...]",
		Short: "Send messages: BODY arguments, or JSON lines from stdin",
		Long: `Send messages to a queue, given by name or URL.

Each BODY argument is one message. Without BODY arguments, send reads JSON
lines from stdin, one message per line (blank lines are skipped):

  {"body": "...", "idempotencyKey": "...", "delaySeconds": 10,
   "groupId": "...", "deduplicationId": "...",
   "attributes": {"tenant": "acme",
                  "priority": {"dataType": "Number", "stringValue": "3"},
                  "blob": {"dataType": "Binary", "binaryValue": "AAEC"}}}

"body" is required. An attribute given as a string is a String attribute, as
a JSON number a Number attribute; binaryValue is base64. The flags apply to
BODY arguments, and are the defaults of the lines that do not set the field
(a line's attributes are added to the --attr ones, and win on the same name).

The idempotency key is sent as the "idempotency-key" attribute, which the
idempotency middleware reads. FIFO queues (names ending in .fifo) need a
message group (--group or "groupId"), and a deduplication ID unless the queue
has content-based deduplication; they take no per-message delay.

Messages are checked before anything is sent: a message SQS would refuse
(empty or over 1 MiB, more than 10 attributes, a bad attribute name or value,
a delay over 15m, ...) or a line that is not valid JSON is reported with its
line number and not sent; the other messages are. Messages are sent with
SendMessageBatch, ten (and at most 1 MiB) per call, and the entries SQS fails
on its side are retried.

Output: a row per message (INDEX is the BODY argument's position or the line
number), or with -o json a list of {"index", "messageId", "error"}. The exit
status is 1 when any message was not sent, 2 for a mistake in the command
line.`,
		Example: `  # One message, with an attribute and an idempotency key
  sqsworker send orders '{"order":42}' --attr tenant=acme --idempotency-key order-42

  # Several messages, delayed by 30 seconds
  sqsworker send orders '{"order":43}' '{"order":44}' --delay 30s

  # A FIFO queue
  sqsworker send orders.fifo '{"order":45}' --group customer-7 --dedup-id order-45

  # JSON lines from a file; --attr is added to every line's attributes
  sqsworker send orders --attr source=backfill < jobs.jsonl

  # From jq, printing the message IDs as JSON
  jq -c '.[] | {body: tojson, idempotencyKey: (.id | tostring)}' orders.json | sqsworker send orders -o json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("send takes a QUEUE and optional BODY arguments; see --help")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.send(cmd.Context(), f, args[0], args[1:])
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.attrs, "attr", nil, "a String message attribute `name=value` (repeatable)")
	fl.DurationVar(&f.delay, "delay", 0, "postpone delivery by this long, whole seconds up to 15m (standard queues)")
	fl.StringVar(&f.group, "group", "", "message group ID (FIFO queues: required)")
	fl.StringVar(&f.dedupID, "dedup-id", "", "message deduplication ID (FIFO queues)")
	fl.StringVar(&f.idempotencyKey, "idempotency-key", "", `idempotency key, sent as the "idempotency-key" attribute`)
	return cmd
}

// sendResult is the outcome of one message, as printed.
type sendResult struct {
	Index     int    `json:"index"`
	MessageID string `json:"messageId,omitempty"`
	Error     string `json:"error,omitempty"`
}

// sendQueue is what send needs to know of the queue.
type sendQueue struct {
	url          string
	fifo         bool
	contentDedup bool
}

func (a *app) send(ctx context.Context, f sendFlags, queueArg string, bodies []string) error {
	base, err := f.message()
	if err != nil {
		return err
	}
	if len(bodies) > 1 && f.dedupID != "" {
		return usageError{fmt.Errorf("--dedup-id with %d BODY arguments: a FIFO queue would keep only the first; send them as JSON lines with a deduplicationId each", len(bodies))}
	}
	if len(bodies) > 1 && f.idempotencyKey != "" {
		return usageError{fmt.Errorf("--idempotency-key with %d BODY arguments: the idempotency middleware would run only the first; send them as JSON lines with an idempotencyKey each", len(bodies))}
	}
	q, err := a.sendQueue(ctx, queueArg)
	if err != nil {
		return err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	p, err := producer.New(c, producer.Config{QueueURL: q.url})
	if err != nil {
		return err
	}

	var results []sendResult
	what := "message"
	if len(bodies) > 0 {
		if err := q.checkFlags(f, queueArg); err != nil {
			return err
		}
		msgs := make([]producer.Message, len(bodies))
		for i, b := range bodies {
			msgs[i] = base
			msgs[i].Attributes = maps.Clone(base.Attributes)
			msgs[i].Body = b
		}
		res, _ := p.SendBatch(ctx, msgs)
		for i, r := range res {
			results = append(results, sendResult{Index: i + 1, MessageID: r.MessageID, Error: sendErrorText(r.Err)})
		}
	} else {
		what = "line"
		if isTTY(a.in) {
			fmt.Fprintln(a.err, "sqsworker send: reading JSON lines from stdin (end with Ctrl-D; see --help)")
		}
		var readErr error
		results, readErr = a.sendLines(ctx, p, q, base)
		if readErr != nil {
			// Say what was sent before the input failed.
			_ = a.printSendResults(results)
			return readErr
		}
		if len(results) == 0 && ctx.Err() == nil {
			fmt.Fprintln(a.err, "sqsworker send: no messages on stdin")
		}
	}

	if err := a.printSendResults(results); err != nil {
		return err
	}
	var details []string
	failed := 0
	for _, r := range results {
		if r.Error == "" {
			continue
		}
		failed++
		if len(details) < sendMaxDetails {
			details = append(details, fmt.Sprintf("%s %d: %s", what, r.Index, r.Error))
		}
	}
	if failed == 0 {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %d messages sent; the rest of the input was not read", len(results))
		}
		return nil
	}
	msg := fmt.Sprintf("%d of %d messages not sent:\n  %s", failed, len(results), strings.Join(details, "\n  "))
	if failed > len(details) {
		msg += fmt.Sprintf("\n  and %d more (see the output)", failed-len(details))
	}
	return errors.New(msg)
}

func (a *app) printSendResults(results []sendResult) error {
	if a.output == "json" {
		if results == nil {
			results = []sendResult{}
		}
		return a.printJSON(results)
	}
	rows := make([][]string, len(results))
	for i, r := range results {
		rows[i] = []string{strconv.Itoa(r.Index), r.MessageID, r.Error}
	}
	return a.table([]string{"INDEX", "MESSAGE ID", "ERROR"}, rows)
}

// message returns the message the flags describe, without a body.
func (f sendFlags) message() (producer.Message, error) {
	m := producer.Message{
		IdempotencyKey:  f.idempotencyKey,
		Delay:           f.delay,
		GroupID:         f.group,
		DeduplicationID: f.dedupID,
	}
	for _, kv := range f.attrs {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return m, usageError{fmt.Errorf("--attr %q: want name=value", kv)}
		}
		if _, dup := m.Attributes[name]; dup {
			return m, usageError{fmt.Errorf("--attr %q: attribute %q is given twice", kv, name)}
		}
		if m.Attributes == nil {
			m.Attributes = map[string]sqsworker.MessageAttribute{}
		}
		m.Attributes[name] = sqsworker.MessageAttribute{DataType: "String", StringValue: value}
	}
	// A flag that is wrong for every message is a usage error; what
	// depends on the body is checked per message.
	probe := m
	probe.Body = "x"
	if err := producer.Validate(probe, false); err != nil {
		return m, usageError{fmt.Errorf("the flags describe a message SQS would refuse: %s", sendErrorText(err))}
	}
	return m, nil
}

// sendQueue resolves the queue and reads whether it is FIFO and
// deduplicates by content.
func (a *app) sendQueue(ctx context.Context, queueArg string) (sendQueue, error) {
	url, err := resolveQueueArg(ctx, a, queueArg)
	if err != nil {
		return sendQueue{}, err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return sendQueue{}, err
	}
	out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameContentBasedDeduplication},
	})
	if err != nil {
		return sendQueue{}, queueError(queueArg, err)
	}
	return sendQueue{
		url:          url,
		fifo:         strings.HasSuffix(url, ".fifo") || out.Attributes["FifoQueue"] == "true",
		contentDedup: out.Attributes["ContentBasedDeduplication"] == "true",
	}, nil
}

// checkFlags checks the flags that BODY arguments are sent with against the
// queue, so that a mistake is one clear error rather than one per message.
func (q sendQueue) checkFlags(f sendFlags, queueArg string) error {
	switch {
	case q.fifo && f.group == "":
		return usageError{fmt.Errorf("%s is a FIFO queue: --group is required", queueArg)}
	case q.fifo && f.dedupID == "" && !q.contentDedup:
		return usageError{fmt.Errorf("%s is a FIFO queue without content-based deduplication: --dedup-id is required", queueArg)}
	case q.fifo && f.delay != 0:
		return usageError{fmt.Errorf("%s is a FIFO queue: it takes no per-message --delay (set the queue's DelaySeconds instead)", queueArg)}
	case !q.fifo && f.dedupID != "":
		return usageError{fmt.Errorf("%s is a standard queue: --dedup-id is for FIFO queues", queueArg)}
	}
	return nil
}

// sendLines sends the JSON lines of a.in, a chunk at a time, and returns a
// result per non-blank line.
func (a *app) sendLines(ctx context.Context, p *producer.Producer, q sendQueue, base producer.Message) ([]sendResult, error) {
	var (
		results []sendResult
		msgs    []producer.Message
		slots   []int // index in results of each of msgs
		size    int
	)
	flush := func() {
		if len(msgs) == 0 {
			return
		}
		res, _ := p.SendBatch(ctx, msgs)
		for i, r := range res {
			results[slots[i]].MessageID = r.MessageID
			results[slots[i]].Error = sendErrorText(r.Err)
		}
		msgs, slots, size = msgs[:0], slots[:0], 0
	}
	r := bufio.NewReaderSize(a.in, 64<<10)
	for n := 1; ; n++ {
		if ctx.Err() != nil {
			break
		}
		line, tooLong, err := readLine(r, sendMaxLine)
		if err != nil && err != io.EOF {
			flush()
			return results, fmt.Errorf("reading stdin: %w", err)
		}
		eof := err == io.EOF
		switch {
		case tooLong:
			results = append(results, sendResult{Index: n, Error: fmt.Sprintf("the line is over %d MiB; a message is at most 1 MiB", sendMaxLine>>20)})
		case len(bytes.TrimSpace(line)) == 0:
			// skipped
		default:
			m, err := parseSendLine(line, base, q)
			results = append(results, sendResult{Index: n})
			if err != nil {
				results[len(results)-1].Error = err.Error()
				break
			}
			msgs = append(msgs, m)
			slots = append(slots, len(results)-1)
			size += producer.Size(m)
			if len(msgs) == sendChunk || size >= sendChunkBytes {
				flush()
			}
		}
		if eof {
			break
		}
	}
	flush()
	if err := ctx.Err(); err != nil {
		for i := range results {
			if results[i].MessageID == "" && results[i].Error == "" {
				results[i].Error = "not sent: interrupted"
			}
		}
	}
	return results, nil
}

// readLine reads a line of at most max bytes, without its end of line.
// tooLong is true when the line was longer; its bytes were discarded. err is
// io.EOF at the end of the input, with the last line if it had no newline.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+2 { // room for \r\n
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF && len(line) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		line = bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if err == io.EOF {
			// The last line, without a newline: report it, then EOF.
			return line, tooLong, nil
		}
		return line, tooLong, err
	}
}

// sendLine is one JSON line of send's input.
type sendLine struct {
	Body            *string                    `json:"body"`
	IdempotencyKey  *string                    `json:"idempotencyKey"`
	DelaySeconds    *int64                     `json:"delaySeconds"`
	GroupID         *string                    `json:"groupId"`
	DeduplicationID *string                    `json:"deduplicationId"`
	Attributes      map[string]json.RawMessage `json:"attributes"`
}

// parseSendLine turns a JSON line into a message, with the flags' values as
// defaults, and checks it for the queue.
func parseSendLine(line []byte, base producer.Message, q sendQueue) (producer.Message, error) {
	var l sendLine
	trimmed := bytes.TrimSpace(line)
	if trimmed[0] != '{' {
		return producer.Message{}, errors.New(`not a JSON object; want {"body": "...", ...}`)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return producer.Message{}, fmt.Errorf("invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	if _, err := dec.Token(); err != io.EOF {
		return producer.Message{}, errors.New("invalid JSON: more after the object")
	}
	if l.Body == nil {
		return producer.Message{}, errors.New(`no "body"`)
	}
	m := base
	m.Body = *l.Body
	m.Attributes = maps.Clone(base.Attributes)
	if l.IdempotencyKey != nil {
		m.IdempotencyKey = *l.IdempotencyKey
	}
	if l.GroupID != nil {
		m.GroupID = *l.GroupID
	}
	if l.DeduplicationID != nil {
		m.DeduplicationID = *l.DeduplicationID
	}
	if l.DelaySeconds != nil {
		d := *l.DelaySeconds
		if d < 0 || d > int64(producer.MaxDelay/time.Second) {
			return producer.Message{}, fmt.Errorf("delaySeconds %d is not in 0..%d", d, int64(producer.MaxDelay/time.Second))
		}
		m.Delay = time.Duration(d) * time.Second
	}
	for name, raw := range l.Attributes {
		attr, err := parseSendAttribute(name, raw)
		if err != nil {
			return producer.Message{}, err
		}
		if m.Attributes == nil {
			m.Attributes = map[string]sqsworker.MessageAttribute{}
		}
		m.Attributes[name] = attr
	}
	var problems []string
	if err := producer.Validate(m, q.fifo); err != nil {
		problems = append(problems, sendErrorText(err))
	}
	if q.fifo && m.GroupID == "" {
		problems = append(problems, `set "groupId" or --group`)
	}
	if q.fifo && m.DeduplicationID == "" && !q.contentDedup {
		problems = append(problems, `the queue has no content-based deduplication: set "deduplicationId" or --dedup-id`)
	}
	if !q.fifo && m.DeduplicationID != "" {
		problems = append(problems, "a deduplication ID is for FIFO queues")
	}
	if len(problems) > 0 {
		return producer.Message{}, errors.New(strings.Join(problems, "; "))
	}
	return m, nil
}

// parseSendAttribute reads an attribute of a JSON line: a string, a number,
// or an object with dataType and stringValue or binaryValue.
func parseSendAttribute(name string, raw json.RawMessage) (sqsworker.MessageAttribute, error) {
	raw = bytes.TrimSpace(raw)
	bad := func(format string, args ...any) (sqsworker.MessageAttribute, error) {
		return sqsworker.MessageAttribute{}, fmt.Errorf("attribute %q: "+format, append([]any{name}, args...)...)
	}
	if len(raw) == 0 {
		return bad("no value")
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return bad("%v", err)
		}
		return sqsworker.MessageAttribute{DataType: "String", StringValue: s}, nil
	case c == '-' || c >= '0' && c <= '9':
		return sqsworker.MessageAttribute{DataType: "Number", StringValue: string(raw)}, nil
	case c == '{':
		var v struct {
			DataType    string  `json:"dataType"`
			StringValue *string `json:"stringValue"`
			BinaryValue []byte  `json:"binaryValue"`
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return bad("%s", strings.TrimPrefix(err.Error(), "json: "))
		}
		if v.DataType == "" {
			return bad(`no "dataType" (String, Number or Binary)`)
		}
		binary := strings.HasPrefix(v.DataType, "Binary")
		if binary && v.StringValue != nil {
			return bad(`a %s attribute takes a "binaryValue" (base64), not a "stringValue"`, v.DataType)
		}
		if !binary && v.BinaryValue != nil {
			return bad(`a %s attribute takes a "stringValue", not a "binaryValue"`, v.DataType)
		}
		a := sqsworker.MessageAttribute{DataType: v.DataType, BinaryValue: v.BinaryValue}
		if v.StringValue != nil {
			a.StringValue = *v.StringValue
		}
		return a, nil
	}
	return bad(`want a string, a number, or {"dataType": ..., "stringValue": ...}`)
}

// refusedIndex matches the batch position the producer puts in the error of
// an entry SQS refused, which means nothing to the CLI's user.
var refusedIndex = regexp.MustCompile(`SQS refused message \d+: `)

// sendErrorText is err as one line, without the producer's prefixes.
func sendErrorText(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	s = strings.ReplaceAll(s, "producer: invalid message: ", "")
	s = strings.ReplaceAll(s, "producer: ", "")
	s = refusedIndex.ReplaceAllString(s, "SQS refused it: ")
	return strings.ReplaceAll(s, "\n", "; ")
}

// resolveQueueArg turns a queue name or URL into its URL, with a clear error
// when the queue does not exist.
func resolveQueueArg(ctx context.Context, a *app, nameOrURL string) (string, error) {
	url, err := a.queueURL(ctx, nameOrURL)
	if err != nil {
		return "", queueError(nameOrURL, err)
	}
	return url, nil
}

// queueError is err, made clear when it says the queue does not exist.
func queueError(nameOrURL string, err error) error {
	if awserr.IsQueueMissing(err) {
		return &queueMissingError{queue: nameOrURL, err: err}
	}
	if strings.HasPrefix(err.Error(), "queue ") {
		return err
	}
	return fmt.Errorf("queue %s: %w", nameOrURL, err)
}

// isTTY reports whether v is a terminal.
func isTTY(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// queueMissingError says that a queue does not exist, more briefly than the
// SDK's error it wraps.
type queueMissingError struct {
	queue string
	err   error
}

func (e *queueMissingError) Error() string { return "queue " + e.queue + " does not exist" }
func (e *queueMissingError) Unwrap() error { return e.err }

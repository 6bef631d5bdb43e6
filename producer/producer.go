// Package producer sends jobs to an SQS queue: single messages and batches,
// with idempotency keys, delays, FIFO groups and deduplication IDs, and
// message attributes, each checked before sending so that a message SQS
// would refuse is a clear error naming the problem, not a failed request.
//
// SendBatch groups messages into SendMessageBatch calls of up to ten entries
// and 1 MiB, retries the entries SQS failed on its side, and reports the
// outcome of every message.
package producer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// API is the part of the SQS client a Producer calls.
type API interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// SQS's limits on a message.
const (
	// MaxMessageSize is the largest message, body and attributes together.
	MaxMessageSize = 1 << 20
	// MaxDelay is the longest per-message delay.
	MaxDelay = 15 * time.Minute
	// maxBatchEntries is the most entries in one SendMessageBatch call.
	maxBatchEntries = 10
)

// IdempotencyKeyAttribute is the message attribute Message.IdempotencyKey is
// sent in; the idempotency middleware reads it.
const IdempotencyKeyAttribute = "idempotency-key"

// Message is a job to send.
type Message struct {
	Body string
	// IdempotencyKey, if set, is sent as the "idempotency-key" attribute.
	IdempotencyKey string
	// Delay postpones the first delivery, up to 15m. Standard queues only:
	// FIFO queues take a delay for the whole queue.
	Delay time.Duration
	// GroupID is required on FIFO queues.
	GroupID string
	// DeduplicationID, on FIFO queues, unless the queue has content-based
	// deduplication.
	DeduplicationID string
	// Attributes are the message attributes, at most ten with the
	// idempotency key.
	Attributes map[string]sqsworker.MessageAttribute
}

// Config configures a Producer. The zero value of each field means its
// documented default; QueueURL is required.
type Config struct {
	// QueueURL is the queue to send to. Required. Names ending in .fifo
	// are FIFO queues.
	QueueURL string
	// MaxAttempts bounds the sends of one message whose entry SQS failed on
	// its side. Default 5.
	MaxAttempts int
	// Attributes, if set, adds attributes to every message sent with ctx,
	// such as a trace context (see the otel module's sqsotel.Inject); the
	// message's own attributes, and its IdempotencyKey, win on the same
	// name. They count in SQS's limits like the message's own: a message
	// is validated once they are added. SendBatch calls it once, with its
	// ctx. Default none.
	Attributes func(ctx context.Context) map[string]sqsworker.MessageAttribute
}

// Producer sends messages to one queue. It is safe for concurrent use.
type Producer struct {
	api  API
	cfg  Config
	fifo bool
}

// New validates cfg and returns a Producer.
func New(api API, cfg Config) (*Producer, error) {
	var errs []error
	if api == nil {
		errs = append(errs, errors.New("nil SQS client"))
	}
	if cfg.QueueURL == "" {
		errs = append(errs, errors.New("QueueURL is required"))
	}
	if cfg.MaxAttempts < 0 {
		errs = append(errs, fmt.Errorf("MaxAttempts %d is negative", cfg.MaxAttempts))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("producer: invalid Config: %w", errors.Join(errs...))
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	return &Producer{api: api, cfg: cfg, fifo: strings.HasSuffix(cfg.QueueURL, ".fifo")}, nil
}

// Send sends one message and returns its message ID.
func (p *Producer) Send(ctx context.Context, m Message) (string, error) {
	m = withAttributes(m, p.contextAttributes(ctx))
	if err := Validate(m, p.fifo); err != nil {
		return "", err
	}
	e := entry("0", m)
	in := &sqs.SendMessageInput{
		QueueUrl: &p.cfg.QueueURL, MessageBody: e.MessageBody, MessageAttributes: e.MessageAttributes,
		DelaySeconds: e.DelaySeconds, MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId,
	}
	out, err := p.api.SendMessage(ctx, in)
	if err != nil {
		return "", fmt.Errorf("producer: sending to %s: %w", p.cfg.QueueURL, err)
	}
	return aws.ToString(out.MessageId), nil
}

// Result is the outcome of one message of a batch.
type Result struct {
	MessageID string
	// Err is the reason the message was not sent: it did not pass
	// Validate, SQS refused it, or every attempt failed.
	Err error
}

// SendBatch sends msgs in SendMessageBatch calls of up to ten messages and
// 1 MiB, in order, retrying the entries SQS failed on its side. It returns
// one Result per message, in the order given, and an error that joins the
// messages that were not sent (nil when all were).
func (p *Producer) SendBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	res := make([]Result, len(msgs))
	if extra := p.contextAttributes(ctx); len(extra) > 0 {
		with := make([]Message, len(msgs))
		for i, m := range msgs {
			with[i] = withAttributes(m, extra)
		}
		msgs = with
	}
	var batch []int // indexes of the messages of the next call
	size := 0
	flush := func() {
		if len(batch) > 0 {
			p.sendBatch(ctx, msgs, batch, res)
			batch, size = batch[:0], 0
		}
	}
	for i, m := range msgs {
		if err := Validate(m, p.fifo); err != nil {
			res[i].Err = err
			continue
		}
		n := Size(m)
		if len(batch) == maxBatchEntries || size+n > MaxMessageSize {
			flush()
		}
		batch = append(batch, i)
		size += n
	}
	flush()
	var errs []error
	for i, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("message %d: %w", i, r.Err))
		}
	}
	return res, errors.Join(errs...)
}

// sendBatch sends the messages at idx in one call, and again those SQS
// failed on its side.
func (p *Producer) sendBatch(ctx context.Context, msgs []Message, idx []int, res []Result) {
	pending := append([]int(nil), idx...)
	backoff := 100 * time.Millisecond
	for attempt := 1; len(pending) > 0; attempt++ {
		in := &sqs.SendMessageBatchInput{QueueUrl: &p.cfg.QueueURL}
		for _, i := range pending {
			in.Entries = append(in.Entries, entry(strconv.Itoa(i), msgs[i]))
		}
		out, err := p.api.SendMessageBatch(ctx, in)
		if err != nil {
			for _, i := range pending {
				res[i].Err = fmt.Errorf("producer: sending to %s: %w", p.cfg.QueueURL, err)
			}
			return
		}
		for _, s := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(res) {
				res[i] = Result{MessageID: aws.ToString(s.MessageId)}
			}
		}
		var retry []int
		for _, f := range out.Failed {
			i, err := strconv.Atoi(aws.ToString(f.Id))
			if err != nil || i < 0 || i >= len(res) {
				continue
			}
			res[i].Err = fmt.Errorf("producer: SQS refused message %d: %s: %s", i, aws.ToString(f.Code), aws.ToString(f.Message))
			if !f.SenderFault && attempt < p.cfg.MaxAttempts {
				retry = append(retry, i)
			}
		}
		if len(retry) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			for _, i := range retry {
				res[i].Err = fmt.Errorf("producer: %w (after %v)", ctx.Err(), res[i].Err)
			}
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		pending = retry
	}
}

// contextAttributes returns the attributes Config.Attributes adds for ctx.
func (p *Producer) contextAttributes(ctx context.Context) map[string]sqsworker.MessageAttribute {
	if p.cfg.Attributes == nil {
		return nil
	}
	return p.cfg.Attributes(ctx)
}

// withAttributes returns m with the attributes of extra it does not set
// itself, in a new map: the caller's is left alone.
func withAttributes(m Message, extra map[string]sqsworker.MessageAttribute) Message {
	if len(extra) == 0 {
		return m
	}
	merged := make(map[string]sqsworker.MessageAttribute, len(m.Attributes)+len(extra))
	for k, v := range extra {
		if k == IdempotencyKeyAttribute && m.IdempotencyKey != "" {
			continue
		}
		merged[k] = v
	}
	for k, v := range m.Attributes {
		merged[k] = v
	}
	m.Attributes = merged
	return m
}

// entry turns a message into the SDK's shape, under the batch entry ID id.
func entry(id string, m Message) types.SendMessageBatchRequestEntry {
	e := types.SendMessageBatchRequestEntry{
		Id:                aws.String(id),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: sqsmsg.ToSDKAttributes(attributes(m)),
		DelaySeconds:      int32(m.Delay / time.Second),
	}
	if m.GroupID != "" {
		e.MessageGroupId = aws.String(m.GroupID)
	}
	if m.DeduplicationID != "" {
		e.MessageDeduplicationId = aws.String(m.DeduplicationID)
	}
	return e
}

// attributes returns the message's attributes with its idempotency key.
func attributes(m Message) map[string]sqsworker.MessageAttribute {
	if m.IdempotencyKey == "" {
		return m.Attributes
	}
	out := make(map[string]sqsworker.MessageAttribute, len(m.Attributes)+1)
	for k, v := range m.Attributes {
		out[k] = v
	}
	out[IdempotencyKeyAttribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: m.IdempotencyKey}
	return out
}

// Size returns the size SQS counts for a message: its body, and its
// attributes' names, types and values.
func Size(m Message) int {
	n := len(m.Body)
	for k, v := range attributes(m) {
		n += len(k) + len(v.DataType) + len(v.StringValue) + len(v.BinaryValue)
	}
	return n
}

// Validate checks m against SQS's rules, for a FIFO queue or not, and returns
// an error naming every problem.
func Validate(m Message, fifo bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if m.Body == "" {
		bad("the body is empty")
	}
	if i := invalidChar(m.Body); i >= 0 {
		bad("the body has a character SQS does not allow at byte %d", i)
	}
	if n := Size(m); n > MaxMessageSize {
		bad("the message is %d bytes, over SQS's limit of %d", n, MaxMessageSize)
	}
	if m.Delay < 0 || m.Delay > MaxDelay || m.Delay%time.Second != 0 {
		bad("delay %s is not a whole number of seconds in 0..15m", m.Delay)
	}
	attrs := attributes(m)
	if len(attrs) > sqsworker.MaxMessageAttributes {
		bad("%d message attributes, over SQS's limit of %d", len(attrs), sqsworker.MaxMessageAttributes)
	}
	if _, clash := m.Attributes[IdempotencyKeyAttribute]; clash && m.IdempotencyKey != "" {
		bad("attribute %q is set both by IdempotencyKey and in Attributes", IdempotencyKeyAttribute)
	}
	for name, a := range m.Attributes {
		if err := validateAttribute(name, a); err != nil {
			errs = append(errs, err)
		}
	}
	if fifo {
		if m.GroupID == "" {
			bad("a FIFO queue needs a message group ID")
		}
		if m.Delay != 0 {
			bad("FIFO queues take no per-message delay")
		}
	}
	for what, id := range map[string]string{"message group ID": m.GroupID, "deduplication ID": m.DeduplicationID} {
		if len(id) > 128 || strings.IndexFunc(id, func(r rune) bool { return r < '!' || r > '~' }) >= 0 {
			bad("%s %q is not 1 to 128 printable ASCII characters", what, id)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("producer: invalid message: %w", errors.Join(errs...))
}

func validateAttribute(name string, a sqsworker.MessageAttribute) error {
	lower := strings.ToLower(name)
	switch {
	case name == "" || len(name) > 256:
		return fmt.Errorf("attribute name %q is not 1 to 256 characters", name)
	case strings.IndexFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.')
	}) >= 0:
		return fmt.Errorf("attribute name %q has characters other than letters, digits, '_', '-' and '.'", name)
	case strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon."):
		return fmt.Errorf("attribute name %q uses a prefix reserved by AWS", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return fmt.Errorf("attribute name %q starts or ends with a period, or has two in a row", name)
	}
	base, _, _ := strings.Cut(a.DataType, ".")
	switch base {
	case "String", "Number":
		if a.StringValue == "" {
			return fmt.Errorf("attribute %q has an empty value", name)
		}
		if base == "Number" {
			if _, err := strconv.ParseFloat(a.StringValue, 64); err != nil {
				return fmt.Errorf("attribute %q of type Number has the value %q", name, a.StringValue)
			}
		}
		if i := invalidChar(a.StringValue); i >= 0 {
			return fmt.Errorf("attribute %q has a character SQS does not allow at byte %d", name, i)
		}
	case "Binary":
		if len(a.BinaryValue) == 0 {
			return fmt.Errorf("attribute %q has an empty value", name)
		}
	default:
		return fmt.Errorf("attribute %q has the data type %q; want String, Number or Binary, with an optional .label", name, a.DataType)
	}
	return nil
}

// invalidChar returns the byte offset of the first character SQS does not
// allow in a body or string attribute, or -1.
func invalidChar(s string) int {
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		case r == '\t' || r == '\n' || r == '\r', r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000:
		default:
			return i
		}
	}
	return -1
}

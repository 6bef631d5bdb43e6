// Package producer sends jobs to an SQS queue: single messages and batches,
// with idempotency keys, delays, FIFO groups and deduplication IDs, and
// message attributes, each checked before sending so that a message SQS
// would refuse is a clear error naming the problem, not a failed request.
//
// SendBatch groups messages into SendMessageBatch calls of up to ten entries
// and up to the queue's MaximumMessageSize in all (read once from the queue,
// or Config.MaxMessageSize), splits and sends again a call SQS finds too
// long, retries the entries SQS failed on its side, and reports the outcome
// of every message. On a FIFO queue it keeps each group's order: once a
// message of a group is not sent, the group's later messages of that call
// are not sent either.
//
// A message reported as not sent may still have reached the queue, and one
// reported sent may have reached it twice: see [Result]. On a standard
// queue, a message sent without an idempotency key gets a generated one
// (Config.DisableGeneratedKeys), so that the two copies a lost answer
// leaves run the job once under the idempotency middleware.
//
// # Delays of any length
//
// Message.Delay, or Message.NotBefore, holds a job back for up to
// sqsworker.MaxDelay (365 days). Up to 15 minutes (MaxDelay) it is SQS's own
// message delay (DelaySeconds). A longer one is sent with a delay of 15
// minutes and the time the job may run in the message attribute
// sqsworker.AttrNotBefore (one of the ten attributes SQS allows; Validate
// counts it); the worker and the Lambda adapter hold such a message back
// until then, without running the handler and without counting an attempt.
// The sqsworker package documentation says how, and what it costs: about 4
// requests a day of delay without a redrive policy, 6 with a
// maxReceiveCount of 5, 9.8 with 3, 288 with 2; plus 6 once. While a
// job waits, the runtimes send copies of its message: give delayed jobs an
// IdempotencyKey (copies keep it) and run them under the idempotency
// middleware, so that a copy left over by a crash does not run the job
// twice. The runtimes need sqs:SendMessage on the queue they consume.
package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/attempt"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// API is the part of the SQS client a Producer calls. A client that also
// has GetQueueAttributes, as *sqs.Client does, lets the Producer read the
// queue's MaximumMessageSize (see Config.MaxMessageSize). The calls of an
// *sqs.Client send each request's body from a copy of their own, so that a
// reply that comes back while the body is still being written does not
// make the SDK send an applied call again (a second copy of a message; see
// the worker package's documentation).
type API interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

var _ API = (*sqs.Client)(nil)

// attributesAPI is the optional part of the client that reads the queue's
// MaximumMessageSize.
type attributesAPI interface {
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

var _ attributesAPI = (*sqs.Client)(nil)

// SQS's limits on a message.
const (
	// MaxMessageSize is the largest message, body and attributes together,
	// that any queue takes, and the largest SendMessageBatch call. A
	// queue's own limit, its MaximumMessageSize attribute, may be lower:
	// queues created before SQS raised the limit to 1 MiB kept 256 KiB.
	MaxMessageSize = 1 << 20
	// MinMessageSize is the lowest MaximumMessageSize a queue can have.
	MinMessageSize = 1 << 10
	// MaxDelay is the longest message delay SQS gives a message
	// (DelaySeconds). Message.Delay may be longer, up to
	// sqsworker.MaxDelay: see the package documentation.
	MaxDelay = 15 * time.Minute
	// MaxDataTypeLength is the longest data type of a message attribute,
	// custom label included.
	MaxDataTypeLength = 256
	// maxBatchEntries is the most entries in one SendMessageBatch call.
	maxBatchEntries = 10
	// maxNumberDigits, maxNumberExponent and minNumberExponent bound the
	// values of Number attributes: up to 38 significant digits, from
	// 10^-128 to 10^126.
	maxNumberDigits   = 38
	maxNumberExponent = 126
	minNumberExponent = -128
)

// DefaultRequestTimeout is Config.RequestTimeout's default.
const DefaultRequestTimeout = 10 * time.Second

// IdempotencyKeyAttribute is the message attribute Message.IdempotencyKey is
// sent in; the idempotency middleware reads it.
const IdempotencyKeyAttribute = jobkey.Attribute

// ErrEarlierMessageNotSent is the reason a message of a FIFO queue is not
// sent by SendBatch: an earlier message of its group in the same call was
// not sent (it was invalid, SQS refused it, or its attempts failed), and
// sending this one would put the group's messages out of order. Test for it
// with errors.Is.
var ErrEarlierMessageNotSent = errors.New("an earlier message of its group was not sent")

// Message is a job to send.
type Message struct {
	Body string
	// IdempotencyKey, if set, is sent as the "idempotency-key" attribute:
	// up to 1024 bytes, the idempotency middleware's limit
	// (idempotency.MaxKeySize).
	IdempotencyKey string
	// Delay postpones the job, up to sqsworker.MaxDelay (365 days); up to
	// MaxDelay (15m) in whole seconds, as SQS's own message delay; longer
	// ones as a delay of any length (see the package documentation).
	// Standard queues only: FIFO queues take a delay for the whole queue.
	Delay time.Duration
	// NotBefore, if set, is the time the job may run, instead of Delay: a
	// time past or up to 15 minutes ahead is sent as SQS's message delay
	// (rounded up to whole seconds), a later one, up to sqsworker.MaxDelay
	// ahead, as a delay of any length. Standard queues only.
	NotBefore time.Time
	// GroupID is required on FIFO queues.
	GroupID string
	// DeduplicationID, on FIFO queues, unless the queue has content-based
	// deduplication. Standard queues refuse it.
	DeduplicationID string
	// Attributes are the message attributes, at most ten with the
	// idempotency key and, for a delay over 15 minutes,
	// sqsworker.AttrNotBefore.
	Attributes map[string]sqsworker.MessageAttribute

	// runAt is the time a job delayed over MaxDelay may run, set by
	// schedule when it is sent.
	runAt time.Time
}

// schedule resolves m's delay at now: NotBefore into Delay, and a delay over
// MaxDelay into runAt, sent in sqsworker.AttrNotBefore.
func schedule(m Message, now time.Time) Message {
	if !m.NotBefore.IsZero() && m.Delay == 0 {
		d := m.NotBefore.Sub(now)
		switch {
		case d > sqsworker.MaxDelay:
			return m // Validate says so
		case d <= 0:
		case d <= MaxDelay:
			m.Delay = (d + time.Second - 1).Truncate(time.Second)
		default:
			m.Delay, m.runAt = d, m.NotBefore
		}
		m.NotBefore = time.Time{}
		return m
	}
	if m.Delay > MaxDelay && m.runAt.IsZero() {
		m.runAt = now.Add(m.Delay)
	}
	return m
}

// SendAt sends m to run at t: see Message.NotBefore.
func (p *Producer) SendAt(ctx context.Context, t time.Time, m Message) (string, error) {
	m.NotBefore = t
	return p.Send(ctx, m)
}

// SendAfter sends m to run after d, up to sqsworker.MaxDelay: see
// Message.Delay.
func (p *Producer) SendAfter(ctx context.Context, d time.Duration, m Message) (string, error) {
	m.Delay = d
	return p.Send(ctx, m)
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
	// MaxMessageSize is the queue's MaximumMessageSize attribute, from
	// MinMessageSize (1 KiB) to MaxMessageSize (1 MiB): the largest message
	// the Producer sends, and the largest SendMessageBatch call it makes.
	// Default: read from the queue with GetQueueAttributes on the first
	// send, when the client has that method (an *sqs.Client does); if the
	// read is refused (a role allowed sqs:SendMessage only), 1 MiB, and a
	// call SQS finds too long (BatchRequestTooLong) is split and sent again.
	MaxMessageSize int
	// Attributes, if set, adds attributes to every message sent with ctx,
	// such as a trace context (see the otel module's sqsotel.Inject); the
	// message's own attributes, and its IdempotencyKey, win on the same
	// name. They are the context's, not the job's: a message they would
	// put over SQS's limits (ten attributes, the queue's
	// MaximumMessageSize) is sent without them, rather than refused, so
	// that turning tracing on never fails a send (Stats counts such
	// messages, and the first is logged). SendBatch calls it once,
	// with its ctx. Default none.
	Attributes func(ctx context.Context) map[string]sqsworker.MessageAttribute
	// DisableGeneratedKeys, if true, sends a message of a standard queue
	// that has no IdempotencyKey (and no "idempotency-key" attribute)
	// without one. By default such a message gets a generated key, "auto:"
	// and 26 random characters, in that attribute (52 bytes of the
	// message's size): when the answer to a call is lost and the SDK sends
	// it again, a standard queue stores the message twice, with two
	// message IDs but this one key, so that the idempotency middleware
	// runs the job once. The key takes no room anything else needs: a
	// message is sent without it when, with it and Attributes' attributes,
	// it would have ten attributes (one is left for the failure metadata
	// of a dead-letter copy) or be over the queue's MaximumMessageSize
	// (256 KiB, the limit of older queues, while that is not known); its
	// job's key is then its first message ID (Stats counts such messages,
	// and the first is logged). FIFO queues get no generated
	// key: they drop the second copy by its deduplication ID. Default
	// false.
	DisableGeneratedKeys bool
	// RequestTimeout bounds each attempt of a call to SQS: an attempt not
	// answered within it is given up, and the SDK's retryer sends the call
	// again, with the same messages (their keys and deduplication IDs, so
	// that an attempt applied but answered late is one job), within the
	// retryer's own limit of attempts. An SQS that takes requests and never
	// answers then fails a send in about three times RequestTimeout,
	// rather than hold it for as long as its context lives (a
	// context.Background, for ever). It must leave time for the largest
	// message's upload on the slowest link the producer sends from.
	// Default 10s.
	RequestTimeout time.Duration
	// Logger receives a warning the first time a message is sent without
	// Attributes' attributes, and the first time one is sent without its
	// generated key, for want of room (Stats counts every time). Default
	// slog.Default().
	Logger *slog.Logger
}

// Stats counts what a Producer left out of the messages it sent, for want
// of room under SQS's limits (see Config.Attributes and
// Config.DisableGeneratedKeys).
type Stats struct {
	// ContextAttributesLeftOut counts the messages sent without the
	// attributes of Config.Attributes (a trace context, say).
	ContextAttributesLeftOut uint64
	// GeneratedKeysLeftOut counts the messages sent without a generated
	// idempotency key (on a standard queue), or without the key
	// Config.Attributes gave them (there was no room for it): a send SQS
	// stores twice after a lost answer then runs twice under the
	// idempotency middleware.
	GeneratedKeysLeftOut uint64
}

// Producer sends messages to one queue. It is safe for concurrent use.
type Producer struct {
	api  API
	opts []func(*sqs.Options) // given to every call of api: sdkhttp.SQSOptions, and the attempt bound
	cfg  Config
	fifo bool

	// sizeTurn is held by the one call that reads the queue's limit: a
	// channel, so that the others wait within their own contexts.
	sizeTurn  chan struct{}
	sizeRead  bool      // the queue's limit is known, or will not be read
	size      int       // the queue's MaximumMessageSize, once sizeRead
	sizeKnown bool      // once sizeRead: the read answered, size is the queue's own
	sizeRetry time.Time // after a read that failed for a while: when to read again
	now       func() time.Time

	// batchBound is one less than the smallest call SQS refused as too
	// long: calls are kept below it.
	batchBound atomic.Int64

	// contextLeftOut and keysLeftOut count Stats.
	contextLeftOut, keysLeftOut atomic.Uint64
}

// Stats returns what p has left out of the messages it sent so far.
func (p *Producer) Stats() Stats {
	return Stats{ContextAttributesLeftOut: p.contextLeftOut.Load(), GeneratedKeysLeftOut: p.keysLeftOut.Load()}
}

// leftOut counts a message sent without the context's attributes (extra)
// or without its generated key (key), and warns of the first of each.
func (p *Producer) leftOut(extra, key bool) {
	if extra && p.contextLeftOut.Add(1) == 1 {
		p.cfg.Logger.Warn("producer: a message was sent without the attributes of Config.Attributes (such as a trace context): with them it was over SQS's limits (ten attributes, the queue's MaximumMessageSize); Stats counts each such message",
			"queue", p.cfg.QueueURL)
	}
	if key && p.keysLeftOut.Add(1) == 1 {
		p.cfg.Logger.Warn("producer: a message was sent without an idempotency key (generated, or given by Config.Attributes): with it, it would have had ten attributes (one is kept for a dead-letter copy's failure metadata) or been over the queue's MaximumMessageSize; should a send's answer be lost, its job may run twice. Give it an IdempotencyKey, or leave an attribute free; Stats counts each such message",
			"queue", p.cfg.QueueURL)
	}
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
	if cfg.RequestTimeout < 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout %s is negative (0: the default, %s)", cfg.RequestTimeout, DefaultRequestTimeout))
	}
	if cfg.MaxMessageSize != 0 && (cfg.MaxMessageSize < MinMessageSize || cfg.MaxMessageSize > MaxMessageSize) {
		errs = append(errs, fmt.Errorf("MaxMessageSize %d is not in %d..%d", cfg.MaxMessageSize, MinMessageSize, MaxMessageSize))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("producer: invalid Config: %w", errors.Join(errs...))
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.MaxAttempts == 0 {
		cfg.MaxAttempts = 5
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	bound := attempt.Bound(cfg.RequestTimeout)
	opts := append(sdkhttp.SQSOptions(api), func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, bound) })
	p := &Producer{api: api, opts: opts, cfg: cfg, fifo: strings.HasSuffix(cfg.QueueURL, ".fifo"), sizeTurn: make(chan struct{}, 1), now: time.Now}
	p.batchBound.Store(MaxMessageSize)
	return p, nil
}

// Send sends one message and returns its message ID. An error that is not
// the message's own (a network failure, a cancelled ctx) does not prove
// the message was not stored: see [Result].
func (p *Producer) Send(ctx context.Context, m Message) (string, error) {
	m, err := p.decorate(ctx, m, p.contextAttributes(ctx), time.Now())
	if err != nil {
		return "", err
	}
	e := entry("0", m)
	in := &sqs.SendMessageInput{
		QueueUrl: &p.cfg.QueueURL, MessageBody: e.MessageBody, MessageAttributes: e.MessageAttributes,
		DelaySeconds: e.DelaySeconds, MessageGroupId: e.MessageGroupId, MessageDeduplicationId: e.MessageDeduplicationId,
	}
	out, err := p.api.SendMessage(ctx, in, p.opts...)
	if err != nil {
		return "", fmt.Errorf("producer: sending to %s: %w", p.cfg.QueueURL, err)
	}
	return aws.ToString(out.MessageId), nil
}

// checkWithin validates m for this queue, whose MaximumMessageSize is
// limit: Validate's rules, then those that depend on the queue.
func (p *Producer) checkWithin(m Message, limit int) error {
	if err := Validate(m, p.fifo); err != nil {
		return err
	}
	var errs []error
	if !p.fifo && m.DeduplicationID != "" {
		errs = append(errs, errors.New("a deduplication ID is for FIFO queues: a standard queue refuses it"))
	}
	if n := Size(m); n > limit {
		errs = append(errs, fmt.Errorf("the message is %d bytes, over the queue's MaximumMessageSize of %d", n, limit))
	}
	if len(errs) > 0 {
		return fmt.Errorf("producer: invalid message: %w", errors.Join(errs...))
	}
	return nil
}

// sizeReadTimeout bounds the read of a queue's MaximumMessageSize, and
// sizeRetryAfter is how long a read that failed for a while (throttled,
// SQS unreachable) is not tried again.
const (
	sizeReadTimeout = 10 * time.Second
	sizeRetryAfter  = time.Minute
)

// maxSize returns the queue's MaximumMessageSize: Config.MaxMessageSize, or
// the queue's attribute, read on the first call; MaxMessageSize when it
// cannot be read. Refused (access denied, say), the read is not tried
// again; failed for a while (throttling, SQS unreachable or slow, within
// sizeReadTimeout), it is tried again a minute later; cut short by ctx, on
// the next call. Calls that come while one reads wait for it within their
// own ctx.
func (p *Producer) maxSize(ctx context.Context) int {
	n, _ := p.limit(ctx)
	return n
}

// keyRoomUnknown is the size a message with a generated key must keep
// within while the queue's MaximumMessageSize is not known: the limit of
// the queues created before SQS raised it to 1 MiB.
const keyRoomUnknown = 256 << 10

// limit is maxSize, and whether the size is the queue's own (Config's, or
// read from the queue) rather than SQS's largest, assumed.
func (p *Producer) limit(ctx context.Context) (int, bool) {
	if p.cfg.MaxMessageSize > 0 {
		return p.cfg.MaxMessageSize, true
	}
	return p.readSize(ctx)
}

// readSize is limit when Config does not give the size.
func (p *Producer) readSize(ctx context.Context) (size int, known bool) {
	select {
	case p.sizeTurn <- struct{}{}:
	case <-ctx.Done():
		return MaxMessageSize, false // the send that follows fails with ctx's error
	}
	defer func() { <-p.sizeTurn }()
	if p.sizeRead {
		return p.size, p.sizeKnown
	}
	if p.now().Before(p.sizeRetry) {
		return MaxMessageSize, false
	}
	api, ok := p.api.(attributesAPI)
	if !ok {
		p.sizeRead, p.size = true, MaxMessageSize
		return p.size, false
	}
	rctx, cancel := context.WithTimeout(ctx, sizeReadTimeout)
	defer cancel()
	out, err := api.GetQueueAttributes(rctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       &p.cfg.QueueURL,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize},
	}, p.opts...)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return MaxMessageSize, false
	case awserr.IsFatal(err):
		p.sizeRead, p.size = true, MaxMessageSize
		return p.size, false
	default:
		p.sizeRetry = p.now().Add(sizeRetryAfter)
		return MaxMessageSize, false
	}
	p.sizeRead, p.size, p.sizeKnown = true, MaxMessageSize, true
	if n, err := strconv.Atoi(out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]); err == nil && n >= MinMessageSize && n < MaxMessageSize {
		p.size = n
	}
	return p.size, true
}

// Result is the outcome of one message of a batch.
//
// Err nil means SQS stored the message (MessageID is the ID in the answer
// read, that of its last copy). Err not nil means the Producer could not
// confirm it was stored: it did not pass Validate, SQS refused it, an
// earlier message of its FIFO group was not sent
// ([ErrEarlierMessageNotSent]), or every attempt failed. Such a message may
// be in the queue all the same, and a message, reported sent or not, may be
// there twice:
//
//   - SQS may store an entry and still report it failed on its side
//     (SenderFault false, such as InternalError); SendBatch then sends it
//     again, so that on a standard queue it can be delivered twice, the
//     second copy reported in MessageID;
//   - a call whose answer was lost on the way back (the connection reset
//     once SQS had stored the messages) is sent again by the SDK: a
//     standard queue then holds each of its messages twice, reported sent,
//     both copies under the message's idempotency key (given, or generated
//     when it has room for one: see Config.DisableGeneratedKeys);
//   - a call cut short (ctx cancelled, a lost connection, a timeout) may
//     have been carried out by SQS although its messages are reported as
//     failed; sending them again then makes duplicates;
//   - a process that dies during SendBatch has made the calls before:
//     sending the batch again sends their messages again.
//
// FIFO queues drop such duplicates within their five-minute deduplication
// interval, by the message's DeduplicationID or its content. On a standard
// queue run the handlers under the idempotency middleware (package
// idempotency), so that a second delivery is acknowledged without running
// the job again. The key the Producer generates covers the copies of one
// Send or SendBatch; give messages an IdempotencyKey of the job's own (an
// order's ID, say) to cover a batch sent again by the caller, after an
// error or a crash.
type Result struct {
	MessageID string
	// Err is the reason the message may not have been sent: see Result.
	Err error
	// GeneratedKey is the idempotency key the Producer generated for the
	// message and sent it with (see Config.DisableGeneratedKeys); empty
	// when the message had its own or went without one. After an error
	// that does not prove the message unsent, send it again with this
	// IdempotencyKey: both copies are then one job.
	GeneratedKey string
}

// EntryError is the failure of one message of a SendMessageBatch call, as
// SQS's answer reports it (its Failed list), or the want of any result for
// it there, once the Producer gives it up.
type EntryError struct {
	// Index is the message's place in the batch.
	Index int
	// Code and Message are SQS's, such as InternalError; Code is empty
	// when the answer had no result for the message.
	Code, Message string
	// SenderFault is SQS's: true when the message is at fault (a retry
	// will not help, and SQS did not store it); false when SQS failed on
	// its side, or gave no result, which it may do for a message it
	// stored all the same (see Result).
	SenderFault bool
}

func (e *EntryError) Error() string {
	verb := "refused"
	if !e.SenderFault {
		verb = "failed on its side" // it may have stored the message
	}
	if e.Code == "" {
		return fmt.Sprintf("producer: SQS %s message %d: %s", verb, e.Index, e.Message)
	}
	return fmt.Sprintf("producer: SQS %s message %d: %s: %s", verb, e.Index, e.Code, e.Message)
}

// SendBatch sends msgs in SendMessageBatch calls of up to ten messages and
// up to the queue's MaximumMessageSize, in order, retrying the entries SQS
// failed on its side. A call SQS refuses as too long is split in two and
// sent again. On a FIFO queue, an entry is not retried once a later message
// of its group was sent (SQS may store a later message of a group in the
// same call as an earlier one it fails, a retry's call included: the earlier
// is then reported not sent, with the reason, rather than stored behind it),
// and once a message of a group is reported not sent, the group's messages
// not yet in a call are not sent either ([ErrEarlierMessageNotSent]).
// SendBatch returns one Result per message, in the order given, and an
// error that joins the messages that were not sent (nil when all were).
func (p *Producer) SendBatch(ctx context.Context, msgs []Message) ([]Result, error) {
	res := make([]Result, len(msgs))
	extra, now := p.contextAttributes(ctx), time.Now()
	with := make([]Message, len(msgs))
	invalid := make([]error, len(msgs))
	generated := make([]bool, len(msgs)) // sent with a key decorate made
	for i, m := range msgs {
		with[i], invalid[i] = p.decorate(ctx, m, extra, now)
		generated[i] = invalid[i] == nil && m.IdempotencyKey == "" && with[i].IdempotencyKey != ""
	}
	msgs = with
	b := &batcher{p: p, ctx: ctx, msgs: msgs, res: res, failedGroups: map[string]int{}}
	var batch []int // indexes of the messages of the next call
	size := 0
	for i, m := range msgs {
		if err := invalid[i]; err != nil {
			b.fail(i, err)
			continue
		}
		n := Size(m)
		if len(batch) == maxBatchEntries || size+n > b.limit() {
			b.send(batch)
			batch, size = nil, 0
		}
		if b.groupFailed(i) {
			continue
		}
		batch = append(batch, i)
		size += n
	}
	b.send(batch)
	for i := range res {
		if generated[i] {
			res[i].GeneratedKey = msgs[i].IdempotencyKey
		}
	}
	var errs []error
	for i, r := range res {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("message %d: %w", i, r.Err))
		}
	}
	return res, errors.Join(errs...)
}

// batcher is the state of one SendBatch call.
type batcher struct {
	p    *Producer
	ctx  context.Context
	msgs []Message
	res  []Result
	// failedGroups maps the FIFO groups that have a message not sent to
	// the index of the first such message.
	failedGroups map[string]int
}

// limit is the largest call to make: the queue's MaximumMessageSize, and
// below the smallest call SQS refused as too long.
func (b *batcher) limit() int {
	return min(b.p.maxSize(b.ctx), int(b.p.batchBound.Load()))
}

// fail records that message i was not sent, for the reason err, and on a
// FIFO queue that its group has a message not sent.
func (b *batcher) fail(i int, err error) {
	b.res[i] = Result{Err: err}
	if g := b.msgs[i].GroupID; b.p.fifo && g != "" {
		// The earliest, whatever the order of the failures: a call's
		// failed entries are seen after a later message refused at once.
		if first, ok := b.failedGroups[g]; !ok || i < first {
			b.failedGroups[g] = i
		}
	}
}

// groupFailed reports whether message i is of a FIFO group with an earlier
// message not sent, and then fails it.
func (b *batcher) groupFailed(i int) bool {
	if !b.p.fifo {
		return false
	}
	first, ok := b.failedGroups[b.msgs[i].GroupID]
	if !ok || first >= i {
		return false
	}
	b.res[i] = Result{Err: fmt.Errorf("producer: not sent: %w (message %d of group %q)", ErrEarlierMessageNotSent, first, b.msgs[i].GroupID)}
	return true
}

// laterSent reports whether a message after i in batch, of i's group, was
// sent.
func (b *batcher) laterSent(batch []int, i int) bool {
	for _, j := range batch {
		if j > i && b.msgs[j].GroupID == b.msgs[i].GroupID && b.res[j].Err == nil && b.res[j].MessageID != "" {
			return true
		}
	}
	return false
}

// send sends the messages at idx in one call, and again those SQS failed
// on its side; a call SQS finds too long is split in two.
func (b *batcher) send(idx []int) {
	var pending []int
	for _, i := range idx {
		if !b.groupFailed(i) {
			pending = append(pending, i)
		}
	}
	batch := pending
	url := b.p.cfg.QueueURL
	backoff := 100 * time.Millisecond
	for attempt := 1; len(pending) > 0; attempt++ {
		in := &sqs.SendMessageBatchInput{QueueUrl: &url}
		size := 0
		for _, i := range pending {
			in.Entries = append(in.Entries, entry(strconv.Itoa(i), b.msgs[i]))
			size += Size(b.msgs[i])
		}
		out, err := b.p.api.SendMessageBatch(b.ctx, in, b.p.opts...)
		var tooLong *types.BatchRequestTooLong
		if errors.As(err, &tooLong) && len(pending) > 1 {
			// Keep later calls below this one, and send it in halves.
			for {
				bound := b.p.batchBound.Load()
				if int64(size-1) >= bound || b.p.batchBound.CompareAndSwap(bound, int64(size-1)) {
					break
				}
			}
			half := len(pending) / 2
			b.send(pending[:half])
			b.send(pending[half:])
			return
		}
		if err != nil {
			for _, i := range pending {
				b.fail(i, fmt.Errorf("producer: sending to %s: %w", url, err))
			}
			return
		}
		// Only the IDs of this call's entries count: an answer naming
		// another (a proxy's mistake) must not settle another message.
		failed := make(map[int]types.BatchResultErrorEntry, len(out.Failed))
		for _, f := range out.Failed {
			if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && slices.Contains(pending, i) {
				failed[i] = f
			}
		}
		sent := make(map[int]bool, len(out.Successful))
		for _, s := range out.Successful {
			if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && slices.Contains(pending, i) {
				if _, alsoFailed := failed[i]; !alsoFailed {
					sent[i] = true
					b.res[i] = Result{MessageID: aws.ToString(s.MessageId)}
				}
			}
		}
		var retry []int
		for _, i := range pending { // in order: a group's earlier messages first
			if sent[i] {
				continue
			}
			f, ok := failed[i]
			if !ok {
				b.fail(i, &EntryError{Index: i, Message: "no result for its entry"})
				continue
			}
			refused := &EntryError{Index: i, Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
			switch {
			case f.SenderFault || attempt >= b.p.cfg.MaxAttempts:
				b.fail(i, refused)
			case b.p.fifo && b.laterSent(batch, i):
				b.fail(i, fmt.Errorf("%w (not sent again: a later message of group %q was sent)", refused, b.msgs[i].GroupID))
			case b.groupFailed(i):
			default:
				b.res[i].Err = refused
				retry = append(retry, i)
			}
		}
		if len(retry) == 0 {
			return
		}
		select {
		case <-b.ctx.Done():
			for _, i := range retry {
				b.fail(i, fmt.Errorf("producer: %w (after %w)", b.ctx.Err(), b.res[i].Err))
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

// decorate returns m as sent at now (see schedule), with the attributes of
// Config.Attributes (extra) and a generated idempotency key (see
// Config.DisableGeneratedKeys) when they fit, and checkWithin's verdict on it.
// The key is added only where it takes nothing else's room (see
// keyFits). Each message is checked once; only one that does not fit with
// extra is checked again, without extra, with the key if it fits then, and
// without either. An attribute of extra that is invalid in itself is kept,
// and refused. A message that fits in none of these ways is returned as
// given, with its own error.
func (p *Producer) decorate(ctx context.Context, m Message, extra map[string]sqsworker.MessageAttribute, now time.Time) (Message, error) {
	m = schedule(m, now)
	limit, known := p.limit(ctx)
	var key string
	if p.needsKey(m, extra) {
		key = jobkey.New()
	}
	full := withAttributes(m, extra)
	if key != "" {
		if keyed := withKey(full, key); keyFits(keyed, limit, known) {
			full = keyed
		}
	}
	err := p.checkWithin(full, limit)
	if err == nil || len(extra) == 0 {
		if err == nil && key != "" && full.IdempotencyKey != key {
			p.leftOut(false, true)
		}
		return full, err
	}
	for name, a := range extra {
		if validateAttribute(name, a) != nil {
			return full, err // a hook's own mistake is refused, not hidden
		}
	}
	if keyed := withKey(m, key); key != "" && keyFits(keyed, limit, known) && p.checkWithin(keyed, limit) == nil {
		p.leftOut(true, false)
		return keyed, nil
	}
	// The hook's idempotency key is the job's, not the context's: it stays
	// when the other attributes of extra are left out, if it fits.
	hookKey, fromHook := extra[IdempotencyKeyAttribute]
	if _, own := m.Attributes[IdempotencyKeyAttribute]; fromHook && !own && m.IdempotencyKey == "" {
		keyed := withAttributes(m, map[string]sqsworker.MessageAttribute{IdempotencyKeyAttribute: hookKey})
		if p.checkWithin(keyed, limit) == nil {
			p.leftOut(true, false)
			return keyed, nil
		}
	} else {
		fromHook = false
	}
	err = p.checkWithin(m, limit)
	if err == nil {
		p.leftOut(true, key != "" || fromHook)
	}
	return m, err
}

// withKey returns m with the idempotency key key ("" for none).
func withKey(m Message, key string) Message {
	m.IdempotencyKey = key
	return m
}

// keyFits reports whether m, with a generated key, leaves the room the key
// must not take: an attribute for the failure metadata of a dead-letter
// copy (so at most nine), and a size within the queue's MaximumMessageSize
// limit, or keyRoomUnknown when that is not known (the queue's may be
// lower than the 1 MiB assumed: the key must not get a message refused
// that SQS took without it).
func keyFits(m Message, limit int, known bool) bool {
	if !known {
		limit = min(limit, keyRoomUnknown)
	}
	return attributeCount(m) < sqsworker.MaxMessageAttributes && Size(m) <= limit
}

// needsKey reports whether m, to be sent with the attributes extra, gets a
// generated idempotency key: on a standard queue, when it has none (a FIFO
// queue drops the second copy of a call sent again, by its deduplication
// ID), unless Config.DisableGeneratedKeys.
func (p *Producer) needsKey(m Message, extra map[string]sqsworker.MessageAttribute) bool {
	if p.cfg.DisableGeneratedKeys || p.fifo || m.IdempotencyKey != "" {
		return false
	}
	_, own := m.Attributes[IdempotencyKeyAttribute]
	_, hook := extra[IdempotencyKeyAttribute]
	return !own && !hook
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
		MessageAttributes: sdkAttributes(m),
		DelaySeconds:      int32(min(m.Delay, MaxDelay) / time.Second),
	}
	if m.GroupID != "" {
		e.MessageGroupId = aws.String(m.GroupID)
	}
	if m.DeduplicationID != "" {
		e.MessageDeduplicationId = aws.String(m.DeduplicationID)
	}
	return e
}

// fieldAttributes returns the attributes m's fields add to its own
// Attributes, replacing those of the same name: its idempotency key and,
// for a delay over MaxDelay, the time it may run. An array, not a map: a
// message is sized and checked without allocating.
func fieldAttributes(m Message) (attrs [2]namedAttribute, n int) {
	if m.IdempotencyKey != "" {
		attrs[n] = namedAttribute{IdempotencyKeyAttribute, sqsworker.MessageAttribute{DataType: "String", StringValue: m.IdempotencyKey}}
		n++
	}
	if m.Delay > MaxDelay || time.Until(m.NotBefore) > MaxDelay {
		at := m.runAt
		switch {
		case !at.IsZero():
		case !m.NotBefore.IsZero():
			// Not resolved by schedule: over 365 days ahead when it ran,
			// within them by Validate's time. The job runs at NotBefore,
			// not at once.
			at = m.NotBefore
		default: // not sent yet (Validate, Size): the same size
			at = time.Now().Add(m.Delay)
		}
		attrs[n] = namedAttribute{sqsworker.AttrNotBefore, sqsworker.NotBeforeAttribute(at)}
		n++
	}
	return attrs, n
}

type namedAttribute struct {
	name string
	attr sqsworker.MessageAttribute
}

// sdkAttributes returns the attributes m is sent with, in the SDK's shape.
func sdkAttributes(m Message) map[string]types.MessageAttributeValue {
	fields, n := fieldAttributes(m)
	if n == 0 {
		return sqsmsg.ToSDKAttributes(m.Attributes)
	}
	out := make(map[string]types.MessageAttributeValue, len(m.Attributes)+n)
	for k, v := range m.Attributes {
		out[k] = sqsmsg.ToSDKAttribute(v)
	}
	for _, f := range fields[:n] {
		out[f.name] = sqsmsg.ToSDKAttribute(f.attr)
	}
	return out
}

// attributeCount returns the number of attributes m is sent with.
func attributeCount(m Message) int {
	fields, n := fieldAttributes(m)
	count := len(m.Attributes)
	for _, f := range fields[:n] {
		if _, own := m.Attributes[f.name]; !own {
			count++
		}
	}
	return count
}

// Size returns the size SQS counts for a message: its body, and its
// attributes' names, types and values.
func Size(m Message) int {
	n := len(m.Body)
	fields, nf := fieldAttributes(m)
	size := func(k string, v sqsworker.MessageAttribute) int {
		return len(k) + len(v.DataType) + len(v.StringValue) + len(v.BinaryValue)
	}
own:
	for k, v := range m.Attributes {
		for _, f := range fields[:nf] {
			if k == f.name {
				continue own // replaced
			}
		}
		n += size(k, v)
	}
	for _, f := range fields[:nf] {
		n += size(f.name, f.attr)
	}
	return n
}

// Validate checks m against SQS's rules, for a FIFO queue or not, and returns
// an error naming every problem. The rules that depend on the queue itself
// are left to Send and SendBatch, which know it: its MaximumMessageSize,
// and that a standard queue refuses a deduplication ID (fifo false also
// stands for a queue whose kind is not known yet).
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
	switch {
	case m.Delay < 0:
		bad("delay %s is negative: use 0 to run the job at once", m.Delay)
	case m.Delay > sqsworker.MaxDelay:
		bad("delay %s is over the longest delay of 365 days (sqsworker.MaxDelay): send the job later, or shorten the delay", m.Delay)
	case m.Delay <= MaxDelay && m.Delay%time.Second != 0:
		bad("delay %s is not a whole number of seconds: SQS delays by whole seconds up to 15m", m.Delay)
	}
	if !m.NotBefore.IsZero() {
		if m.Delay != 0 {
			bad("both Delay and NotBefore are set: set one of them")
		}
		if d := time.Until(m.NotBefore); d > sqsworker.MaxDelay {
			bad("NotBefore %s is more than 365 days ahead (sqsworker.MaxDelay): send the job later", m.NotBefore.Format(time.RFC3339))
		}
	}
	if count := attributeCount(m); count > sqsworker.MaxMessageAttributes {
		if m.Delay > MaxDelay || time.Until(m.NotBefore) > MaxDelay {
			bad("%d message attributes, over SQS's limit of %d: a delay over 15m takes one (%s) to carry the time the job may run; drop an attribute or shorten the delay",
				count, sqsworker.MaxMessageAttributes, sqsworker.AttrNotBefore)
		} else {
			bad("%d message attributes, over SQS's limit of %d", count, sqsworker.MaxMessageAttributes)
		}
	}
	if _, clash := m.Attributes[IdempotencyKeyAttribute]; clash && m.IdempotencyKey != "" {
		bad("attribute %q is set both by IdempotencyKey and in Attributes", IdempotencyKeyAttribute)
	}
	if i := invalidChar(m.IdempotencyKey); i >= 0 {
		bad("the idempotency key has a character SQS does not allow at byte %d", i)
	}
	if n := keySize(m); n > jobkey.MaxSize {
		bad("the idempotency key is %d bytes, over the idempotency middleware's limit of %d, which would fail the job as permanent: use a shorter key (the hex digest of a long one)", n, jobkey.MaxSize)
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
		if m.Delay != 0 || !m.NotBefore.IsZero() {
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

// keySize returns the size of the idempotency key the idempotency
// middleware reads from m (idempotency.DefaultKey): IdempotencyKey, or the
// idempotency-key attribute as jobkey.OfAttribute reads it; 0 without one.
func keySize(m Message) int {
	if m.IdempotencyKey != "" {
		return len(m.IdempotencyKey)
	}
	return len(jobkey.OfAttribute(asSent(m.Attributes[IdempotencyKeyAttribute])))
}

// asSent returns a as SQS gets it (see sqsmsg.ToSDKAttribute): a Binary
// attribute's BinaryValue alone, another's StringValue alone.
func asSent(a sqsworker.MessageAttribute) sqsworker.MessageAttribute {
	if strings.HasPrefix(a.DataType, "Binary") {
		a.StringValue = ""
	} else {
		a.BinaryValue = nil
	}
	return a
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
	case strings.HasPrefix(lower, "sqsworker."):
		// Failure metadata: written by the runtimes only, so that an
		// operator's replay can trust where it says a message came from.
		return fmt.Errorf("attribute name %q is in the sqsworker. namespace, which only the runtimes write (failure metadata): rename it", name)
	case strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, ".."):
		return fmt.Errorf("attribute name %q starts or ends with a period, or has two in a row", name)
	}
	switch {
	case len(a.DataType) > MaxDataTypeLength:
		return fmt.Errorf("attribute %q has a data type of %d characters, over SQS's limit of %d", name, len(a.DataType), MaxDataTypeLength)
	case invalidChar(a.DataType) >= 0:
		return fmt.Errorf("attribute %q has a character SQS does not allow in its data type at byte %d", name, invalidChar(a.DataType))
	}
	base, _, _ := strings.Cut(a.DataType, ".")
	switch base {
	case "String", "Number":
		if a.StringValue == "" {
			return fmt.Errorf("attribute %q has an empty value", name)
		}
		if base == "Number" {
			if err := validNumber(a.StringValue); err != nil {
				return fmt.Errorf("attribute %q of type Number has the value %q: %w", name, a.StringValue, err)
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

// validNumber checks a Number attribute's value as SQS does: a decimal
// number, with an optional sign, fraction and exponent (no NaN, infinity,
// hexadecimal or underscores), of up to 38 significant digits, and zero or
// from 10^-128 to under 10^126 in magnitude.
func validNumber(s string) error {
	notDecimal := errors.New("not a decimal number")
	t := s
	if t != "" && (t[0] == '+' || t[0] == '-') {
		t = t[1:]
	}
	mant, exp := t, ""
	if i := strings.IndexAny(t, "eE"); i >= 0 {
		mant, exp = t[:i], t[i+1:]
		if exp != "" && (exp[0] == '+' || exp[0] == '-') {
			exp = exp[1:]
		}
		if exp == "" || !allDigits(exp) {
			return notDecimal
		}
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	if intPart+frac == "" || !allDigits(intPart) || !allDigits(frac) {
		return notDecimal
	}
	// The significant digits, and the power of ten of the first one.
	all := intPart + frac
	lead := len(all) - len(strings.TrimLeft(all, "0"))
	sig := strings.TrimRight(all[lead:], "0")
	if sig == "" {
		return nil // zero, whatever its exponent
	}
	if len(sig) > maxNumberDigits {
		return fmt.Errorf("%d significant digits, over SQS's limit of %d", len(sig), maxNumberDigits)
	}
	e := 0
	if exp != "" {
		exp = strings.TrimLeft(exp, "0")
		if len(exp) > 6 { // far out of range
			return errors.New("out of SQS's range of 10^-128 to 10^126")
		}
		e, _ = strconv.Atoi("0" + exp)
		if i := strings.IndexAny(t, "eE"); t[i+1] == '-' {
			e = -e
		}
	}
	if msd := len(intPart) - 1 - lead + e; msd >= maxNumberExponent || msd < minNumberExponent {
		return errors.New("out of SQS's range of 10^-128 to 10^126")
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// AttrReplays is the Number message attribute that counts how many times
// `dlq replay` moved a message back to a queue.
const AttrReplays = "sqsworker.replays"

// Defaults of the flags that bound a peek at a dead-letter queue.
const (
	defaultPeekVisibility = 30 * time.Second
	defaultPeekMax        = 1000
	// releaseTimeout bounds the release of held messages, which runs even
	// after the command was interrupted.
	releaseTimeout = 15 * time.Second
	// receiveTimeout bounds a receive, which waits a second for messages.
	receiveTimeout = 30 * time.Second
)

func init() {
	commands = append(commands, newDLQCmd)
}

func newDLQCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect a dead-letter queue, replay chosen messages, redrive or purge it",
		Long: `Inspect a dead-letter queue and move its messages back.

Messages dead-lettered by sqsworker's runtimes carry failure metadata (error
class and text, attempts, first-received and failed-at times, source queue,
original message ID): ls and show print it, and replay selects messages by it
and sends them back to the queue they came from.

SQS has no peek: ls, show and replay receive the messages with a short
visibility timeout (--visibility) and make the ones they leave in place
visible again at once (ChangeMessageVisibilityBatch to 0) when they are done.
While they run, other consumers of the dead-letter queue do not see the
messages they hold.

Queues are given by name or URL.`,
		Example: `  sqsworker dlq ls orders-dlq
  sqsworker dlq show orders-dlq 5f1c0a4e-8d0b-4c1e-9a57-3f2b6d1e0c11 --body
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago"
  sqsworker dlq replay orders-dlq --error-class upstream-unavailable --since "2h ago" --yes
  sqsworker dlq redrive orders-dlq
  sqsworker dlq purge orders-dlq`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("unknown command %q for %q; see --help", args[0], cmd.CommandPath())}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newDLQListCmd(a), newDLQShowCmd(a), newDLQReplayCmd(a), newDLQRedriveCmd(a), newDLQPurgeCmd(a))
	return cmd
}

// loadQueue resolves a queue name or URL and reads its attributes, with a
// clear error when the queue does not exist.
func (a *app) loadQueue(ctx context.Context, nameOrURL string) (queue.Info, error) {
	url, err := a.queueURL(ctx, nameOrURL)
	if err != nil {
		if awserr.IsQueueMissing(err) {
			return queue.Info{}, fmt.Errorf("queue %q does not exist", nameOrURL)
		}
		return queue.Info{}, err
	}
	c, err := a.sqs(ctx)
	if err != nil {
		return queue.Info{}, err
	}
	info, err := queue.Load(ctx, c, url)
	if err != nil {
		if awserr.IsQueueMissing(err) {
			return queue.Info{}, fmt.Errorf("queue %q does not exist", nameOrURL)
		}
		return queue.Info{}, err
	}
	return info, nil
}

// queueName returns the name of a queue from its URL (or the text itself
// when it is not a URL).
func queueName(url string) string {
	if i := strings.LastIndexByte(url, '/'); i >= 0 {
		return url[i+1:]
	}
	return url
}

func queueKind(fifo bool) string {
	if fifo {
		return "FIFO"
	}
	return "standard"
}

// dlqMessage is one received dead-letter message, with its failure metadata.
type dlqMessage struct {
	raw     types.Message
	msg     *sqsworker.Message
	failure sqsworker.Failure
	hasMeta bool
	replays int
}

func newDLQMessage(queueURL string, m types.Message) *dlqMessage {
	d := &dlqMessage{raw: m, msg: sqsmsg.FromSDK(queueURL, &m)}
	d.failure, d.hasMeta = sqsworker.ParseFailure(d.msg.MessageAttributes)
	if v, ok := d.msg.Attribute(AttrReplays); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			d.replays = int(f)
		}
	}
	return d
}

// originalID is the ID of the message in the queue it failed in: from the
// failure metadata, else the dead-letter message's own ID.
func (d *dlqMessage) originalID() string {
	if d.failure.MessageID != "" {
		return d.failure.MessageID
	}
	return d.msg.ID
}

func (d *dlqMessage) receipt() string { return aws.ToString(d.raw.ReceiptHandle) }

// sortMessages orders messages by failure time, then original ID and ID, so
// that listings are the same from one run to the next whatever order SQS
// returned the messages in.
func sortMessages(ms []*dlqMessage) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if !a.failure.FailedAt.Equal(b.failure.FailedAt) {
			return a.failure.FailedAt.Before(b.failure.FailedAt)
		}
		if a.originalID() != b.originalID() {
			return a.originalID() < b.originalID()
		}
		return a.msg.ID < b.msg.ID
	})
}

// holder receives messages from a queue and keeps the ones it does not
// delete until release makes them visible again, all at once. A message
// received a second time (its visibility timeout ran out while held) is
// recognised by its ID; the latest receipt handle is kept.
type holder struct {
	c          *sqs.Client
	url        string
	visibility time.Duration
	handles    map[string]string // message ID -> receipt handle of the held messages
	seen       map[string]bool
}

func newHolder(c *sqs.Client, url string, visibility time.Duration) *holder {
	return &holder{c: c, url: url, visibility: visibility, handles: map[string]string{}, seen: map[string]bool{}}
}

// receive receives up to n messages (1..10), waiting at most a second for
// them. It returns the messages not received before, and how many came in
// all: 0 when the queue has no more visible messages.
//
// The receive is not cancelled with ctx: SQS may hand messages to a receive
// whose caller has gone, and they would stay invisible for the visibility
// timeout. It ends after its one-second wait anyway; the caller checks ctx
// once the messages are held.
func (h *holder) receive(ctx context.Context, n int) (fresh []types.Message, got int, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiveTimeout)
	defer cancel()
	out, err := h.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(h.url),
		MaxNumberOfMessages:         int32(min(max(n, 1), 10)),
		WaitTimeSeconds:             1,
		VisibilityTimeout:           int32(h.visibility / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return nil, 0, fmt.Errorf("receiving from %s: %w", queueName(h.url), err)
	}
	for _, m := range out.Messages {
		id := aws.ToString(m.MessageId)
		if h.seen[id] {
			h.handles[id] = aws.ToString(m.ReceiptHandle)
			continue
		}
		h.seen[id] = true
		fresh = append(fresh, m)
	}
	return fresh, len(out.Messages), nil
}

// hold keeps a message until release.
func (h *holder) hold(id, receipt string) { h.handles[id] = receipt }

// forget drops a message that was deleted.
func (h *holder) forget(id string) { delete(h.handles, id) }

// release makes every held message visible again at once, ten per
// ChangeMessageVisibilityBatch call. It runs even when ctx is cancelled (an
// interrupted command must not leave messages invisible). Entries whose
// message is no longer held by this receipt (deleted, or received again by
// someone else) are not errors.
func (h *holder) release(ctx context.Context) error {
	if len(h.handles) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	ids := make([]string, 0, len(h.handles))
	for id := range h.handles {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var errs []error
	for start := 0; start < len(ids); start += 10 {
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(h.url)}
		for i, id := range ids[start:min(start+10, len(ids))] {
			in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h.handles[id]), VisibilityTimeout: 0,
			})
		}
		out, err := h.c.ChangeMessageVisibilityBatch(ctx, in)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range out.Failed {
			switch aws.ToString(f.Code) {
			case "ReceiptHandleIsInvalid", "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight":
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	h.handles = map[string]string{}
	if len(errs) > 0 {
		return fmt.Errorf("releasing messages of %s (they become visible again after --visibility %s): %w",
			queueName(h.url), h.visibility, errors.Join(errs...))
	}
	return nil
}

// peek receives up to max messages of a queue and releases them at once.
// truncated is true when it stopped at max.
func (a *app) peek(ctx context.Context, url string, visibility time.Duration, maxMessages int) (ms []*dlqMessage, truncated bool, err error) {
	c, err := a.sqs(ctx)
	if err != nil {
		return nil, false, err
	}
	h := newHolder(c, url, visibility)
	defer func() {
		if rerr := h.release(ctx); rerr != nil && err == nil {
			err = rerr
		}
	}()
	for len(ms) < maxMessages {
		if err := ctx.Err(); err != nil {
			return nil, false, fmt.Errorf("interrupted: %w", err)
		}
		fresh, got, err := h.receive(ctx, maxMessages-len(ms))
		for _, m := range fresh {
			h.hold(aws.ToString(m.MessageId), aws.ToString(m.ReceiptHandle))
		}
		if err != nil {
			return nil, false, err
		}
		if got == 0 || len(fresh) == 0 {
			break // empty, or only messages already held came back
		}
		for _, m := range fresh {
			if len(ms) < maxMessages {
				ms = append(ms, newDLQMessage(url, m))
			}
		}
	}
	sortMessages(ms)
	return ms, len(ms) >= maxMessages, nil
}

// validateVisibility checks a --visibility flag.
func validateVisibility(d time.Duration) error {
	if d < time.Second || d > 12*time.Hour || d%time.Second != 0 {
		return usageError{fmt.Errorf("--visibility %s: want a whole number of seconds from 1s to 12h", d)}
	}
	return nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

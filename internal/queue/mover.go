package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// Sender is the part of the SQS client a Mover calls.
type Sender interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ Sender = (*sqs.Client)(nil)

// Mover copies failed messages to a dead-letter queue with failure metadata.
// The caller deletes the original once Move returned nil.
type Mover struct {
	// API sends the copies: the SQS client.
	API Sender
	// URL is the dead-letter queue's URL; empty when there is none.
	URL string
	// FIFO is true when the dead-letter queue is a FIFO queue.
	FIFO bool
	// Host names this worker in the metadata.
	Host string
	// MaxMessageSize is the dead-letter queue's MaximumMessageSize attribute,
	// in bytes: the largest copy Move sends with failure metadata (see
	// sqsworker.MessageSize for how SQS counts). 0 stands for SQS's
	// maximum, sqsworker.MaxMessageSize (1 MiB), which is also a queue's
	// default. A runtime sets it from LoadMaxMessageSize on the dead-letter
	// queue (which takes sqs:GetQueueAttributes on that queue) when it may
	// be lower; left at 0, a copy too large for a smaller limit is refused
	// by SQS and sent again without metadata (see Move): one more request,
	// same outcome.
	MaxMessageSize int
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Move sends a copy of m to the dead-letter queue: the same body, the same
// message attributes plus failure metadata (see sqsworker.Failure), the same
// X-Ray trace header, and the same message group (a FIFO queue's, or a
// fair queue's tenant). A replayed
// job without an idempotency-key (its failure metadata names the message it
// was, which the idempotency middleware's DefaultKey keys it by) gets that
// key as an idempotency-key attribute, when it fits beside the metadata
// (the new metadata names m itself); a copy SQS refuses with the key as an
// invalid parameter is sent again with the metadata alone. The
// deduplication ID of the copy is the original message ID, so that a move
// retried after an unknown outcome does not make two copies.
//
// The metadata goes in the first form that keeps the copy within SQS's ten
// message attributes and MaxMessageSize (sqsworker.Failure.AddWithin): one
// attribute per field, else the single JSON attribute sqsworker.AttrFailure,
// else none. If SQS refuses a copy with metadata as an invalid parameter
// (InvalidParameterValue, the error SQS gives for a message over the queue's
// MaximumMessageSize), Move sends it once more without metadata, as the
// metadata is all that a second send can change. So a message that fits the
// dead-letter queue at all is moved after one failed attempt, however close
// to the limit it is.
//
// ok is false when the copy was sent, or tried, without failure metadata: the
// message's own attributes left no room for it, in number or in size, or SQS
// refused the copy with it. A copy without metadata carries the job's key
// (an idempotency-key attribute, the key DefaultKey gives m) when m has
// none and it fits: its replay keeps the job's key, rather than get one of
// the copy's own message ID. Move never changes the body: a message larger
// than the dead-letter queue accepts cannot be moved, and Move returns SQS's
// error.
func (mv *Mover) Move(ctx context.Context, m *sqsworker.Message, cause error) (ok bool, err error) {
	if mv.URL == "" {
		return false, ErrNoDeadLetterQueue
	}
	f := mv.failure(m, cause)
	attrs, ok := f.AddWithin(m.Body, m.MessageAttributes, mv.MaxMessageSize)
	if !ok {
		attrs = mv.keyed(m, attrs)
	}
	sent := false
	if withKey, need := keepKey(m); need {
		if a, fits := f.AddWithin(m.Body, withKey, mv.MaxMessageSize); fits {
			err = mv.send(ctx, m, a)
			// SQS refuses a copy over a MaximumMessageSize the mover did
			// not know of: the metadata may fit without the key.
			if sent = err == nil || !isInvalidParameter(err); sent {
				ok = true
			}
		}
	}
	if !sent {
		err = mv.send(ctx, m, attrs)
	}
	if err != nil && ok && isInvalidParameter(err) {
		first := err
		// Without the key too: SQS refused a copy over a size the mover
		// did not know, and a third send for the key is not worth it.
		if err = mv.send(ctx, m, withoutFailure(m.MessageAttributes)); err != nil {
			return false, fmt.Errorf("moving message %s to dead-letter queue %s: with failure metadata: %v; without: %w", m.ID, mv.URL, first, err)
		}
		return false, nil
	}
	if err != nil {
		return ok, fmt.Errorf("moving message %s to dead-letter queue %s: %w", m.ID, mv.URL, err)
	}
	return ok, nil
}

// keepKey returns m's attributes with an idempotency-key attribute holding
// the key the idempotency middleware's DefaultKey gives m, and whether m
// needs one on its dead-letter copy: it has no idempotency-key, and its
// failure metadata (a replayed job's) names another message, which is what
// DefaultKey keys it by. The copy's new metadata names m itself, so without
// the attribute its replay would get a key of its own, and run the job's
// effect again beside m, should m be left by a crash between the copy and
// its delete and then succeed.
func keepKey(m *sqsworker.Message) (map[string]sqsworker.MessageAttribute, bool) {
	if _, ok := m.MessageAttributes[jobkey.Attribute]; ok {
		return nil, false
	}
	f, ok := sqsworker.ParseFailure(m.MessageAttributes)
	if !ok || f.MessageID == "" || f.MessageID == m.ID {
		return nil, false
	}
	out := maps.Clone(m.MessageAttributes)
	out[jobkey.Attribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: jobkey.OfID(f.MessageID)}
	return out, true
}

// keyed returns attrs, the attributes of m's copy without failure
// metadata (none fit), with an idempotency-key attribute holding the key of
// m's job when m has none and it fits: without metadata, the copy's replay
// would get the key of the copy's own message ID, a key of its own, and
// run the job again beside another copy (a move sent again after its reply
// was lost, an original left by a crash and moved by SQS).
func (mv *Mover) keyed(m *sqsworker.Message, attrs map[string]sqsworker.MessageAttribute) map[string]sqsworker.MessageAttribute {
	if _, ok := attrs[jobkey.Attribute]; ok || len(attrs) >= sqsworker.MaxMessageAttributes {
		return attrs
	}
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]sqsworker.MessageAttribute{}
	}
	out[jobkey.Attribute] = sqsworker.MessageAttribute{DataType: "String", StringValue: jobkey.Of(m)}
	limit := mv.MaxMessageSize
	if limit <= 0 {
		limit = sqsworker.MaxMessageSize
	}
	if sqsworker.MessageSize(m.Body, out) > limit {
		return attrs
	}
	return out
}

// failure returns the metadata Move adds to the copy of m.
func (mv *Mover) failure(m *sqsworker.Message, cause error) sqsworker.Failure {
	now := time.Now
	if mv.Now != nil {
		now = mv.Now
	}
	return sqsworker.Failure{
		Error:         cause.Error(),
		ErrorClass:    sqsworker.ErrorClass(cause),
		Attempts:      m.ReceiveCount,
		FirstReceived: m.FirstReceivedAt,
		FailedAt:      now(),
		SourceQueue:   m.QueueURL,
		MessageID:     m.ID,
		Host:          mv.Host,
	}
}

// send sends one copy of m, with attrs as its message attributes.
func (mv *Mover) send(ctx context.Context, m *sqsworker.Message, attrs map[string]sqsworker.MessageAttribute) error {
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(mv.URL),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: sqsmsg.ToSDKAttributes(attrs),
	}
	sqsmsg.Carry(in, m.GroupID, m.Attributes[sqsworker.AttrAWSTraceHeader], mv.FIFO)
	if mv.FIFO {
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	_, err := mv.API.SendMessage(ctx, in)
	return err
}

// withoutFailure returns attrs less any failure metadata.
func withoutFailure(attrs map[string]sqsworker.MessageAttribute) map[string]sqsworker.MessageAttribute {
	out := make(map[string]sqsworker.MessageAttribute, len(attrs))
	for k, v := range attrs {
		if !sqsworker.IsFailureAttribute(k) {
			out[k] = v
		}
	}
	return out
}

// IsInvalidParameter reports whether SQS refused a request as invalid with
// the error code it also uses for a message over the queue's
// MaximumMessageSize: see isInvalidParameter.
func IsInvalidParameter(err error) bool { return isInvalidParameter(err) }

// isInvalidParameter reports whether SQS refused a request as invalid with
// the error code it uses for a message over the queue's MaximumMessageSize
// (there is no code of its own for that case): InvalidParameterValue, also
// in its query-protocol form AWS.SimpleQueueService.InvalidParameterValue
// (the SDK reports the code of the x-amzn-query-error header, which the
// local emulator writes in that form).
func isInvalidParameter(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) &&
		strings.TrimPrefix(api.ErrorCode(), "AWS.SimpleQueueService.") == "InvalidParameterValue"
}

// LoadMaxMessageSize reads the MaximumMessageSize attribute of the queue at
// url: the largest message, in bytes, the queue accepts. For a dead-letter
// queue, it is the value of Mover.MaxMessageSize.
func LoadMaxMessageSize(ctx context.Context, api API, url string) (int, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameMaximumMessageSize},
	})
	if err != nil {
		return 0, fmt.Errorf("reading MaximumMessageSize of queue %s: %w", url, err)
	}
	v, found := out.Attributes[string(types.QueueAttributeNameMaximumMessageSize)]
	if !found {
		return sqsworker.MaxMessageSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("queue %s: %w: malformed MaximumMessageSize %q", url, ErrInvalid, v)
	}
	return n, nil
}

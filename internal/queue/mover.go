package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
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
	API Sender
	// URL is the dead-letter queue's URL; empty when there is none.
	URL string
	// FIFO is true when the dead-letter queue is a FIFO queue.
	FIFO bool
	// Host names this worker in the metadata.
	Host string
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Move sends a copy of m to the dead-letter queue: the same body, the same
// message attributes plus failure metadata (see sqsworker.Failure), the same
// X-Ray trace header, and on FIFO queues the same message group. The
// deduplication ID of the copy is the original message ID, so that a move
// retried after an unknown outcome does not make two copies.
//
// ok is false when the attributes left no room for failure metadata; the copy
// was sent without it.
func (mv *Mover) Move(ctx context.Context, m *sqsworker.Message, cause error) (ok bool, err error) {
	if mv.URL == "" {
		return false, ErrNoDeadLetterQueue
	}
	now := time.Now
	if mv.Now != nil {
		now = mv.Now
	}
	f := sqsworker.Failure{
		Error:         cause.Error(),
		ErrorClass:    sqsworker.ErrorClass(cause),
		Attempts:      m.ReceiveCount,
		FirstReceived: m.FirstReceivedAt,
		FailedAt:      now(),
		SourceQueue:   m.QueueURL,
		MessageID:     m.ID,
		Host:          mv.Host,
	}
	attrs, ok := f.AddTo(m.MessageAttributes)
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(mv.URL),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: sqsmsg.ToSDKAttributes(attrs),
	}
	if th := m.Attributes[sqsworker.AttrAWSTraceHeader]; th != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameForSendsAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(th)},
		}
	}
	if mv.FIFO {
		group := m.GroupID
		if group == "" {
			group = "sqsworker"
		}
		in.MessageGroupId = aws.String(group)
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	if _, err := mv.API.SendMessage(ctx, in); err != nil {
		return ok, fmt.Errorf("moving message %s to dead-letter queue %s: %w", m.ID, mv.URL, err)
	}
	return ok, nil
}

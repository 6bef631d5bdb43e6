package dlq

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// API is the part of the SQS client every dead-letter queue operation
// calls. *sqs.Client implements it, and so does the in-memory
// sqstest.Fake.
//
// Some operations need more, which the client may or may not have; the
// package finds out with a type assertion and degrades clearly without it:
// [SourceLister] and [QueueLister] (to check that a queue is a dead-letter
// queue and find its sources), [Purger] ([Queue.Purge]) and [MoveTaskAPI]
// (SQS's own redrive).
type API interface {
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// SourceLister lists the queues whose redrive policy names a dead-letter
// queue (sqs:ListDeadLetterSourceQueues). [Open] uses it when the client
// has it; an endpoint that answers that it does not know the operation (as
// the fauxqs emulator does) is reported and [QueueLister] is used instead.
type SourceLister interface {
	ListDeadLetterSourceQueues(ctx context.Context, in *sqs.ListDeadLetterSourceQueuesInput, optFns ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error)
}

// QueueLister lists queues (sqs:ListQueues). Where ListDeadLetterSourceQueues
// is not available, [Open] reads the redrive policy of every queue it lists
// (up to [maxListedQueues]) to find the sources of a dead-letter queue.
type QueueLister interface {
	ListQueues(ctx context.Context, in *sqs.ListQueuesInput, optFns ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error)
}

// Purger deletes every message of a queue (sqs:PurgeQueue), for
// [Queue.Purge].
type Purger interface {
	PurgeQueue(ctx context.Context, in *sqs.PurgeQueueInput, optFns ...func(*sqs.Options)) (*sqs.PurgeQueueOutput, error)
}

// MoveTaskAPI is SQS's own redrive of a dead-letter queue (message move
// tasks), for [Queue.StartRedrive], [Queue.Redrives] and [CancelRedrive].
type MoveTaskAPI interface {
	StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, optFns ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error)
	ListMessageMoveTasks(ctx context.Context, in *sqs.ListMessageMoveTasksInput, optFns ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error)
	CancelMessageMoveTask(ctx context.Context, in *sqs.CancelMessageMoveTaskInput, optFns ...func(*sqs.Options)) (*sqs.CancelMessageMoveTaskOutput, error)
}

var (
	_ API          = (*sqs.Client)(nil)
	_ SourceLister = (*sqs.Client)(nil)
	_ QueueLister  = (*sqs.Client)(nil)
	_ Purger       = (*sqs.Client)(nil)
	_ MoveTaskAPI  = (*sqs.Client)(nil)
)

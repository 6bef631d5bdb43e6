package sqstest

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Names of the message move task operations of a Fake, for [Fake.FailNext],
// [Fake.LoseReplies] and [Fake.Calls].
const (
	OpStartMessageMoveTask  = "StartMessageMoveTask"
	OpListMessageMoveTasks  = "ListMessageMoveTasks"
	OpCancelMessageMoveTask = "CancelMessageMoveTask"
)

func init() {
	for _, op := range []string{OpStartMessageMoveTask, OpListMessageMoveTasks, OpCancelMessageMoveTask} {
		operations[op] = true
	}
}

// moveTask is a message move task the Fake ran. f.mu guards it.
type moveTask struct {
	handle, source, destination string
	started                     int64 // milliseconds since the epoch
	moved, toMove               int64
	perSecond                   *int32
	status, failure             string
}

// StartMessageMoveTask moves the messages of a dead-letter queue (SourceArn)
// to DestinationArn, or each back to the queue SQS's redrive moved it from
// (its DeadLetterQueueSourceArn), as SQS's dead-letter queue redrive does.
//
// What it models of a moved message, the SQS Developer Guide documents:
// a redriven message is a new message in its destination, with a new
// message ID and enqueue time (the task "resets the retention period"), so
// its receive count starts from 0. What the Fake does beyond that is its
// own choice, not documented behaviour: the moved message keeps its body,
// every message attribute (the API has no way to leave one out), its X-Ray
// trace header and, on FIFO queues, its message group and deduplication ID
// (the Fake applies no deduplication to it); it carries no
// DeadLetterQueueSourceArn, which SQS documents only for messages its
// redrive moved into a dead-letter queue, so code should not rely on
// finding it after a move either way.
//
// Unlike SQS, which runs the task in the background at up to
// MaxNumberOfMessagesPerSecond, the Fake moves the messages before it
// returns, and the task is COMPLETED at once (ListMessageMoveTasks reports
// it; CancelMessageMoveTask finds nothing running). It moves the messages
// visible when it is called: a message in flight (received and not yet
// visible again) or delayed stays in the dead-letter queue. SQS does not
// document what its task does with a message in flight; code that relies
// on a task moving one must not trust the Fake to tell. A message without
// a destination (no DestinationArn, and not moved there by SQS's redrive,
// or from a queue since deleted) stays too, and the task is FAILED with a
// reason; how SQS treats such a message is not documented either.
//
// Errors: a missing SourceArn is MissingParameter; a source or destination
// that is not a queue of the Fake is *types.ResourceNotFoundException; a
// source no queue's redrive policy names, a destination of the other queue
// type, or a rate outside 1 to 500 is InvalidParameterValue.
func (f *Fake) StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, _ ...func(*sqs.Options)) (out *sqs.StartMessageMoveTaskOutput, err error) {
	const op = OpStartMessageMoveTask
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	f.mu.Lock()
	defer f.mu.Unlock()
	out, err = f.startMoveTask(in)
	if err != nil {
		return nil, opError(op, err)
	}
	return out, nil
}

func (f *Fake) startMoveTask(in *sqs.StartMessageMoveTaskInput) (*sqs.StartMessageMoveTaskOutput, error) {
	src, err := f.moveSource(in.SourceArn)
	if err != nil {
		return nil, err
	}
	isDLQ := false
	for _, q := range f.queues {
		if d, _ := f.redrive(q); d == src {
			isDLQ = true
			break
		}
	}
	if !isDLQ {
		return nil, invalidParameter("Source queue must be configured as a Dead Letter Queue.")
	}
	var dest *queue
	if arn := aws.ToString(in.DestinationArn); arn != "" {
		if dest = f.queueByARN(arn); dest == nil {
			return nil, &types.ResourceNotFoundException{Message: aws.String("The resource that you specified for the DestinationArn parameter doesn't exist.")}
		}
		if dest.fifo != src.fifo {
			return nil, invalidParameter("The source queue and the destination queue must be of the same type.")
		}
	}
	if r := in.MaxNumberOfMessagesPerSecond; r != nil && (*r < 1 || *r > 500) {
		return nil, invalidParameter("Value %d for parameter MaxNumberOfMessagesPerSecond is invalid. Reason: must be between 1 and 500.", *r)
	}
	now := f.now()
	t := &moveTask{
		handle: newMessageID(), source: src.arn, destination: aws.ToString(in.DestinationArn),
		started: now.UnixMilli(), perSecond: in.MaxNumberOfMessagesPerSecond, status: "COMPLETED",
	}
	stayed := 0
	kept := src.msgs[:0:0]
	for _, m := range src.msgs {
		if !m.visible(now) {
			kept = append(kept, m)
			continue
		}
		t.toMove++
		to := dest
		if to == nil {
			to = f.queueByARN(m.deadLetterOf)
		}
		if to == nil || to.fifo != src.fifo {
			stayed++
			kept = append(kept, m)
			continue
		}
		src.forgetMoved(m)
		c := &message{
			id: newMessageID(), ordinal: to.nextOrdinal(), body: m.body, md5Body: m.md5Body, attrs: m.attrs,
			traceHeader: m.traceHeader, group: m.group, dedupID: m.dedupID, sent: now, visibleAt: now,
		}
		if to.fifo {
			c.seq = to.nextSeq()
		}
		to.msgs = append(to.msgs, c)
		t.moved++
	}
	src.msgs = kept
	if stayed > 0 {
		t.status = "FAILED"
		t.failure = fmt.Sprintf("%d message(s) have no destination: no DestinationArn, and no source queue SQS's redrive moved them from", stayed)
	}
	f.keepTask(t)
	f.notify()
	return &sqs.StartMessageMoveTaskOutput{TaskHandle: aws.String(t.handle)}, nil
}

// maxListedTasks is the most move tasks ListMessageMoveTasks lists of a
// source queue (its MaxResults).
const maxListedTasks = 10

// keepTask records t, forgetting the oldest task of its source when more
// than maxListedTasks are recorded, which no listing shows. f.mu is held.
func (f *Fake) keepTask(t *moveTask) {
	f.tasks = append(f.tasks, t)
	n := 0
	for _, o := range f.tasks {
		if o.source == t.source {
			n++
		}
	}
	if n > maxListedTasks {
		i := slices.IndexFunc(f.tasks, func(o *moveTask) bool { return o.source == t.source })
		f.tasks = slices.Delete(f.tasks, i, i+1)
	}
}

// moveSource is the queue a move task's SourceArn names: MissingParameter
// when arn is empty, *types.ResourceNotFoundException when no queue of f
// has it. f.mu is held.
func (f *Fake) moveSource(arn *string) (*queue, error) {
	if aws.ToString(arn) == "" {
		return nil, missingParameter("SourceArn")
	}
	src := f.queueByARN(aws.ToString(arn))
	if src == nil {
		return nil, &types.ResourceNotFoundException{Message: aws.String("The resource that you specified for the SourceArn parameter doesn't exist.")}
	}
	return src, nil
}

// ListMessageMoveTasks lists the most recent move tasks of a source queue,
// newest first: MaxResults of them (1 to 10, default 1, as SQS). Only a
// running task has a TaskHandle, and the Fake's tasks have all ended (see
// [Fake.StartMessageMoveTask]).
func (f *Fake) ListMessageMoveTasks(ctx context.Context, in *sqs.ListMessageMoveTasksInput, _ ...func(*sqs.Options)) (out *sqs.ListMessageMoveTasksOutput, err error) {
	const op = OpListMessageMoveTasks
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.moveSource(in.SourceArn); err != nil {
		return nil, opError(op, err)
	}
	n := 1
	if in.MaxResults != nil {
		if *in.MaxResults < 1 || *in.MaxResults > maxListedTasks {
			return nil, opError(op, invalidParameter("Value %d for parameter MaxResults is invalid. Reason: must be between 1 and 10.", *in.MaxResults))
		}
		n = int(*in.MaxResults)
	}
	out = &sqs.ListMessageMoveTasksOutput{}
	for _, t := range slices.Backward(f.tasks) {
		if len(out.Results) == n {
			break
		}
		if t.source != aws.ToString(in.SourceArn) {
			continue
		}
		r := types.ListMessageMoveTasksResultEntry{
			SourceArn: aws.String(t.source), Status: aws.String(t.status), StartedTimestamp: t.started,
			ApproximateNumberOfMessagesMoved: t.moved, ApproximateNumberOfMessagesToMove: aws.Int64(t.toMove),
			MaxNumberOfMessagesPerSecond: t.perSecond,
		}
		if t.destination != "" {
			r.DestinationArn = aws.String(t.destination)
		}
		if t.failure != "" {
			r.FailureReason = aws.String(t.failure)
		}
		out.Results = append(out.Results, r)
	}
	return out, nil
}

// CancelMessageMoveTask cancels a running move task. The Fake's tasks end
// before StartMessageMoveTask returns, so every handle is
// *types.ResourceNotFoundException, as for a task SQS finished.
func (f *Fake) CancelMessageMoveTask(ctx context.Context, in *sqs.CancelMessageMoveTaskInput, _ ...func(*sqs.Options)) (out *sqs.CancelMessageMoveTaskOutput, err error) {
	const op = OpCancelMessageMoveTask
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if aws.ToString(in.TaskHandle) == "" {
		return nil, opError(op, missingParameter("TaskHandle"))
	}
	return nil, opError(op, &types.ResourceNotFoundException{Message: aws.String("The task handle is not that of a running message move task.")})
}

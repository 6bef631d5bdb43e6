package sqstest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
)

// ReceiveMessage receives up to MaxNumberOfMessages messages (default 1, at
// most 10) from a queue, as SQS does: see the package documentation for the
// order. The messages are in flight for VisibilityTimeout seconds, or the
// queue's visibility timeout when it is 0, and each gets a new receipt
// handle; the one of the previous receive becomes invalid. A message already
// received as many times as the redrive policy's maxReceiveCount is moved to
// the dead-letter queue instead.
//
// When no message is visible it waits up to WaitTimeSeconds (or the queue's
// ReceiveMessageWaitTimeSeconds) for one, returning as soon as one is, and
// returns early with an error wrapping ctx's when ctx ends. System attributes
// are returned when asked for in MessageSystemAttributeNames (or the
// deprecated AttributeNames), message attributes when asked for in
// MessageAttributeNames ("All", ".*", names, or prefixes such as "trace.*").
//
// On a FIFO queue, a receive with the ReceiveRequestAttemptId of an earlier
// one that handed out messages, made within [DeduplicationInterval] of it
// while none of those messages has been modified since (deleted, its
// visibility changed, received again), hands out the same messages again,
// with the same receipt handles and receive counts, and makes them in flight
// for the visibility timeout from now, whatever MaxNumberOfMessages it asks
// for: a receive retried after its reply was lost gets what the lost reply
// carried. Otherwise it receives afresh, and a later receive with its ID
// repeats it. Standard queues ignore the ID, as SQS does.
func (f *Fake) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, _ ...func(*sqs.Options)) (out *sqs.ReceiveMessageOutput, err error) {
	const op = OpReceiveMessage
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil {
		return nil, paramRequired(op, "QueueUrl")
	}
	url := *in.QueueUrl
	f.mu.Lock()
	q := f.queueByURL(url)
	if q == nil {
		f.mu.Unlock()
		return nil, opError(op, queueDoesNotExist())
	}
	max := int(in.MaxNumberOfMessages)
	if max == 0 {
		max = 1
	}
	wait := int(in.WaitTimeSeconds)
	if wait == 0 {
		wait = q.intAttr("ReceiveMessageWaitTimeSeconds", 0)
	}
	vis := int(in.VisibilityTimeout)
	if vis == 0 {
		vis = q.intAttr("VisibilityTimeout", 30)
	}
	attemptID := ""
	if q.fifo { // standard queues ignore it, as SQS does
		attemptID = aws.ToString(in.ReceiveRequestAttemptId)
	}
	f.mu.Unlock()
	switch {
	case attemptID != "" && !validGroupOrDedupID(attemptID):
		return nil, opError(op, invalidParameter("Value %s for parameter ReceiveRequestAttemptId is invalid. Reason: up to 128 alphanumeric or punctuation characters.", attemptID))
	case max < 1 || max > 10:
		return nil, opError(op, invalidParameter("Value %d for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.", max))
	case wait < 0 || wait > 20:
		return nil, opError(op, invalidParameter("Value %d for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided.", wait))
	case vis < 0 || vis > 43200:
		return nil, opError(op, invalidParameter("Value %d for parameter VisibilityTimeout is invalid. Reason: Must be >= 0 and <= 43200, if provided.", vis))
	}
	filter := newAttributeFilter(in)

	polling := wait > 0
	var waitDone <-chan time.Time
	if polling {
		t := time.NewTimer(time.Duration(wait) * time.Second)
		defer t.Stop()
		waitDone = t.C
	}
	for {
		f.mu.Lock()
		q := f.queueByURL(url)
		if q == nil {
			f.mu.Unlock()
			return nil, opError(op, queueDoesNotExist())
		}
		now := f.now()
		var got []*message
		if attemptID != "" {
			got = f.receiveAttempt(q, now, attemptID, max, time.Duration(vis)*time.Second)
		} else {
			got = f.receive(q, now, max, time.Duration(vis)*time.Second)
		}
		if len(got) > 0 || !polling {
			out := &sqs.ReceiveMessageOutput{}
			for _, m := range got {
				out.Messages = append(out.Messages, m.toSDK(q, filter))
			}
			f.mu.Unlock()
			return out, nil
		}
		recheck := maxPollRecheck
		if d := q.nextChange(now); d > 0 && d < recheck {
			recheck = d
		}
		changed := f.changed
		f.mu.Unlock()
		t := time.NewTimer(recheck)
		select {
		case <-changed:
		case <-t.C:
		case <-waitDone:
			polling = false // one last look
		case <-ctx.Done():
			t.Stop()
			return nil, opError(op, &smithy.CanceledError{Err: ctx.Err()})
		}
		t.Stop()
	}
}

// SendMessage sends a message, as SQS does: see the package documentation.
// On FIFO queues MessageGroupId is required, and so is
// MessageDeduplicationId unless the queue has content-based deduplication; a
// message whose deduplication ID was sent in the last 5 minutes is accepted
// but not delivered again.
func (f *Fake) SendMessage(ctx context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (out *sqs.SendMessageOutput, err error) {
	const op = OpSendMessage
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil {
		return nil, paramRequired(op, "QueueUrl")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	out, err = f.sendMessage(in)
	if err != nil {
		return nil, opError(op, err)
	}
	return out, nil
}

// sendMessage is SendMessage without counting and injected failures. f.mu is
// held.
func (f *Fake) sendMessage(in *sqs.SendMessageInput) (*sqs.SendMessageOutput, error) {
	q := f.queueByURL(aws.ToString(in.QueueUrl))
	if q == nil {
		return nil, queueDoesNotExist()
	}
	r, err := f.send(q, sendRequest{
		body: in.MessageBody, delay: in.DelaySeconds, attrs: in.MessageAttributes,
		sysAttrs: in.MessageSystemAttributes, group: in.MessageGroupId, dedupID: in.MessageDeduplicationId,
	})
	if err != nil {
		return nil, err
	}
	return &sqs.SendMessageOutput{
		MessageId:                    aws.String(r.id),
		MD5OfMessageBody:             aws.String(r.md5Body),
		MD5OfMessageAttributes:       optional(r.md5Attrs),
		MD5OfMessageSystemAttributes: optional(r.md5Sys),
		SequenceNumber:               optional(r.seq),
	}, nil
}

// SendMessageBatch sends up to 10 messages, each as SendMessage would.
// Entries that fail, by themselves or by FailEntries, are in the output's
// Failed list.
func (f *Fake) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (out *sqs.SendMessageBatchOutput, err error) {
	const op = OpSendMessageBatch
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil {
		return nil, paramRequired(op, "QueueUrl")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(*in.QueueUrl)
	if q == nil {
		return nil, opError(op, queueDoesNotExist())
	}
	ids := make([]*string, len(in.Entries))
	size := 0
	for i, e := range in.Entries {
		ids[i] = e.Id
		size += len(aws.ToString(e.MessageBody))
	}
	if err := checkBatch(ids, "SendMessageBatchRequestEntry"); err != nil {
		return nil, opError(op, err)
	}
	if limit := q.intAttr("MaximumMessageSize", 1048576); size > limit {
		return nil, opError(op, &types.BatchRequestTooLong{Message: aws.String(fmt.Sprintf("Batch requests cannot be longer than %d bytes.", limit))})
	}
	out = &sqs.SendMessageBatchOutput{Successful: []types.SendMessageBatchResultEntry{}, Failed: []types.BatchResultErrorEntry{}}
	for _, e := range in.Entries {
		if inj, ok := f.entryFailure(op); ok {
			out.Failed = append(out.Failed, injectedEntryError(e.Id, inj))
			continue
		}
		r, err := f.send(q, sendRequest{
			body: e.MessageBody, delay: e.DelaySeconds, attrs: e.MessageAttributes,
			sysAttrs: e.MessageSystemAttributes, group: e.MessageGroupId, dedupID: e.MessageDeduplicationId,
		})
		if err != nil {
			out.Failed = append(out.Failed, entryError(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{
			Id: e.Id, MessageId: aws.String(r.id), MD5OfMessageBody: aws.String(r.md5Body),
			MD5OfMessageAttributes: optional(r.md5Attrs), MD5OfMessageSystemAttributes: optional(r.md5Sys),
			SequenceNumber: optional(r.seq),
		})
	}
	return out, nil
}

// DeleteMessage deletes the message received with ReceiptHandle. It fails
// with *types.ReceiptHandleIsInvalid when the handle is unknown or not the
// latest receive's. Deleting a deleted message again, with the handle that
// deleted it, succeeds, as on SQS.
func (f *Fake) DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, _ ...func(*sqs.Options)) (out *sqs.DeleteMessageOutput, err error) {
	const op = OpDeleteMessage
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil || in.ReceiptHandle == nil {
		return nil, paramRequired(op, "QueueUrl and ReceiptHandle")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(*in.QueueUrl)
	if q == nil {
		return nil, opError(op, queueDoesNotExist())
	}
	if err := f.deleteMessage(q, *in.ReceiptHandle); err != nil {
		return nil, opError(op, err)
	}
	return &sqs.DeleteMessageOutput{}, nil
}

// DeleteMessageBatch deletes up to 10 messages, each as DeleteMessage would.
// Entries that fail, by themselves or by FailEntries, are in the output's
// Failed list: an unknown or outdated receipt handle fails with code
// ReceiptHandleIsInvalid and SenderFault true.
func (f *Fake) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (out *sqs.DeleteMessageBatchOutput, err error) {
	const op = OpDeleteMessageBatch
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil {
		return nil, paramRequired(op, "QueueUrl")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(*in.QueueUrl)
	if q == nil {
		return nil, opError(op, queueDoesNotExist())
	}
	ids := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.Id
		if e.ReceiptHandle == nil {
			return nil, opError(op, missingParameter(fmt.Sprintf("DeleteMessageBatchRequestEntry.%d.ReceiptHandle", i+1)))
		}
	}
	if err := checkBatch(ids, "DeleteMessageBatchRequestEntry"); err != nil {
		return nil, opError(op, err)
	}
	out = &sqs.DeleteMessageBatchOutput{Successful: []types.DeleteMessageBatchResultEntry{}, Failed: []types.BatchResultErrorEntry{}}
	for _, e := range in.Entries {
		if inj, ok := f.entryFailure(op); ok {
			out.Failed = append(out.Failed, injectedEntryError(e.Id, inj))
			continue
		}
		if err := f.deleteMessage(q, *e.ReceiptHandle); err != nil {
			out.Failed = append(out.Failed, entryError(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// ChangeMessageVisibility makes the in-flight message received with
// ReceiptHandle visible again VisibilityTimeout seconds from now: 0 makes it
// visible at once. It fails with *types.ReceiptHandleIsInvalid when the
// handle is unknown or not the latest receive's, with
// *types.MessageNotInflight when the message's visibility timeout has passed,
// and with InvalidParameterValue when the message was deleted.
func (f *Fake) ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, _ ...func(*sqs.Options)) (out *sqs.ChangeMessageVisibilityOutput, err error) {
	const op = OpChangeMessageVisibility
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil || in.ReceiptHandle == nil {
		return nil, paramRequired(op, "QueueUrl and ReceiptHandle")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(*in.QueueUrl)
	if q == nil {
		return nil, opError(op, queueDoesNotExist())
	}
	if err := f.changeVisibility(q, *in.ReceiptHandle, in.VisibilityTimeout); err != nil {
		return nil, opError(op, err)
	}
	return &sqs.ChangeMessageVisibilityOutput{}, nil
}

// ChangeMessageVisibilityBatch changes the visibility of up to 10 messages,
// each as ChangeMessageVisibility would. Entries that fail, by themselves or
// by FailEntries, are in the output's Failed list, with SenderFault true
// unless injected otherwise.
func (f *Fake) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (out *sqs.ChangeMessageVisibilityBatchOutput, err error) {
	const op = OpChangeMessageVisibilityBatch
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil {
		return nil, paramRequired(op, "QueueUrl")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(*in.QueueUrl)
	if q == nil {
		return nil, opError(op, queueDoesNotExist())
	}
	ids := make([]*string, len(in.Entries))
	for i, e := range in.Entries {
		ids[i] = e.Id
		if e.ReceiptHandle == nil {
			return nil, opError(op, missingParameter(fmt.Sprintf("ChangeMessageVisibilityBatchRequestEntry.%d.ReceiptHandle", i+1)))
		}
	}
	if err := checkBatch(ids, "ChangeMessageVisibilityBatchRequestEntry"); err != nil {
		return nil, opError(op, err)
	}
	out = &sqs.ChangeMessageVisibilityBatchOutput{Successful: []types.ChangeMessageVisibilityBatchResultEntry{}, Failed: []types.BatchResultErrorEntry{}}
	for _, e := range in.Entries {
		if inj, ok := f.entryFailure(op); ok {
			out.Failed = append(out.Failed, injectedEntryError(e.Id, inj))
			continue
		}
		if err := f.changeVisibility(q, *e.ReceiptHandle, e.VisibilityTimeout); err != nil {
			out.Failed = append(out.Failed, entryError(e.Id, err))
			continue
		}
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// allQueueAttributes are the attributes GetQueueAttributes returns for "All",
// in order.
var allQueueAttributes = []string{
	"QueueArn", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
	"ApproximateNumberOfMessagesDelayed", "CreatedTimestamp", "LastModifiedTimestamp",
	"VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod", "DelaySeconds",
	"ReceiveMessageWaitTimeSeconds", "RedrivePolicy", "RedriveAllowPolicy", "Policy",
	"KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled",
	"FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit",
}

// GetQueueAttributes returns the attributes asked for ("All" for all): those
// set when the queue was created, with SQS's defaults, and the computed ones
// (QueueArn, ApproximateNumberOfMessages, ApproximateNumberOfMessagesNotVisible,
// ApproximateNumberOfMessagesDelayed, CreatedTimestamp, LastModifiedTimestamp).
// Attributes a queue does not have, such as FifoQueue on a standard queue or
// RedrivePolicy on a queue without one, are left out. An unknown name fails
// with *types.InvalidAttributeName.
func (f *Fake) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (out *sqs.GetQueueAttributesOutput, err error) {
	const op = OpGetQueueAttributes
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueUrl == nil {
		return nil, paramRequired(op, "QueueUrl")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queueByURL(*in.QueueUrl)
	if q == nil {
		return nil, opError(op, queueDoesNotExist())
	}
	names := make([]string, 0, len(in.AttributeNames))
	for _, n := range in.AttributeNames {
		if n == types.QueueAttributeNameAll {
			names = allQueueAttributes
			break
		}
		names = append(names, string(n))
	}
	now := f.now()
	visible, inFlight, delayed := q.depth(now)
	attrs := map[string]string{}
	withDefault := func(name, def string) string {
		if v, ok := q.attrs[name]; ok {
			return v
		}
		return def
	}
	for _, n := range names {
		var v string
		switch n {
		case "QueueArn":
			v = q.arn
		case "ApproximateNumberOfMessages":
			v = strconv.Itoa(visible)
		case "ApproximateNumberOfMessagesNotVisible":
			v = strconv.Itoa(inFlight)
		case "ApproximateNumberOfMessagesDelayed":
			v = strconv.Itoa(delayed)
		case "CreatedTimestamp":
			v = strconv.FormatInt(q.created.Unix(), 10)
		case "LastModifiedTimestamp":
			v = strconv.FormatInt(q.modified.Unix(), 10)
		case "VisibilityTimeout":
			v = withDefault(n, "30")
		case "MaximumMessageSize":
			v = withDefault(n, "1048576")
		case "MessageRetentionPeriod":
			v = withDefault(n, strconv.Itoa(defaultRetention))
		case "DelaySeconds", "ReceiveMessageWaitTimeSeconds":
			v = withDefault(n, "0")
		case "SqsManagedSseEnabled":
			v = withDefault(n, "true")
		case "RedrivePolicy", "RedriveAllowPolicy", "Policy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds":
			v = q.attrs[n]
		case "FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit":
			if q.fifo {
				v = withDefault(n, map[string]string{
					"FifoQueue": "true", "ContentBasedDeduplication": "false",
					"DeduplicationScope": "queue", "FifoThroughputLimit": "perQueue",
				}[n])
			}
		default:
			return nil, opError(op, &types.InvalidAttributeName{Message: aws.String("Unknown Attribute " + n + ".")})
		}
		if v != "" {
			attrs[n] = v
		}
	}
	return &sqs.GetQueueAttributesOutput{Attributes: attrs}, nil
}

// GetQueueUrl returns the URL of the queue named QueueName, or fails with
// *types.QueueDoesNotExist.
func (f *Fake) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, _ ...func(*sqs.Options)) (out *sqs.GetQueueUrlOutput, err error) {
	const op = OpGetQueueUrl
	if err = f.begin(ctx, op); err != nil {
		return nil, err
	}
	defer loseReply(f, op, &out, &err)
	if in == nil || in.QueueName == nil {
		return nil, paramRequired(op, "QueueName")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues[*in.QueueName]
	if q == nil || (in.QueueOwnerAWSAccountId != nil && *in.QueueOwnerAWSAccountId != Account) {
		return nil, opError(op, queueDoesNotExist())
	}
	return &sqs.GetQueueUrlOutput{QueueUrl: aws.String(q.url)}, nil
}

var batchEntryID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatch checks the number and Ids of the entries of a batch call.
func checkBatch(ids []*string, entry string) error {
	switch n := len(ids); {
	case n == 0:
		return &types.EmptyBatchRequest{Message: aws.String("There should be at least one " + entry + " in the request.")}
	case n > 10:
		return &types.TooManyEntriesInBatchRequest{Message: aws.String(fmt.Sprintf("Maximum number of entries per request are 10. You have sent %d.", n))}
	}
	seen := map[string]bool{}
	for _, id := range ids {
		s := aws.ToString(id)
		if !batchEntryID.MatchString(s) {
			return &types.InvalidBatchEntryId{Message: aws.String(fmt.Sprintf("A batch entry id %q can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.", s))}
		}
		if seen[s] {
			return &types.BatchEntryIdsNotDistinct{Message: aws.String("Id " + s + " repeated.")}
		}
		seen[s] = true
	}
	return nil
}

func entryError(id *string, err error) types.BatchResultErrorEntry {
	code, msg, sender := "InternalError", err.Error(), false
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code, msg, sender = ae.ErrorCode(), ae.ErrorMessage(), ae.ErrorFault() != smithy.FaultServer
	}
	return types.BatchResultErrorEntry{Id: id, Code: aws.String(code), Message: aws.String(msg), SenderFault: sender}
}

func injectedEntryError(id *string, inj *injectedEntry) types.BatchResultErrorEntry {
	return types.BatchResultErrorEntry{
		Id: id, Code: aws.String(inj.code), SenderFault: inj.senderFault,
		Message: aws.String("failure injected by sqstest.Fake.FailEntries"),
	}
}

func paramRequired(op, field string) error {
	e := &smithy.InvalidParamsError{Context: op + "Input"}
	e.Add(smithy.NewErrParamRequired(field))
	return opError(op, e)
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

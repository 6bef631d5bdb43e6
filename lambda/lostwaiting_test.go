package lambda_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// refusedExtensions is a client whose visibility changes of the message
// with one receipt handle, once set, SQS refuses as it refuses those of a
// message it no longer holds for it (ReceiptHandleIsInvalid): its lease is
// lost. Its other calls go to SQS.
type refusedExtensions struct {
	lambda.API
	handle atomic.Pointer[string]
}

func (r *refusedExtensions) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	h := r.handle.Load()
	var keep []types.ChangeMessageVisibilityBatchRequestEntry
	var failed []types.BatchResultErrorEntry
	for _, e := range in.Entries {
		if h != nil && aws.ToString(e.ReceiptHandle) == *h {
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("lease gone"), SenderFault: true})
			continue
		}
		keep = append(keep, e)
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	if len(keep) > 0 {
		in2 := *in
		in2.Entries = keep
		o, err := r.API.ChangeMessageVisibilityBatch(ctx, &in2, opts...)
		if err != nil {
			return nil, err
		}
		out = o
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

// A record waiting for the one handler slot (Concurrency 1) whose lease the
// heartbeat finds lost meanwhile (SQS refuses its extension), on the local
// SQS: it is not run once the slot is free, by a handler that ignores its
// context, but left to SQS, reported failed. It ran, beside the consumer
// SQS may have handed it to.
func TestLostWhileWaitingNotRun(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 4 * time.Second})
	localtest.Send(t, sq, q.URL, "", "first", "second")
	var msgs []types.Message
	localtest.Eventually(t, 30*time.Second, func() bool {
		out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, out.Messages...)
		return len(msgs) == 2
	}, "received %d of 2", len(msgs))
	slices.SortFunc(msgs, func(a, b types.Message) int { // "first" first
		if aws.ToString(a.Body) == "first" {
			return -1
		}
		return 1
	})
	api := &refusedExtensions{API: sq}
	api.handle.Store(msgs[1].ReceiptHandle)
	var secondRan atomic.Bool
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.Body == "first" {
			select { // long enough for the heartbeat to try the waiting record
			case <-time.After(4 * time.Second):
			case <-ctx.Done():
			}
			return nil
		}
		secondRan.Store(true) // ignores its context
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: api, Concurrency: 1})
	resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, msgs), 30*time.Second)
	if secondRan.Load() {
		t.Error("the record whose lease was lost while it waited ran")
	}
	if got := failedIDs(resp); !slices.Equal(got, []string{aws.ToString(msgs[1].MessageId)}) {
		t.Errorf("failures %v, want the lost record's alone", got)
	}
}

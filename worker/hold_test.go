package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// Messages held back until their time show in Stats, apart from failures:
// Held, the waiting copies sent (Requeued) and those that could not be
// (RequeueFailures).
func TestFakeHoldsInStats(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	f.CreateQueue("held-dlq", nil)
	url := f.CreateQueue("held", map[string]string{"VisibilityTimeout": "30",
		// No room for a visibility step: each waits in a copy.
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("held-dlq"))})
	nb := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	for _, body := range []string{"a", "b"} {
		f.Send(url, body, func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]types.MessageAttributeValue{
				sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(nb)},
			}
		})
	}
	f.FailNext(sqstest.OpSendMessage, errors.New("connection reset"), 1)
	r := start(t, f, worker.Config{QueueURL: url, Backoff: noDelay}, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		t.Error("the handler ran before its time")
		return nil
	}))
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Held == 2 }, "not held: %+v", r.w.Stats())
	if s := r.w.Stats(); s.Requeued != 1 || s.RequeueFailures != 1 || s.Failed != 0 || s.Retried != 0 {
		t.Errorf("stats %+v: want 1 copy sent, 1 not, no failure", s)
	}
}

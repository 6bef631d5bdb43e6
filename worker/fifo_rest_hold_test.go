package worker_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
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

// In a FIFO group received together, a job whose time is an hour ahead,
// behind a job that failed (to retry after 1s), is released with the rest
// of its group, not held back by visibility for the hour: in flight, it
// would lock its group, and the failed job's retry would wait the hour. On
// the fake only: the local SQS hands out one message of a FIFO group at a
// time. Before, the failed job had not run again 20s on.
func TestFIFORestNotHeldBehindFailedJob(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "300"})
	nb := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	for i, b := range []string{"first", "later"} {
		f.Send(url, b, func(in *sqs.SendMessageInput) {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(strconv.Itoa(i))
			if b == "later" {
				in.MessageAttributes = map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(nb)}}
			}
		})
	}
	var firstRuns atomic.Int64
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 2, MaxMessages: 10, DisableDepth: true,
		Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second}},
		sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			if m.Body == "first" {
				if firstRuns.Add(1) == 1 {
					return errors.New("first fails once")
				}
				return nil
			}
			t.Errorf("job %q ran before its time", m.Body)
			return nil
		}))
	defer r.stop(30 * time.Second)
	localtest.Eventually(t, 20*time.Second, func() bool { return firstRuns.Load() >= 2 }, "the failed job did not run again after its 1s backoff: its group is locked by the job behind it")
}

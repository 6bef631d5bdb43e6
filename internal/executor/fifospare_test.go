package executor

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/sqstest"
)

// fifoSim is newSim on a FIFO queue (and dead-letter queue) whose redrive
// policy has maxReceiveCount mrc, with a job in group g that may run in d.
func fifoSim(t *testing.T, mrc int, d time.Duration) (*sim, time.Time) {
	t.Helper()
	s := newSim(t, mrc, nil)
	s.dlq = s.f.CreateQueue("jobs-dlq.fifo", map[string]string{"FifoQueue": "true"})
	s.ex.Mover = &queue.Mover{API: s.api, URL: s.dlq, FIFO: true, Now: s.clock.Now}
	s.url = s.f.CreateQueue("jobs.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.QueueARN("jobs-dlq.fifo"), mrc)})
	s.ex.Requeue = Requeue{API: s.api, URL: s.url, FIFO: true}
	nb := s.clock.Now().Add(d)
	s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
		in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("d1")
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))},
			"idempotency-key":       {DataType: aws.String("String"), StringValue: aws.String("order-42")},
			"traceparent":           {DataType: aws.String("String"), StringValue: aws.String("00-trace-span-01")},
		}
	})
	return s, nb
}

// On a FIFO queue whose maxReceiveCount leaves room for it (3 or more), a
// job waiting for its time keeps a spare receive, as on a standard queue:
// a fresh copy whose send fails once (SQS refusing connections at that
// moment), or a worker that dies holding the message, costs a receive but
// not the job. It runs once, on time, never dead-lettered. Before, the
// copy was sent only on the last receive the policy allows, so that one
// failed send, or one crash, there let SQS move the job to the
// dead-letter queue without it ever running.
func TestHoldFIFOKeepsASpareReceive(t *testing.T) {
	// Waits long enough for the receive count to run out before the time
	// comes.
	for _, tc := range []struct {
		mrc int
		d   time.Duration
	}{{3, 30 * time.Hour}, {4, 50 * time.Hour}} {
		mrc := tc.mrc
		t.Run(fmt.Sprintf("maxReceiveCount=%d/send fails", mrc), func(t *testing.T) {
			s, nb := fifoSim(t, mrc, tc.d)
			s.f.FailNext(sqstest.OpSendMessage, errors.New("connection refused"), 1)
			s.runUntilIdle(tc.d + time.Hour)
			s.checkRanOnce(nb)
			s.checkRequeueFailures(1)
		})
		for crashAt := 1; crashAt <= mrc; crashAt++ {
			t.Run(fmt.Sprintf("maxReceiveCount=%d/crash@receive%d", mrc, crashAt), func(t *testing.T) {
				s, nb := fifoSim(t, mrc, tc.d)
				s.crashAt, s.crashes = crashAt, 1
				s.runUntilIdle(tc.d + time.Hour)
				if s.crashes != 0 {
					t.Fatal("no crash happened")
				}
				s.checkRanOnce(nb)
			})
		}
	}
}

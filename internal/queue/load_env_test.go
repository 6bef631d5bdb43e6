package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// noGetQueueURL is a client whose role may not call GetQueueUrl (AWS's
// managed policy for Lambda's SQS consumers has no sqs:GetQueueUrl).
type noGetQueueURL struct{ *sqs.Client }

func (noGetQueueURL) GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return nil, &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform sqs:GetQueueUrl", Fault: smithy.FaultClient}
}

// A queue whose dead-letter queue's URL cannot be asked for (GetQueueUrl
// refused), on the local SQS: Load derives it from the queue's own URL and
// the redrive policy's ARN, and reads the rest (the maxReceiveCount, the
// retention period). It failed, and the Lambda adapter took every
// attribute of the queue for unknown, on every invocation.
func TestLoadWithoutGetQueueURL(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3, VisibilityTimeout: 7 * time.Second})
	info, err := queue.Load(context.Background(), noGetQueueURL{c}, q.URL)
	if err != nil {
		t.Fatal(err)
	}
	if info.DeadLetterURL != q.DLQURL || info.MaxReceiveCount != 3 || info.VisibilityTimeout != 7*time.Second || info.Retention != 4*24*time.Hour {
		t.Errorf("info %+v; want the dead-letter queue %s, maxReceiveCount 3, 7s, 4 days", info, q.DLQURL)
	}
}

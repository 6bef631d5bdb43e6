package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A job without a key, with nine message attributes of its own, cut short
// at the shutdown deadline on its last receive waits in a copy that carries
// the job's key (its first message's ID), its prior attempts left out for
// it: a duplicate of the copy, or the original should its delete fail,
// runs under the same key, and the idempotency middleware applies the job
// once. Before, the copy kept its prior attempts and went without the key,
// and its own message ID became its key.
func TestShutdownReleaseCopyWithoutRoomKeepsTheKey(t *testing.T) {
	t.Parallel()
	eachQueue(t, "release-key", func(t *testing.T, q relQueue) {
		attrs := map[string]types.MessageAttributeValue{}
		for i := range 9 {
			attrs[fmt.Sprint("own-", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
		}
		var id string
		r := stopAtSecondAttempt(t, q.api, worker.Config{QueueURL: q.url}, false, func() {
			out, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: aws.String("job"),
				MessageAttributes: attrs})
			if err != nil {
				t.Fatal(err)
			}
			id = aws.ToString(out.MessageId)
		}, nil, 60*time.Second)
		if s := r.w.Stats(); s.Released != 1 || s.Requeued != 1 || s.RequeueFailures != 0 {
			t.Fatalf("stats %+v: want 1 release, in a copy", s)
		}
		var copies []types.Message
		localtest.Eventually(t, 90*time.Second, func() bool {
			out, err := q.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.url, MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, VisibilityTimeout: 300, MessageAttributeNames: []string{"All"}})
			if err != nil {
				t.Fatal(err)
			}
			copies = append(copies, out.Messages...)
			return len(copies) > 0
		}, "the copy did not come")
		if n := q.count(q.url) + q.count(q.dlq); len(copies) != 1 || n != 1 {
			t.Fatalf("%d messages received, %d in the queues; want the copy alone", len(copies), n)
		}
		c := sqsmsg.FromSDK(q.url, &copies[0])
		if c.ID == id {
			t.Fatal("the original is still in the queue")
		}
		if got, want := idempotency.DefaultKey(c), "message-id:"+id; got != want {
			t.Errorf("the copy's key is %q, want the job's %q", got, want)
		}
	})
}

package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// ownAttributes returns n message attributes of a job's own.
func ownAttributes(n int) map[string]types.MessageAttributeValue {
	attrs := map[string]types.MessageAttributeValue{}
	for i := range n {
		attrs[fmt.Sprint("own-", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	return attrs
}

// A job that fails for good, with a backoff above 12 hours (a day), and
// whose waiting copy has no room for its prior attempts (nine attributes
// of its own, or a body near SQS's size limit), is still dead-lettered
// after its third attempt (maxReceiveCount 3): its copy is not sent without
// the attempts made, and it waits by its visibility, whose receives count.
// Before, the copy went without them, each copy ran as attempt 1 again,
// and the job failed once a day for ever, never dead-lettered.
func TestLongBackoffCopyWithoutRoomKeepsCountingAttempts(t *testing.T) {
	for name, opt := range map[string]func(in *sqs.SendMessageInput){
		"nine-attributes": func(in *sqs.SendMessageInput) { in.MessageAttributes = ownAttributes(9) },
		"size-limit": func(in *sqs.SendMessageInput) {
			// Room for the time, not for the prior attempts too.
			in.MessageBody = aws.String(strings.Repeat("x", sqsworker.MaxMessageSize-
				sqsworker.MessageSize("", map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: sqsworker.NotBeforeAttribute(time.Now())})-2))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSim(t, 3, func(*sqsworker.Message) error {
				return sqsworker.RetryAfter(24*time.Hour, errors.New("webhook endpoint down"))
			})
			s.f.Send(s.url, "job", opt)
			s.runUntil(6 * 24 * time.Hour)
			attempts := make([]int, len(s.runs))
			for i, r := range s.runs {
				attempts[i] = r.attempt
			}
			if len(s.runs) != 3 || attempts[2] != 3 {
				t.Errorf("attempts %v in 6 days, want 1, 2, 3, then the job dead-lettered", attempts)
			}
			if v, _, _ := s.f.Depth(s.dlq); v != 1 {
				t.Errorf("%d dead-lettered, want the job", v)
			}
			if v, fl, d := s.f.Depth(s.url); v+fl+d != 0 {
				t.Errorf("%d messages left in the queue, want none", v+fl+d)
			}
		})
	}
}

// A job without a key whose waiting copy, released on its last receive, has
// room for one attribute more than its own nine, gives that room to the
// job's key (jobkey.Default of the original), not to its prior attempts:
// should the copy's send lose its reply, or the original's delete fail,
// the copy and the original (dead-lettered by SQS, then replayed) share
// the key, and the idempotency middleware applies the job once. Before,
// the copy kept its prior attempts and went without the key: its own
// message ID became its key, and the job's effect could be applied twice.
func TestReleaseCopyWithoutRoomKeepsTheKey(t *testing.T) {
	s := newSim(t, 2, nil)
	id := s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) { in.MessageAttributes = ownAttributes(9) })
	s.Retry(s.receiveOne(), 0) // as a first attempt that failed
	s.api.loseNext = 1         // the copy's reply is lost: the original stays
	s.ex.Release(s.receiveOne(), limiting{sim: s, least: 30 * time.Second})
	if n := s.ex.Counters.Requeued.Load() + s.ex.Counters.RequeueFailures.Load(); n != 1 {
		t.Fatalf("%d copies tried, want 1", n)
	}
	s.clock.Advance(31 * time.Second)
	// The original, on its third receive, is moved by SQS; the copy comes.
	out, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.url, MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %d messages, %v; want the copy", len(out.Messages), err)
	}
	want := jobkey.OfID(id)
	if got, ok := out.Messages[0].MessageAttributes[jobkey.Attribute]; !ok || aws.ToString(got.StringValue) != want {
		t.Errorf("the copy's key attribute is %v (present %v), want %q: the copy's key is its own message ID, not the job's",
			aws.ToString(got.StringValue), ok, want)
	}
	dead, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.dlq, MessageAttributeNames: []string{"All"}})
	if err != nil || len(dead.Messages) != 1 {
		t.Fatalf("dead-letter queue: %d messages, %v; want the original", len(dead.Messages), err)
	}
	if got := jobkey.Default(sqsmsg.FromSDK(s.dlq, &dead.Messages[0])); got != want {
		t.Errorf("dead-lettered original's key %q, want %q", got, want)
	}
}

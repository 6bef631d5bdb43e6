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
// should the copy's send lose its reply, the send is tried again, and the
// two copies share the key, so that the idempotency middleware applies the
// job once (as would the original, should its delete fail, dead-lettered
// by SQS, then replayed). Before, the copy kept its prior attempts and went
// without the key: its own message ID became its key, and the job's effect
// could be applied twice.
func TestReleaseCopyWithoutRoomKeepsTheKey(t *testing.T) {
	s := newSim(t, 2, nil)
	id := s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) { in.MessageAttributes = ownAttributes(9) })
	s.Retry(s.receiveOne(), 0) // as a first attempt that failed
	s.api.loseNext = 1         // the copy's reply is lost: it is sent again
	s.ex.Release(s.receiveOne(), limiting{sim: s, least: 30 * time.Second})
	if n, f := s.ex.Counters.Requeued.Load(), s.ex.Counters.RequeueFailures.Load(); n != 1 || f != 0 {
		t.Fatalf("%d copies sent, %d given up; want the copy sent", n, f)
	}
	s.clock.Advance(31 * time.Second)
	// The original deleted; the copy, twice, comes.
	out, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.url, MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("receive: %d messages, %v; want the copy, twice", len(out.Messages), err)
	}
	want := jobkey.OfID(id)
	for _, m := range out.Messages {
		if m.MessageId != nil && *m.MessageId == id {
			t.Fatal("the original is still in the queue")
		}
		if got, ok := m.MessageAttributes[jobkey.Attribute]; !ok || aws.ToString(got.StringValue) != want {
			t.Errorf("a copy's key attribute is %v (present %v), want %q: the copy's key is its own message ID, not the job's",
				aws.ToString(got.StringValue), ok, want)
		}
	}
	if v, fl, d := s.f.Depth(s.dlq); v+fl+d != 0 {
		t.Errorf("%d messages dead-lettered, want none", v+fl+d)
	}
}

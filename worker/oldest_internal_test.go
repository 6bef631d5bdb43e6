package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
)

// The age the starvation guard reads is that of messages on their first
// receive that are not the runtime's waiting copies: a retry, a job held
// for its time, a copy released on its last receive are as old as the
// wait the runtime chose. Before, a trickle of them kept a queue starved.
func TestOldestCountsOnlyMessagesThatWaitedForASlot(t *testing.T) {
	now := time.Now()
	msg := func(age time.Duration, receives int, attr string) types.Message {
		m := types.Message{Attributes: map[string]string{
			sqsworker.AttrSentTimestamp: strconv.FormatInt(now.Add(-age).UnixMilli(), 10),
			sqsworker.AttrReceiveCount:  strconv.Itoa(receives),
		}}
		if attr != "" {
			m.MessageAttributes = map[string]types.MessageAttributeValue{attr: {DataType: aws.String("String"), StringValue: aws.String("1")}}
		}
		return m
	}
	retry := msg(time.Hour, 3, "")
	held := msg(time.Hour, 1, sqsworker.AttrNotBefore)
	released := msg(time.Hour, 1, sqsworker.AttrPriorAttempts)
	packed := msg(time.Hour, 1, sqsworker.AttrPackedAttributes)
	fresh := msg(2*time.Second, 1, "")
	if age := oldest([]types.Message{retry, held, released, packed, fresh}); age < 2*time.Second || age > time.Minute {
		t.Errorf("oldest = %s, want about 2s: the fresh message's, not the retry's nor the copies' hour", age)
	}
	if age := oldest([]types.Message{retry, held}); age != 0 {
		t.Errorf("oldest of a retry and a held copy = %s, want 0", age)
	}
	if age := oldest([]types.Message{msg(time.Hour, 1, "")}); age < time.Hour {
		t.Errorf("oldest of a message that waited an hour = %s", age)
	}
}

package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A key given by Config.Attributes stays on a message whose other hook
// attributes do not fit, on the local SQS: eight attributes of its own, a
// hook adding the key and two trace attributes (eleven in all). The
// message was sent with none of the hook's attributes and no key at all,
// generated or not: a send retried after a lost answer ran its job twice.
func TestHookKeyStaysWhenTheHookDoesNotFit(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	hook := map[string]sqsworker.MessageAttribute{
		producer.IdempotencyKeyAttribute: {DataType: "String", StringValue: "from-hook"},
		"traceparent":                    {DataType: "String", StringValue: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		"tracestate":                     {DataType: "String", StringValue: "k=v"},
	}
	p, err := producer.New(c, producer.Config{QueueURL: q.URL, Attributes: func(context.Context) map[string]sqsworker.MessageAttribute { return hook }})
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]sqsworker.MessageAttribute{}
	for i := range 8 {
		own[fmt.Sprintf("a%d", i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	if _, err := p.Send(context.Background(), producer.Message{Body: "job", Attributes: own}); err != nil {
		t.Fatal(err)
	}
	got := receiveN(t, c, q.URL, 1)
	attrs := got[0].MessageAttributes
	if k := aws.ToString(attrs[producer.IdempotencyKeyAttribute].StringValue); k != "from-hook" {
		t.Errorf("sent with the key %q, want the hook's (%d attributes: %v)", k, len(attrs), attrs)
	}
	if _, ok := attrs["traceparent"]; ok {
		t.Errorf("sent with the trace attributes, which do not fit: %v", attrs)
	}
	if s := p.Stats(); s.ContextAttributesLeftOut != 1 || s.GeneratedKeysLeftOut != 0 {
		t.Errorf("stats %+v, want one message without the context's attributes, no key left out", s)
	}
}

// A binary idempotency-key attribute is sized as SQS gets it, its binary
// value alone (the idempotency middleware reads "binary:" and its hex):
// a stray StringValue beside it, which is not sent, made a key of 600
// bytes (1,207 as read) look short; sent, the job failed as Permanent on
// its first receive.
func TestBinaryKeySizedAsSent(t *testing.T) {
	t.Parallel()
	m := producer.Message{Body: "job", Attributes: map[string]sqsworker.MessageAttribute{
		producer.IdempotencyKeyAttribute: {DataType: "Binary", BinaryValue: make([]byte, 600), StringValue: "short"},
	}}
	if err := producer.Validate(m, false); err == nil || !strings.Contains(err.Error(), "the idempotency key is 1207 bytes") {
		t.Errorf("Validate = %v, want the key's size as read refused", err)
	}
}

// strayIDs answers SendMessageBatch with the entries of the call listed
// under IDs shifted out of its range (a proxy's mistake), and the real
// entries not listed.
type strayIDs struct{ *sqstest.Fake }

func (s strayIDs) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := s.Fake.SendMessageBatch(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	for i := range out.Successful {
		out.Successful[i].Id = aws.String(fmt.Sprint(100 + i))
	}
	out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: aws.String("-1"), Code: aws.String("InternalError")})
	return out, nil
}

// An answer naming entries the call did not have is not taken for those
// entries, nor does it panic: they indexed the call's results, out of
// their range. The call's own entries, not named, fail.
func TestBatchAnswerWithStrayIDs(t *testing.T) {
	t.Parallel()
	f := strayIDs{sqstest.NewFake()}
	url := f.CreateQueue("jobs", nil)
	p, err := producer.New(f, producer.Config{QueueURL: url, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.SendBatch(context.Background(), []producer.Message{{Body: "a"}, {Body: "b"}})
	if err == nil || len(res) != 2 || res[0].Err == nil || res[1].Err == nil {
		t.Fatalf("results %+v, err %v: want both failed, with no result for their entries", res, err)
	}
}

// failFirstTwo fails the first call's two entries: the first for good (a
// sender fault), the second for a while (InternalError). It counts calls.
type failFirstTwo struct {
	*sqstest.Fake
	calls int
}

func (f *failFirstTwo) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.calls++
	if f.calls > 1 {
		return f.Fake.SendMessageBatch(ctx, in, opts...)
	}
	return &sqs.SendMessageBatchOutput{Failed: []types.BatchResultErrorEntry{
		{Id: in.Entries[0].Id, Code: aws.String("InvalidParameterValue"), SenderFault: true},
		{Id: in.Entries[1].Id, Code: aws.String("InternalError")},
	}}, nil
}

// On a FIFO queue, a message whose call failed after a later message of
// its group was refused before any call (invalid) is not sent again once
// an earlier message of the group failed for good: the earliest failure of
// the group counts, whatever the order they are seen in. The later
// invalid message's index was kept, and the second message was retried
// and stored behind the first, which was not.
func TestFIFOEarliestFailureCounts(t *testing.T) {
	t.Parallel()
	f := &failFirstTwo{Fake: sqstest.NewFake()}
	url := f.CreateQueue("jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	p, err := producer.New(f, producer.Config{QueueURL: url})
	if err != nil {
		t.Fatal(err)
	}
	res, _ := p.SendBatch(context.Background(), []producer.Message{
		{Body: "first", GroupID: "g"},
		{Body: "second", GroupID: "g"},
		{Body: "third", GroupID: "g", Attributes: map[string]sqsworker.MessageAttribute{"bad name": {DataType: "String", StringValue: "v"}}},
	})
	if f.calls != 1 {
		t.Errorf("%d calls, want 1: the second message was sent again behind the first, which failed", f.calls)
	}
	if len(res) != 3 || !errors.Is(res[1].Err, producer.ErrEarlierMessageNotSent) {
		t.Errorf("results %+v, want the second not sent for the first", res)
	}
}

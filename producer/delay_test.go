package producer_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
)

// sendCapture records the SendMessage and SendMessageBatch inputs.
type sendCapture struct {
	producer.API
	single []*sqs.SendMessageInput
	batch  []*sqs.SendMessageBatchInput
}

func (c *sendCapture) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.single = append(c.single, in)
	return c.API.SendMessage(ctx, in, o...)
}

func (c *sendCapture) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	c.batch = append(c.batch, in)
	return c.API.SendMessageBatch(ctx, in, o...)
}

func notBeforeOf(t *testing.T, attrs map[string]string) (time.Time, bool) {
	t.Helper()
	v, ok := attrs[sqsworker.AttrNotBefore]
	if !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s = %q: %v", sqsworker.AttrNotBefore, v, err)
	}
	return time.UnixMilli(ms), true
}

// A delay up to 15 minutes is SQS's own; a longer one is sent with 15
// minutes and the time the job may run in sqsworker.not-before, by Send,
// SendAt, SendAfter and SendBatch alike.
func TestSendLongDelay(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	c := &sendCapture{API: f}
	p := newProducer(t, c, url)
	ctx := context.Background()
	check := func(name string, before time.Time, in *sqs.SendMessageInput, want time.Duration) {
		t.Helper()
		after := time.Now()
		got := map[string]string{}
		for k, v := range in.MessageAttributes {
			got[k] = aws.ToString(v.StringValue)
		}
		nb, has := notBeforeOf(t, got)
		switch {
		case want <= producer.MaxDelay:
			if has {
				t.Errorf("%s: a delay of %s carries %s", name, want, sqsworker.AttrNotBefore)
			}
			if in.DelaySeconds != int32((want+time.Second-1)/time.Second) {
				t.Errorf("%s: DelaySeconds %d for a delay of %s", name, in.DelaySeconds, want)
			}
		default:
			if !has {
				t.Fatalf("%s: a delay of %s has no %s", name, want, sqsworker.AttrNotBefore)
			}
			if in.DelaySeconds != 900 {
				t.Errorf("%s: DelaySeconds %d, want 900", name, in.DelaySeconds)
			}
			lo, hi := before.Add(want).Truncate(time.Millisecond), after.Add(want).Add(time.Millisecond)
			if nb.Before(lo) || nb.After(hi) {
				t.Errorf("%s: not-before %s, want within [%s, %s]", name, nb, lo, hi)
			}
		}
	}
	for _, d := range []time.Duration{0, 30 * time.Second, 15 * time.Minute, 40 * time.Minute, 30 * time.Hour, 365 * 24 * time.Hour} {
		before := time.Now()
		if _, err := p.Send(ctx, producer.Message{Body: "x", Delay: d}); err != nil {
			t.Fatalf("Send with Delay %s: %v", d, err)
		}
		check("Send "+d.String(), before, c.single[len(c.single)-1], d)
		before = time.Now()
		if _, err := p.SendAfter(ctx, d, producer.Message{Body: "x"}); err != nil {
			t.Fatalf("SendAfter %s: %v", d, err)
		}
		check("SendAfter "+d.String(), before, c.single[len(c.single)-1], d)
	}
	// SendAt: a time past runs at once, a near one is rounded up to whole
	// seconds, a far one carries the time itself.
	now := time.Now()
	for _, tc := range []struct {
		at        time.Time
		delay     int32
		notBefore bool
	}{
		{now.Add(-time.Hour), 0, false},
		{now.Add(10*time.Minute + 300*time.Millisecond), 601, false},
		{now.Add(30 * time.Hour), 900, true},
	} {
		if _, err := p.SendAt(ctx, tc.at, producer.Message{Body: "x"}); err != nil {
			t.Fatalf("SendAt %s: %v", tc.at, err)
		}
		in := c.single[len(c.single)-1]
		got := map[string]string{}
		for k, v := range in.MessageAttributes {
			got[k] = aws.ToString(v.StringValue)
		}
		nb, has := notBeforeOf(t, got)
		if in.DelaySeconds != tc.delay && !(tc.delay == 601 && in.DelaySeconds == 600) {
			t.Errorf("SendAt %s: DelaySeconds %d, want %d", time.Until(tc.at), in.DelaySeconds, tc.delay)
		}
		if has != tc.notBefore || (has && !nb.Equal(tc.at.Truncate(time.Millisecond).Add(time.Millisecond)) && !nb.Equal(tc.at.Truncate(time.Millisecond))) {
			t.Errorf("SendAt %s: not-before %v (%v)", tc.at, nb, has)
		}
	}
	// SendBatch: the same in batches.
	before := time.Now()
	res, err := p.SendBatch(ctx, []producer.Message{{Body: "a", Delay: 40 * time.Minute}, {Body: "b", Delay: time.Minute}})
	if err != nil {
		t.Fatalf("SendBatch: %v (%+v)", err, res)
	}
	e := c.batch[len(c.batch)-1].Entries
	check("SendBatch 40m", before, &sqs.SendMessageInput{DelaySeconds: e[0].DelaySeconds, MessageAttributes: e[0].MessageAttributes}, 40*time.Minute)
	check("SendBatch 1m", before, &sqs.SendMessageInput{DelaySeconds: e[1].DelaySeconds, MessageAttributes: e[1].MessageAttributes}, time.Minute)
}

// A delay over 15 minutes takes one of SQS's ten attributes, and nonsense
// delays are refused with the fix named.
func TestValidateLongDelay(t *testing.T) {
	nine := map[string]sqsworker.MessageAttribute{}
	for i := range 9 {
		nine["a"+strconv.Itoa(i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	for _, tc := range []struct {
		name string
		m    producer.Message
		fifo bool
		want string // "" for valid
	}{
		{"nine attributes and 16m", producer.Message{Body: "x", Attributes: nine, Delay: 16 * time.Minute}, false, ""},
		{"nine attributes, a key and 15m", producer.Message{Body: "x", Attributes: nine, IdempotencyKey: "k", Delay: 15 * time.Minute}, false, ""},
		{"nine attributes, a key and 16m", producer.Message{Body: "x", Attributes: nine, IdempotencyKey: "k", Delay: 16 * time.Minute}, false,
			"11 message attributes, over SQS's limit of 10: a delay over 15m takes one (sqsworker.not-before)"},
		{"nine attributes, a key and NotBefore in 2h", producer.Message{Body: "x", Attributes: nine, IdempotencyKey: "k", NotBefore: time.Now().Add(2 * time.Hour)}, false,
			"a delay over 15m takes one"},
		{"fractional long delay", producer.Message{Body: "x", Delay: 40*time.Minute + time.Millisecond}, false, ""},
		{"negative", producer.Message{Body: "x", Delay: -time.Minute}, false, "delay -1m0s is negative: use 0 to run the job at once"},
		{"over 365 days", producer.Message{Body: "x", Delay: 366 * 24 * time.Hour}, false, "over the longest delay of 365 days (sqsworker.MaxDelay)"},
		{"NotBefore over 365 days", producer.Message{Body: "x", NotBefore: time.Now().Add(400 * 24 * time.Hour)}, false, "more than 365 days ahead"},
		{"both", producer.Message{Body: "x", Delay: time.Hour, NotBefore: time.Now().Add(time.Hour)}, false, "both Delay and NotBefore are set: set one of them"},
		{"FIFO NotBefore", producer.Message{Body: "x", GroupID: "g", NotBefore: time.Now().Add(time.Hour)}, true, "FIFO queues take no per-message delay"},
		{"not-before by hand", producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: {DataType: "Number", StringValue: "1"}}}, false,
			"sqsworker. namespace"},
	} {
		err := producer.Validate(tc.m, tc.fifo)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
	// Send checks the same.
	f := sqstest.NewFake()
	p := newProducer(t, f, f.CreateQueue("jobs", nil))
	if _, err := p.SendAfter(context.Background(), 16*time.Minute, producer.Message{Body: "x", Attributes: nine, IdempotencyKey: "k"}); err == nil || !strings.Contains(err.Error(), "not-before") {
		t.Errorf("SendAfter with 11 attributes: %v", err)
	}
}

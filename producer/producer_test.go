package producer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

func newProducer(t *testing.T, api producer.API, url string) *producer.Producer {
	t.Helper()
	p, err := producer.New(api, producer.Config{QueueURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// receiveN receives from a queue, without deleting, until it has at least n
// messages, or fails the test. It receives through copying(c).
func receiveN(t *testing.T, c *sqs.Client, url string, n int) []types.Message {
	t.Helper()
	rc := copying(c)
	var got []types.Message
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			t.Fatalf("received %d of %d messages from %s", len(got), n, url)
		}
		got = append(got, localtest.ReceiveAll(t, rc, url, time.Second, 60*time.Second)...)
	}
	return got
}

// copying returns c with its request bodies sent from copies, as the
// runtimes' clients send them (package sdkhttp). A plain client's receive of
// large messages can have its reply cut when the machine is loaded ("use of
// closed network connection" while reading it): the SDK receives again, and
// the messages the emulator handed out on the cut reply stay hidden for
// receiveN's visibility timeout of 60 s. TestSendBatchSplitsBySize, whose
// receive brings 1.2 MB, took 61 s so, 3 runs in 8 on a busy machine.
func copying(c *sqs.Client) *sqs.Client {
	return sqs.New(c.Options(), func(o *sqs.Options) { o.HTTPClient = sdkhttp.Wrap(o.HTTPClient) })
}

// A message sent with an idempotency key, attributes of each type and a
// delay arrives with all of them, and not before its delay.
func TestSendArrivesIntact(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	p := newProducer(t, c, q.URL)
	const delay = 2 * time.Second
	body := `{"order":42,"note":"ünïcode ✓ and\nnewlines"}`
	id, err := p.Send(context.Background(), producer.Message{
		Body:           body,
		IdempotencyKey: "order-42",
		Delay:          delay,
		Attributes: map[string]sqsworker.MessageAttribute{
			"tenant":      {DataType: "String", StringValue: "acme"},
			"priority":    {DataType: "Number", StringValue: "3"},
			"blob":        {DataType: "Binary", BinaryValue: []byte{0, 1, 2, 255}},
			"kind.custom": {DataType: "String.json", StringValue: `{"a":1}`},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if id == "" {
		t.Fatal("Send returned an empty message ID")
	}
	msgs := receiveN(t, c, q.URL, 1)
	if len(msgs) != 1 {
		t.Fatalf("received %d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if got := aws.ToString(m.MessageId); got != id {
		t.Errorf("message ID %q, Send returned %q", got, id)
	}
	if got := aws.ToString(m.Body); got != body {
		t.Errorf("body %q, want %q", got, body)
	}
	want := map[string]types.MessageAttributeValue{
		"idempotency-key": {DataType: aws.String("String"), StringValue: aws.String("order-42")},
		"tenant":          {DataType: aws.String("String"), StringValue: aws.String("acme")},
		"priority":        {DataType: aws.String("Number"), StringValue: aws.String("3")},
		"blob":            {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 255}},
		"kind.custom":     {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
	}
	if len(m.MessageAttributes) != len(want) {
		t.Errorf("got %d attributes, want %d: %v", len(m.MessageAttributes), len(want), m.MessageAttributes)
	}
	for name, w := range want {
		g, ok := m.MessageAttributes[name]
		switch {
		case !ok:
			t.Errorf("attribute %q missing", name)
		case aws.ToString(g.DataType) != aws.ToString(w.DataType) || aws.ToString(g.StringValue) != aws.ToString(w.StringValue) || string(g.BinaryValue) != string(w.BinaryValue):
			t.Errorf("attribute %q = %s %q %v, want %s %q %v", name,
				aws.ToString(g.DataType), aws.ToString(g.StringValue), g.BinaryValue,
				aws.ToString(w.DataType), aws.ToString(w.StringValue), w.BinaryValue)
		}
	}
	// The delay is a lower bound: the message never arrives before it.
	sent, _ := strconv.ParseInt(m.Attributes["SentTimestamp"], 10, 64)
	first, _ := strconv.ParseInt(m.Attributes["ApproximateFirstReceiveTimestamp"], 10, 64)
	if sent == 0 || first == 0 {
		t.Errorf("no timestamps: %v", m.Attributes)
	} else if waited := time.Duration(first-sent) * time.Millisecond; waited < delay-500*time.Millisecond {
		t.Errorf("first received %s after it was sent, before its delay of %s", waited, delay)
	}
}

// Send refuses an invalid message without calling SQS.
func TestSendInvalidMakesNoCall(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p := newProducer(t, f, url)
	_, err := p.Send(context.Background(), producer.Message{Body: ""})
	if err == nil || !strings.Contains(err.Error(), "the body is empty") {
		t.Errorf("err = %v, want one naming the empty body", err)
	}
	if n := f.Calls(sqstest.OpSendMessage); n != 0 {
		t.Errorf("%d SendMessage calls, want 0", n)
	}
}

// A batch of 25 messages takes three calls, and every message arrives.
func TestSendBatchOf25(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingSQS(t, &counter)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	p := newProducer(t, c, q.URL)
	msgs := make([]producer.Message, 25)
	var bodies []string
	for i := range msgs {
		msgs[i].Body = fmt.Sprintf("job-%02d", i)
		bodies = append(bodies, msgs[i].Body)
	}
	counter.Reset()
	res, err := p.SendBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.Get("SendMessageBatch"); n != 3 {
		t.Errorf("%d SendMessageBatch calls, want 3 (calls: %v)", n, counter.ByOperation())
	}
	if len(res) != len(msgs) {
		t.Fatalf("%d results for %d messages", len(res), len(msgs))
	}
	ids := map[string]string{} // message ID -> body
	for i, r := range res {
		if r.Err != nil || r.MessageID == "" {
			t.Errorf("result %d = %+v", i, r)
		}
		ids[r.MessageID] = msgs[i].Body
	}
	got := receiveN(t, c, q.URL, 25)
	var gotBodies []string
	for _, m := range got {
		gotBodies = append(gotBodies, aws.ToString(m.Body))
		if ids[aws.ToString(m.MessageId)] != aws.ToString(m.Body) {
			t.Errorf("message %s has body %q; SendBatch reported it for %q", aws.ToString(m.MessageId), aws.ToString(m.Body), ids[aws.ToString(m.MessageId)])
		}
	}
	slices.Sort(gotBodies)
	if !slices.Equal(gotBodies, bodies) {
		t.Errorf("received %v, want %v", gotBodies, bodies)
	}
}

// Batches are split by size: three messages of 400 KiB do not fit in one
// call of 1 MiB.
func TestSendBatchSplitsBySize(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingSQS(t, &counter)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	p := newProducer(t, c, q.URL)
	msgs := make([]producer.Message, 3)
	for i := range msgs {
		msgs[i].Body = strings.Repeat(strconv.Itoa(i), 400<<10)
	}
	counter.Reset()
	res, err := p.SendBatch(context.Background(), msgs)
	if err != nil {
		t.Fatal(err)
	}
	if n := counter.Get("SendMessageBatch"); n < 2 {
		t.Errorf("%d SendMessageBatch calls, want at least 2", n)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("message %d: %v", i, r.Err)
		}
	}
	got := receiveN(t, c, q.URL, 3)
	seen := map[string]bool{}
	for _, m := range got {
		b := aws.ToString(m.Body)
		if len(b) != 400<<10 || strings.Trim(b, b[:1]) != "" {
			t.Errorf("received a body of %d bytes, not one sent", len(b))
			continue
		}
		seen[b[:1]] = true
	}
	if len(seen) != 3 {
		t.Errorf("received bodies %v, want 0, 1 and 2", seen)
	}
}

// Entries SQS failed on its side are sent again; the caller sees them
// succeed.
func TestSendBatchRetriesServerFailures(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p := newProducer(t, f, url)
	f.FailEntries(sqstest.OpSendMessageBatch, "InternalError", false, 3)
	msgs := make([]producer.Message, 5)
	for i := range msgs {
		msgs[i].Body = fmt.Sprintf("m%d", i)
	}
	res, err := p.SendBatch(context.Background(), msgs)
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for i, r := range res {
		if r.Err != nil || r.MessageID == "" {
			t.Errorf("result %d = %+v", i, r)
		}
	}
	if n := f.Calls(sqstest.OpSendMessageBatch); n != 2 {
		t.Errorf("%d SendMessageBatch calls, want 2 (one, then one for the three failed entries)", n)
	}
	if v, _, _ := f.Depth(url); v != 5 {
		t.Errorf("%d messages in the queue, want 5", v)
	}
}

// Each message's Result says what happened to it: entries SQS refused as
// the sender's fault are not retried, invalid messages are not sent, and
// the rest are.
func TestSendBatchReportsEachMessage(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p := newProducer(t, f, url)
	f.FailEntries(sqstest.OpSendMessageBatch, "InvalidParameterValue", true, 1)
	msgs := []producer.Message{
		{Body: "refused by SQS"},
		{Body: ""}, // invalid
		{Body: "fine"},
		{Body: "too late", Delay: 400 * 24 * time.Hour}, // invalid
		{Body: "also fine"},
	}
	res, err := p.SendBatch(context.Background(), msgs)
	if err == nil {
		t.Fatal("SendBatch returned no error")
	}
	for _, want := range []string{"message 0:", "InvalidParameterValue", "message 1:", "the body is empty", "message 3:", "delay 9600h0m0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	for _, not := range []string{"message 2:", "message 4:"} {
		if strings.Contains(err.Error(), not) {
			t.Errorf("error %q mentions %q, which was sent", err, not)
		}
	}
	for i, r := range res {
		failed := i == 0 || i == 1 || i == 3
		if failed != (r.Err != nil) || failed != (r.MessageID == "") {
			t.Errorf("result %d = %+v, want failed=%v", i, r, failed)
		}
	}
	if n := f.Calls(sqstest.OpSendMessageBatch); n != 1 {
		t.Errorf("%d SendMessageBatch calls, want 1: a sender fault is not retried", n)
	}
	if v, _, _ := f.Depth(url); v != 2 {
		t.Errorf("%d messages in the queue, want 2", v)
	}
}

// Server-side failures are retried MaxAttempts times, then reported.
func TestSendBatchGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p, err := producer.New(f, producer.Config{QueueURL: url, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	f.FailEntries(sqstest.OpSendMessageBatch, "InternalError", false, 100)
	res, err := p.SendBatch(context.Background(), []producer.Message{{Body: "a"}, {Body: "b"}})
	if err == nil || !strings.Contains(err.Error(), "InternalError") {
		t.Errorf("err = %v, want one naming InternalError", err)
	}
	for i, r := range res {
		var ee *producer.EntryError
		if !errors.As(r.Err, &ee) || ee.SenderFault || ee.Code != "InternalError" || ee.Index != i {
			t.Errorf("result %d: %v, want an *EntryError of SQS's side", i, r.Err)
		}
		if !strings.HasPrefix(r.GeneratedKey, "auto:") {
			t.Errorf("result %d: generated key %q, want the key it was sent with, to send it again as the same job", i, r.GeneratedKey)
		}
	}
	if n := f.Calls(sqstest.OpSendMessageBatch); n != 3 {
		t.Errorf("%d SendMessageBatch calls, want 3", n)
	}
}

// A failed call fails each of its messages, not the other batches.
func TestSendBatchCallFailure(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p := newProducer(t, f, url)
	f.FailNext(sqstest.OpSendMessageBatch, &smithy.GenericAPIError{Code: "AccessDenied", Message: "no"}, 1)
	msgs := make([]producer.Message, 12)
	for i := range msgs {
		msgs[i].Body = fmt.Sprintf("m%d", i)
	}
	res, err := p.SendBatch(context.Background(), msgs)
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
		t.Errorf("err = %v, want the AccessDenied API error", err)
	}
	for i, r := range res {
		if failed := i < 10; failed != (r.Err != nil) {
			t.Errorf("result %d = %+v, want failed=%v", i, r, failed)
		}
	}
	if v, _, _ := f.Depth(url); v != 2 {
		t.Errorf("%d messages in the queue, want the 2 of the second batch", v)
	}
}

// FIFO messages carry their group and deduplication IDs.
func TestSendBatchFIFO(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true})
	p := newProducer(t, c, q.URL)
	msgs := []producer.Message{
		{Body: "first", GroupID: "g1", DeduplicationID: "d1"},
		{Body: "second", GroupID: "g1", DeduplicationID: "d2"},
		{Body: "first again", GroupID: "g1", DeduplicationID: "d1"}, // deduplicated
	}
	if _, err := p.SendBatch(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	// A FIFO group's next message comes once the one before is deleted.
	var got []types.Message
	for len(got) < 2 {
		for _, m := range receiveN(t, c, q.URL, 1) {
			got = append(got, m)
			if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if extra := localtest.ReceiveAll(t, copying(c), q.URL, 2*time.Second, 60*time.Second); len(extra) > 0 {
		t.Errorf("received %d more messages; the duplicate was not deduplicated", len(extra))
	}
	var bodies []string
	for _, m := range got {
		bodies = append(bodies, aws.ToString(m.Body))
		if g := m.Attributes["MessageGroupId"]; g != "g1" {
			t.Errorf("message %q in group %q", aws.ToString(m.Body), g)
		}
	}
	if !slices.Equal(bodies, []string{"first", "second"}) {
		t.Errorf("received %q, want first and second, in order", bodies)
	}
}

func TestNewInvalidConfig(t *testing.T) {
	_, err := producer.New(nil, producer.Config{MaxAttempts: -1})
	for _, want := range []string{"nil SQS client", "QueueURL is required", "MaxAttempts -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want one naming %q", err, want)
		}
	}
}

func attrs(n int) map[string]sqsworker.MessageAttribute {
	m := map[string]sqsworker.MessageAttribute{}
	for i := range n {
		m[fmt.Sprintf("a%d", i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	return m
}

func TestValidate(t *testing.T) {
	str := func(v string) sqsworker.MessageAttribute {
		return sqsworker.MessageAttribute{DataType: "String", StringValue: v}
	}
	tests := []struct {
		name string
		m    producer.Message
		fifo bool
		want []string // substrings of the error; none for a valid message
	}{
		{name: "valid", m: producer.Message{Body: "x", IdempotencyKey: "k", Delay: 15 * time.Minute, Attributes: attrs(9)}},
		{name: "valid FIFO", m: producer.Message{Body: "x", GroupID: "g", DeduplicationID: "d"}, fifo: true},
		{name: "valid 1 MiB", m: producer.Message{Body: strings.Repeat("x", producer.MaxMessageSize)}},
		{name: "empty body", m: producer.Message{}, want: []string{"the body is empty"}},
		{name: "over 1 MiB", m: producer.Message{Body: strings.Repeat("x", producer.MaxMessageSize+1)},
			want: []string{"1048577 bytes, over SQS's limit of 1048576"}},
		{name: "over 1 MiB with attributes", m: producer.Message{Body: strings.Repeat("x", producer.MaxMessageSize-10), Attributes: map[string]sqsworker.MessageAttribute{"name": str("value")}},
			want: []string{"over SQS's limit"}},
		{name: "invalid character", m: producer.Message{Body: "a\x00b"}, want: []string{"character SQS does not allow at byte 1"}},
		{name: "11 attributes", m: producer.Message{Body: "x", Attributes: attrs(11)}, want: []string{"11 message attributes, over SQS's limit of 10"}},
		{name: "10 attributes and a key", m: producer.Message{Body: "x", Attributes: attrs(10), IdempotencyKey: "k"}, want: []string{"11 message attributes"}},
		{name: "key twice", m: producer.Message{Body: "x", IdempotencyKey: "k", Attributes: map[string]sqsworker.MessageAttribute{"idempotency-key": str("k")}},
			want: []string{`"idempotency-key" is set both`}},
		{name: "bad name characters", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"a b": str("v")}},
			want: []string{`attribute name "a b" has characters`}},
		{name: "reserved prefix", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"AWS.thing": str("v")}},
			want: []string{`"AWS.thing" uses a prefix reserved`}},
		{name: "sqsworker namespace", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"sqsworker.source-queue": str("https://sqs.us-east-1.amazonaws.com/1/billing")}},
			want: []string{`"sqsworker.source-queue" is in the sqsworker. namespace`}},
		{name: "periods", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"a..b": str("v")}},
			want: []string{`"a..b" starts or ends with a period`}},
		{name: "long name", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{strings.Repeat("n", 257): str("v")}},
			want: []string{"is not 1 to 256 characters"}},
		{name: "empty value", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"e": str("")}},
			want: []string{`attribute "e" has an empty value`}},
		{name: "empty binary", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"b": {DataType: "Binary"}}},
			want: []string{`attribute "b" has an empty value`}},
		{name: "number not a number", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"n": {DataType: "Number", StringValue: "three"}}},
			want: []string{`attribute "n" of type Number has the value "three"`}},
		{name: "unknown type", m: producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"t": {DataType: "Text", StringValue: "v"}}},
			want: []string{`attribute "t" has the data type "Text"`}},
		{name: "FIFO without group", m: producer.Message{Body: "x"}, fifo: true, want: []string{"a FIFO queue needs a message group ID"}},
		{name: "delay on FIFO", m: producer.Message{Body: "x", GroupID: "g", Delay: time.Second}, fifo: true, want: []string{"FIFO queues take no per-message delay"}},
		{name: "delay over 365 days", m: producer.Message{Body: "x", Delay: 366 * 24 * time.Hour}, want: []string{"delay 8784h0m0s is over the longest delay of 365 days (sqsworker.MaxDelay)"}},
		{name: "negative delay", m: producer.Message{Body: "x", Delay: -time.Second}, want: []string{"delay -1s"}},
		{name: "fractional delay", m: producer.Message{Body: "x", Delay: 1500 * time.Millisecond}, want: []string{"delay 1.5s"}},
		{name: "bad group ID", m: producer.Message{Body: "x", GroupID: "a b"}, fifo: true, want: []string{`message group ID "a b" is not 1 to 128 printable ASCII`}},
		{name: "long deduplication ID", m: producer.Message{Body: "x", GroupID: "g", DeduplicationID: strings.Repeat("d", 129)}, fifo: true,
			want: []string{"deduplication ID"}},
		{
			name: "every problem at once",
			m: producer.Message{
				Body:  strings.Repeat("x", producer.MaxMessageSize+1),
				Delay: 1500 * time.Millisecond,
				Attributes: func() map[string]sqsworker.MessageAttribute {
					m := attrs(8)
					m["bad name"] = str("v")
					m["empty"] = str("")
					m["num"] = sqsworker.MessageAttribute{DataType: "Number", StringValue: "NaN?"}
					return m
				}(),
			},
			fifo: true,
			want: []string{
				"over SQS's limit of 1048576", "delay 1.5s is not a whole number of seconds", "11 message attributes",
				`"bad name" has characters`, `"empty" has an empty value`, `"num" of type Number`,
				"needs a message group ID", "no per-message delay",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := producer.Validate(tt.m, tt.fifo)
			if len(tt.want) == 0 {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate returned nil, want an error naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != len(tt.want) {
				t.Errorf("error names %d problems, want %d:\n%v", n, len(tt.want), err)
			}
		})
	}
}

// Size counts the body and the attributes' names, types and values, the
// idempotency key included.
func TestSize(t *testing.T) {
	m := producer.Message{
		Body:           "12345",
		IdempotencyKey: "k",
		Attributes:     map[string]sqsworker.MessageAttribute{"n": {DataType: "Number", StringValue: "42"}},
	}
	want := 5 + len("idempotency-key") + len("String") + 1 + 1 + len("Number") + 2
	if got := producer.Size(m); got != want {
		t.Errorf("Size = %d, want %d", got, want)
	}
}

// attributesHookAPI records the requests a Producer makes of a Fake.
type attributesHookAPI struct {
	*sqstest.Fake
	sends   []*sqs.SendMessageInput
	batches []*sqs.SendMessageBatchInput
}

func (a *attributesHookAPI) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	a.sends = append(a.sends, in)
	return a.Fake.SendMessage(ctx, in, opts...)
}

func (a *attributesHookAPI) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	a.batches = append(a.batches, in)
	return a.Fake.SendMessageBatch(ctx, in, opts...)
}

type attributesHookKey struct{}

// attributesHookProducer returns a Producer whose Config.Attributes adds a
// "traceparent" attribute taken from the ctx value attributesHookKey (none
// without it), and a "tenant" attribute, and counts its calls.
func attributesHookProducer(t *testing.T, fifo bool) (*producer.Producer, *attributesHookAPI, *int) {
	t.Helper()
	api := &attributesHookAPI{Fake: sqstest.NewFake()}
	name := "jobs"
	var attrs map[string]string
	if fifo {
		name, attrs = "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	}
	url := api.CreateQueue(name, attrs)
	calls := new(int)
	p, err := producer.New(api, producer.Config{
		QueueURL:             url,
		DisableGeneratedKeys: true, // the hook's attributes alone (generated keys: keys_test.go)
		Attributes: func(ctx context.Context) map[string]sqsworker.MessageAttribute {
			*calls++
			tp, ok := ctx.Value(attributesHookKey{}).(string)
			if !ok {
				return nil
			}
			return map[string]sqsworker.MessageAttribute{
				"traceparent": {DataType: "String", StringValue: tp},
				"tenant":      {DataType: "String", StringValue: "from-hook"},
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, api, calls
}

func attributesHookValues(in map[string]types.MessageAttributeValue) map[string]string {
	out := map[string]string{}
	for k, v := range in {
		out[k] = aws.ToString(v.StringValue)
	}
	return out
}

// Send adds the hook's attributes for its ctx; the message's own attributes
// win on the same name, and the caller's map is left alone.
func TestAttributesHookSend(t *testing.T) {
	t.Parallel()
	p, api, calls := attributesHookProducer(t, false)
	ctx := context.WithValue(context.Background(), attributesHookKey{}, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	own := map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}}
	if _, err := p.Send(ctx, producer.Message{Body: "x", Attributes: own}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), producer.Message{Body: "y"}); err != nil {
		t.Fatal(err)
	}
	if *calls != 2 {
		t.Errorf("hook called %d times, want 2", *calls)
	}
	if len(api.sends) != 2 {
		t.Fatalf("%d SendMessage calls, want 2", len(api.sends))
	}
	want := map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tenant": "acme"}
	if got := attributesHookValues(api.sends[0].MessageAttributes); !maps.Equal(got, want) {
		t.Errorf("sent attributes %v, want %v", got, want)
	}
	if got := api.sends[1].MessageAttributes; len(got) != 0 {
		t.Errorf("sent attributes %v without a trace in ctx, want none", got)
	}
	if len(own) != 1 {
		t.Errorf("the caller's attributes were changed: %v", own)
	}
}

// SendBatch calls the hook once, with its ctx, and adds its attributes to
// every message, without changing the caller's messages.
func TestAttributesHookSendBatch(t *testing.T) {
	t.Parallel()
	p, api, calls := attributesHookProducer(t, false)
	ctx := context.WithValue(context.Background(), attributesHookKey{}, "tp")
	msgs := make([]producer.Message, 15)
	for i := range msgs {
		msgs[i].Body = fmt.Sprintf("m%d", i)
	}
	msgs[3].Attributes = map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "own"}}
	msgs[4].IdempotencyKey = "k4"
	if _, err := p.SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if *calls != 1 {
		t.Errorf("hook called %d times for one SendBatch, want 1", *calls)
	}
	if len(api.batches) != 2 {
		t.Fatalf("%d SendMessageBatch calls, want 2", len(api.batches))
	}
	n := 0
	for _, b := range api.batches {
		for _, e := range b.Entries {
			i, _ := strconv.Atoi(aws.ToString(e.Id))
			want := map[string]string{"traceparent": "tp", "tenant": "from-hook"}
			switch i {
			case 3:
				want["tenant"] = "own"
			case 4:
				want["idempotency-key"] = "k4"
			}
			if got := attributesHookValues(e.MessageAttributes); !maps.Equal(got, want) {
				t.Errorf("message %d sent with %v, want %v", i, got, want)
			}
			n++
		}
	}
	if n != len(msgs) {
		t.Errorf("%d messages sent, want %d", n, len(msgs))
	}
	for i, m := range msgs {
		if i != 3 && m.Attributes != nil || i == 3 && len(m.Attributes) != 1 {
			t.Errorf("the caller's message %d was changed: %v", i, m.Attributes)
		}
	}
}

// The hook's attributes are the context's, not the job's: a message they
// would push over ten attributes or over 1 MiB is sent without them, by
// Send and by SendBatch, rather than refused (turning tracing on must not
// fail a send). TestContextAttributesLeftOutWhenNoRoom checks that a
// message with room gets them.
func TestAttributesHookLeftOutOverTheLimits(t *testing.T) {
	t.Parallel()
	p, api, _ := attributesHookProducer(t, false)
	ctx := context.WithValue(context.Background(), attributesHookKey{}, "tp")
	nine := producer.Message{Body: "x", Attributes: attrs(9)}
	big := producer.Message{Body: strings.Repeat("x", producer.MaxMessageSize-20)}
	for _, m := range []producer.Message{nine, big} {
		if _, err := p.Send(ctx, m); err != nil {
			t.Errorf("Send of a message the hook would push over a limit: %v, want it sent without the hook's attributes", err)
		}
	}
	res, err := p.SendBatch(ctx, []producer.Message{nine, {Body: "fine"}, big})
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Errorf("result %d = %+v, want it sent", i, r)
		}
	}
	if len(api.sends) != 2 {
		t.Fatalf("%d SendMessage calls, want 2", len(api.sends))
	}
	for i, in := range api.sends {
		if _, traced := in.MessageAttributes["traceparent"]; traced {
			t.Errorf("send %d carries the hook's attributes over the limits: %v", i, attributesHookValues(in.MessageAttributes))
		}
	}
}

// The message's IdempotencyKey wins over a hook's "idempotency-key"; without
// a key the hook's is sent. An invalid attribute from the hook is refused
// like the message's own.
func TestAttributesHookIdempotencyKeyAndValidation(t *testing.T) {
	t.Parallel()
	api := &attributesHookAPI{Fake: sqstest.NewFake()}
	url := api.CreateQueue("jobs", nil)
	hook := map[string]sqsworker.MessageAttribute{"idempotency-key": {DataType: "String", StringValue: "from-hook"}}
	p, err := producer.New(api, producer.Config{
		QueueURL:   url,
		Attributes: func(context.Context) map[string]sqsworker.MessageAttribute { return hook },
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), producer.Message{Body: "x", IdempotencyKey: "own"}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), producer.Message{Body: "y"}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"own", "from-hook"} {
		if got := attributesHookValues(api.sends[i].MessageAttributes); !maps.Equal(got, map[string]string{"idempotency-key": want}) {
			t.Errorf("message %d sent with %v, want the key %q", i, got, want)
		}
	}
	hook = map[string]sqsworker.MessageAttribute{"AWS.trace": {DataType: "String", StringValue: "v"}}
	_, err = p.Send(context.Background(), producer.Message{Body: "z"})
	if err == nil || !strings.Contains(err.Error(), `"AWS.trace" uses a prefix reserved`) {
		t.Errorf("err = %v, want the hook's attribute refused", err)
	}
	if len(api.sends) != 2 {
		t.Errorf("%d SendMessage calls, want 2", len(api.sends))
	}
}

// On FIFO queues the hook's attributes travel with the group.
func TestAttributesHookFIFO(t *testing.T) {
	t.Parallel()
	p, api, _ := attributesHookProducer(t, true)
	ctx := context.WithValue(context.Background(), attributesHookKey{}, "tp")
	if _, err := p.Send(ctx, producer.Message{Body: "x", GroupID: "g"}); err != nil {
		t.Fatal(err)
	}
	if got := attributesHookValues(api.sends[0].MessageAttributes); got["traceparent"] != "tp" || aws.ToString(api.sends[0].MessageGroupId) != "g" {
		t.Errorf("sent %v in group %q", got, aws.ToString(api.sends[0].MessageGroupId))
	}
}

// Validate, and the Producer for what depends on the queue, refuse what SQS
// refuses, before any request: a deduplication ID on a standard queue, an
// idempotency key with characters SQS does not allow, a data type over 256
// characters, and Number values that are not decimal numbers of up to 38
// digits from 10^-128 to 10^126. Before, all of these reached SQS.
func TestValidateRefusesWhatSQSRefuses(t *testing.T) {
	num := func(v string) producer.Message {
		return producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"n": {DataType: "Number", StringValue: v}}}
	}
	for _, c := range []struct {
		name string
		m    producer.Message
		want string // "" for valid
	}{
		{"key with NUL", producer.Message{Body: "x", IdempotencyKey: "order\x0042"}, "the idempotency key has a character SQS does not allow at byte 5"},
		{"key with invalid UTF-8", producer.Message{Body: "x", IdempotencyKey: "k\xff"}, "the idempotency key has a character SQS does not allow at byte 1"},
		{"key of unicode", producer.Message{Body: "x", IdempotencyKey: "commande-é-42"}, ""},
		{"data type of 256", producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"t": {DataType: "String." + strings.Repeat("l", 249), StringValue: "v"}}}, ""},
		{"data type of 257", producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"t": {DataType: "String." + strings.Repeat("l", 250), StringValue: "v"}}}, "data type of 257 characters, over SQS's limit of 256"},
		{"data type with a control character", producer.Message{Body: "x", Attributes: map[string]sqsworker.MessageAttribute{"t": {DataType: "String.\x01", StringValue: "v"}}}, "character SQS does not allow in its data type"},
		{"NaN", num("NaN"), `"NaN": not a decimal number`},
		{"Inf", num("Inf"), "not a decimal number"},
		{"-Infinity", num("-Infinity"), "not a decimal number"},
		{"hex", num("0x1F"), "not a decimal number"},
		{"hex float", num("0x1p-2"), "not a decimal number"},
		{"underscores", num("1_000"), "not a decimal number"},
		{"two signs", num("+-1"), "not a decimal number"},
		{"bare exponent", num("1e"), "not a decimal number"},
		{"dot alone", num("."), "not a decimal number"},
		{"10^126", num("1e126"), "out of SQS's range"},
		{"10^126 in digits", num("1" + strings.Repeat("0", 126)), "out of SQS's range"},
		{"just under 10^126", num("9.99e125"), ""},
		{"10^-128", num("1e-128"), ""},
		{"10^-129", num("0.1e-128"), "out of SQS's range"},
		{"39 digits", num(strings.Repeat("9", 39)), "39 significant digits, over SQS's limit of 38"},
		{"38 digits", num("-" + strings.Repeat("9", 38)), ""},
		{"38 digits and zeros", num("1" + strings.Repeat("0", 36) + "1.000"), ""},
		{"fraction", num("-0.0025"), ""},
		{"exponent", num("+1.5E-3"), ""},
		{"zero with a huge exponent", num("0e999999999"), ""},
		{"leading dot", num(".5"), ""},
		{"trailing dot", num("5."), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := producer.Validate(c.m, false)
			if c.want == "" {
				if err != nil {
					t.Errorf("Validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v, want an error naming %q", err, c.want)
			}
		})
	}

	// A deduplication ID on a standard queue: refused by Send and
	// SendBatch, which know the queue, without a call.
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	p := newProducer(t, f, url)
	dedup := producer.Message{Body: "x", DeduplicationID: "d1"}
	if _, err := p.Send(context.Background(), dedup); err == nil || !strings.Contains(err.Error(), "a deduplication ID is for FIFO queues") {
		t.Errorf("Send with a deduplication ID to a standard queue: %v", err)
	}
	res, _ := p.SendBatch(context.Background(), []producer.Message{dedup, {Body: "y"}})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "a deduplication ID is for FIFO queues") || res[1].Err != nil {
		t.Errorf("SendBatch: %+v", res)
	}
	if n := f.Calls(sqstest.OpSendMessage); n != 0 {
		t.Errorf("%d SendMessage calls, want 0", n)
	}
	// On a FIFO queue it is what it is for.
	fifo := f.CreateQueue("jobs.fifo", map[string]string{"FifoQueue": "true"})
	if _, err := newProducer(t, f, fifo).Send(context.Background(), producer.Message{Body: "x", GroupID: "g", DeduplicationID: "d1"}); err != nil {
		t.Errorf("Send with a deduplication ID to a FIFO queue: %v", err)
	}
}

package sqstest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// The Fake stands in for the worker's SQS client. (Checked here rather than
// in package sqstest, which must not import worker.)
var _ worker.API = (*sqstest.Fake)(nil)

func newFake(t *testing.T) (*sqstest.Fake, *sqstest.Clock) {
	t.Helper()
	clock := sqstest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	f := sqstest.NewFake()
	f.Now = clock.Now
	return f, clock
}

func recv(t *testing.T, f *sqstest.Fake, url string, max int32) []types.Message {
	t.Helper()
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: max,
		MessageSystemAttributeNames: allSystem, MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

func group(g string) func(*sqs.SendMessageInput) {
	return func(in *sqs.SendMessageInput) {
		in.MessageGroupId = aws.String(g)
		in.MessageDeduplicationId = aws.String(g + "-" + strconv.FormatInt(time.Now().UnixNano(), 10))
	}
}

func deleteAll(t *testing.T, f *sqstest.Fake, url string, ms []types.Message) *sqs.DeleteMessageBatchOutput {
	t.Helper()
	in := &sqs.DeleteMessageBatchInput{QueueUrl: &url}
	for i, m := range ms {
		in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	out, err := f.DeleteMessageBatch(context.Background(), in)
	if err != nil {
		t.Fatalf("DeleteMessageBatch: %v", err)
	}
	return out
}

func TestVisibilityTimeoutWithClock(t *testing.T) {
	f, clock := newFake(t)
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "30"})
	f.Send(url, "m")
	first := recv(t, f, url, 10)
	if len(first) != 1 || first[0].Attributes["SentTimestamp"] != strconv.FormatInt(clock.Now().UnixMilli(), 10) {
		t.Fatalf("first receive %+v", first)
	}
	clock.Advance(29 * time.Second)
	if got := recv(t, f, url, 10); len(got) != 0 {
		t.Fatalf("visible before its timeout")
	}
	if v, fl, d := f.Depth(url); v != 0 || fl != 1 || d != 0 {
		t.Errorf("depth %d %d %d", v, fl, d)
	}
	clock.Advance(time.Second)
	second := recv(t, f, url, 10)
	if len(second) != 1 || second[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("second receive %+v", second)
	}
	// The first handle is no longer valid: not for deletes, not for
	// visibility changes.
	out := deleteAll(t, f, url, first)
	if len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" || !out.Failed[0].SenderFault {
		t.Errorf("delete with an outdated handle: %+v", out)
	}
	_, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: first[0].ReceiptHandle})
	var invalid *types.ReceiptHandleIsInvalid
	if !errors.As(err, &invalid) {
		t.Errorf("visibility change with an outdated handle: %v", err)
	}
	// Once the visibility timeout passed, the message is not in flight.
	clock.Advance(30 * time.Second)
	_, err = f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: second[0].ReceiptHandle, VisibilityTimeout: 10})
	var notInflight *types.MessageNotInflight
	if !errors.As(err, &notInflight) {
		t.Errorf("visibility change after the timeout: %v", err)
	}
	// The latest handle still deletes it; deleting twice succeeds.
	for range 2 {
		if out := deleteAll(t, f, url, second); len(out.Successful) != 1 {
			t.Errorf("delete with the latest handle: %+v", out.Failed)
		}
	}
	if v, fl, d := f.Depth(url); v+fl+d != 0 {
		t.Errorf("depth %d %d %d after delete", v, fl, d)
	}
}

func TestVisibilityOverrideAndLimit(t *testing.T) {
	f, clock := newFake(t)
	url := f.CreateQueue("q", nil)
	f.Send(url, "m")
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: 5})
	if err != nil || len(out.Messages) != 1 {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Second)
	out, _ = f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: 43200})
	h := out.Messages[0].ReceiptHandle
	clock.Advance(time.Hour)
	_, err = f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: h, VisibilityTimeout: 43200})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
		t.Errorf("visibility beyond 12h from the receive: %v", err)
	}
	if _, err := f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: h, VisibilityTimeout: 39600}); err != nil {
		t.Errorf("visibility up to 12h from the receive: %v", err)
	}
}

// FIFO: one receive takes as many messages of a group as fit, in order, then
// goes on to the next group; a group with a message in flight is locked.
func TestFIFOGroupsInOneReceive(t *testing.T) {
	f, _ := newFake(t)
	url := f.CreateQueue("q.fifo", map[string]string{"FifoQueue": "true"})
	for i := range 4 {
		f.Send(url, fmt.Sprintf("a%d", i), group("a"))
		f.Send(url, fmt.Sprintf("b%d", i), group("b"))
	}
	f.Send(url, "c0", group("c"))
	got := recv(t, f, url, 6)
	if b := bodies(got); !slices.Equal(b, []string{"a0", "a1", "a2", "a3", "b0", "b1"}) {
		t.Fatalf("first receive %q", b)
	}
	for i, m := range got {
		if i > 0 && m.Attributes["SequenceNumber"] <= got[i-1].Attributes["SequenceNumber"] && m.Attributes["MessageGroupId"] == got[i-1].Attributes["MessageGroupId"] {
			t.Errorf("sequence numbers out of order: %v", m.Attributes)
		}
	}
	// a and b are locked: only c is left.
	if b := bodies(recv(t, f, url, 10)); !slices.Equal(b, []string{"c0"}) {
		t.Fatalf("second receive %q", b)
	}
	// Deleting a0..a2 leaves a locked by a3.
	deleteAll(t, f, url, got[:3])
	if b := bodies(recv(t, f, url, 10)); len(b) != 0 {
		t.Fatalf("received %q while a3, b0, b1 are in flight", b)
	}
	// Releasing b0 and b1 gives them back, with b2 and b3, in order.
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url}
	for i, m := range got[4:] {
		in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	if out, err := f.ChangeMessageVisibilityBatch(context.Background(), in); err != nil || len(out.Failed) != 0 {
		t.Fatalf("release: %v %+v", err, out)
	}
	again := recv(t, f, url, 10)
	if b := bodies(again); !slices.Equal(b, []string{"b0", "b1", "b2", "b3"}) {
		t.Fatalf("after release %q", b)
	}
	if again[0].Attributes["ApproximateReceiveCount"] != "2" || again[2].Attributes["ApproximateReceiveCount"] != "1" {
		t.Errorf("receive counts %s %s", again[0].Attributes["ApproximateReceiveCount"], again[2].Attributes["ApproximateReceiveCount"])
	}
}

func TestFIFODeduplicationWindow(t *testing.T) {
	f, clock := newFake(t)
	url := f.CreateQueue("q.fifo", map[string]string{"FifoQueue": "true"})
	send := func(body string) *sqs.SendMessageOutput {
		out, err := f.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body,
			MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	a := send("a")
	b := send("b")
	if aws.ToString(a.MessageId) != aws.ToString(b.MessageId) || aws.ToString(a.SequenceNumber) != aws.ToString(b.SequenceNumber) {
		t.Errorf("duplicate got another ID or sequence number")
	}
	clock.Advance(sqstest.DeduplicationInterval)
	c := send("c")
	if aws.ToString(c.MessageId) == aws.ToString(a.MessageId) {
		t.Errorf("deduplicated after the interval")
	}
	if v, _, _ := f.Depth(url); v != 2 {
		t.Errorf("%d messages, want 2", v)
	}
}

func TestFIFOSendRules(t *testing.T) {
	f, _ := newFake(t)
	url := f.CreateQueue("q.fifo", map[string]string{"FifoQueue": "true"})
	code := func(in *sqs.SendMessageInput) string {
		in.QueueUrl = &url
		if in.MessageBody == nil {
			in.MessageBody = aws.String("x")
		}
		_, err := f.SendMessage(context.Background(), in)
		return errorCode(err)
	}
	if c := code(&sqs.SendMessageInput{MessageDeduplicationId: aws.String("d")}); c != "MissingParameter" {
		t.Errorf("no group: %s", c)
	}
	if c := code(&sqs.SendMessageInput{MessageGroupId: aws.String("g")}); c != "InvalidParameterValue" {
		t.Errorf("no deduplication ID: %s", c)
	}
	if c := code(&sqs.SendMessageInput{MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d"), DelaySeconds: 3}); c != "InvalidParameterValue" {
		t.Errorf("per-message delay: %s", c)
	}
	if c := code(&sqs.SendMessageInput{MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d2"), MessageBody: aws.String("bad \x00")}); c != "InvalidMessageContents" {
		t.Errorf("invalid character: %s", c)
	}
	if c := code(&sqs.SendMessageInput{MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d3"), MessageBody: aws.String("")}); c != "MissingParameter" {
		t.Errorf("empty body: %s", c)
	}
}

func TestDelay(t *testing.T) {
	f, clock := newFake(t)
	url := f.CreateQueue("q", map[string]string{"DelaySeconds": "10"})
	f.Send(url, "queue delay")
	f.Send(url, "own delay", func(in *sqs.SendMessageInput) { in.DelaySeconds = 2 })
	if v, fl, d := f.Depth(url); v != 0 || fl != 0 || d != 2 {
		t.Errorf("depth %d %d %d, want 2 delayed", v, fl, d)
	}
	clock.Advance(2 * time.Second)
	if b := bodies(recv(t, f, url, 10)); !slices.Equal(b, []string{"own delay"}) {
		t.Errorf("after 2s: %q", b)
	}
	clock.Advance(8 * time.Second)
	if b := bodies(recv(t, f, url, 10)); !slices.Equal(b, []string{"queue delay"}) {
		t.Errorf("after 10s: %q", b)
	}
}

// A redrive policy moves a message on the receive that would exceed
// maxReceiveCount; FIFO order is kept in both queues.
func TestRedriveFIFO(t *testing.T) {
	f, clock := newFake(t)
	dlq := f.CreateQueue("dlq.fifo", map[string]string{"FifoQueue": "true"})
	url := f.CreateQueue("q.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "10",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq.fifo") + `","maxReceiveCount":"2"}`})
	f.Send(url, "m0", group("g"))
	f.Send(url, "m1", group("g"))
	for range 2 {
		if b := bodies(recv(t, f, url, 1)); !slices.Equal(b, []string{"m0"}) {
			t.Fatalf("received %q", b)
		}
		clock.Advance(10 * time.Second)
	}
	// m0 moves, m1 comes.
	if b := bodies(recv(t, f, url, 10)); !slices.Equal(b, []string{"m1"}) {
		t.Fatalf("third receive %q", b)
	}
	got := recv(t, f, dlq, 10)
	if len(got) != 1 || aws.ToString(got[0].Body) != "m0" || got[0].Attributes["MessageGroupId"] != "g" ||
		got[0].Attributes["DeadLetterQueueSourceArn"] != sqstest.QueueARN("q.fifo") || got[0].Attributes["ApproximateReceiveCount"] != "3" {
		t.Errorf("dead-lettered %+v", got)
	}
}

// A malformed redrive policy set with SetAttribute moves nothing, and is
// returned as set.
func TestMalformedRedrivePolicy(t *testing.T) {
	f, clock := newFake(t)
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "1"})
	f.SetAttribute(url, "RedrivePolicy", `{"deadLetterTargetArn":"x"}`)
	f.Send(url, "m")
	for i := range 3 {
		if len(recv(t, f, url, 1)) != 1 {
			t.Fatalf("receive %d: nothing", i)
		}
		clock.Advance(time.Second)
	}
	out, err := f.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{"RedrivePolicy"}})
	if err != nil || out.Attributes["RedrivePolicy"] != `{"deadLetterTargetArn":"x"}` {
		t.Errorf("RedrivePolicy = %q, %v", out.Attributes["RedrivePolicy"], err)
	}
	f.SetAttribute(url, "RedrivePolicy", "")
	out, _ = f.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{"All"}})
	if _, ok := out.Attributes["RedrivePolicy"]; ok {
		t.Errorf("RedrivePolicy not removed")
	}
}

func TestCreateQueueRefusesWhatSQSRefuses(t *testing.T) {
	f := sqstest.NewFake()
	f.CreateQueue("std", nil)
	for name, attrs := range map[string]map[string]string{
		"bad name!":    nil,
		"q.fifo":       nil, // no FifoQueue attribute
		"q2":           {"FifoQueue": "true"},
		"q3":           {"VisibilityTimeout": "43201"},
		"q4":           {"RedrivePolicy": "{"},
		"q5":           {"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:nope","maxReceiveCount":3}`},
		"q6.fifo":      {"FifoQueue": "true", "RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:std","maxReceiveCount":3}`},
		"q7":           {"Unknown": "1"},
		"std":          {"VisibilityTimeout": "5"}, // exists with other attributes
		"q8":           {"ContentBasedDeduplication": "true"},
		"q9":           {"RedrivePolicy": `{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:std","maxReceiveCount":0}`},
		"q10.fifo.bad": nil,
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("CreateQueue(%q, %v) did not panic", name, attrs)
				}
			}()
			f.CreateQueue(name, attrs)
		}()
	}
	if u := f.CreateQueue("std", nil); u != sqstest.QueueURL("std") {
		t.Errorf("creating an existing queue again = %s", u)
	}
}

func TestFaultInjectionAndCounters(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("q", nil)
	ctx := context.Background()
	netErr := errors.New("connection reset")
	f.FailNext(sqstest.OpGetQueueAttributes, netErr, 2)
	f.FailNext(sqstest.OpGetQueueAttributes, &types.QueueDoesNotExist{}, 1)
	in := &sqs.GetQueueAttributesInput{QueueUrl: &url}
	for i := range 2 {
		if _, err := f.GetQueueAttributes(ctx, in); !errors.Is(err, netErr) {
			t.Errorf("call %d: %v", i, err)
		}
	}
	_, err := f.GetQueueAttributes(ctx, in)
	var dne *types.QueueDoesNotExist
	var oe *smithy.OperationError
	if !errors.As(err, &dne) || !errors.As(err, &oe) || oe.Operation() != "GetQueueAttributes" {
		t.Errorf("third call: %v", err)
	}
	if _, err := f.GetQueueAttributes(ctx, in); err != nil {
		t.Errorf("fourth call: %v", err)
	}
	f.FailNext(sqstest.OpGetQueueAttributes, netErr, 5)
	f.FailNext(sqstest.OpGetQueueAttributes, nil, 0)
	if _, err := f.GetQueueAttributes(ctx, in); err != nil {
		t.Errorf("after removing the failures: %v", err)
	}
	if n := f.Calls(sqstest.OpGetQueueAttributes); n != 5 {
		t.Errorf("Calls = %d, want 5", n)
	}

	// Entry failures, across calls; the failed entries have no effect.
	for i := range 3 {
		f.Send(url, strconv.Itoa(i))
	}
	ms := recv(t, f, url, 10)
	f.FailEntries(sqstest.OpDeleteMessageBatch, "InternalError", false, 2)
	out := deleteAll(t, f, url, ms[:1])
	if len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "InternalError" || out.Failed[0].SenderFault {
		t.Errorf("first delete: %+v", out)
	}
	out = deleteAll(t, f, url, ms)
	if len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "0" || len(out.Successful) != 2 {
		t.Errorf("second delete: %+v", out)
	}
	if _, fl, _ := f.Depth(url); fl != 1 {
		t.Errorf("%d in flight, want the one whose delete failed", fl)
	}

	// A cancelled context fails the call, and counts it.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := f.SendMessage(cctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	if f.Calls(sqstest.OpSendMessage) != 1 {
		t.Errorf("SendMessage calls = %d (Send is not counted)", f.Calls(sqstest.OpSendMessage))
	}

	for _, bad := range []func(){
		func() { f.FailNext("Nope", netErr, 1) },
		func() { f.FailEntries(sqstest.OpReceiveMessage, "X", true, 1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic for an unknown operation")
				}
			}()
			bad()
		}()
	}
}

func TestBatchValidation(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("q", nil)
	ctx := context.Background()
	_, err := f.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url})
	var empty *types.EmptyBatchRequest
	if !errors.As(err, &empty) {
		t.Errorf("empty batch: %v", err)
	}
	_, err = f.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url, Entries: []types.ChangeMessageVisibilityBatchRequestEntry{
		{Id: aws.String("bad id!"), ReceiptHandle: aws.String("h")},
	}})
	var badID *types.InvalidBatchEntryId
	if !errors.As(err, &badID) {
		t.Errorf("bad Id: %v", err)
	}
	send := &sqs.SendMessageBatchInput{QueueUrl: &url}
	for i := range 11 {
		send.Entries = append(send.Entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String("x")})
	}
	_, err = f.SendMessageBatch(ctx, send)
	var tooMany *types.TooManyEntriesInBatchRequest
	if !errors.As(err, &tooMany) {
		t.Errorf("11 entries: %v", err)
	}
	send.Entries = send.Entries[:3]
	send.Entries[1].MessageBody = aws.String("")
	out, err := f.SendMessageBatch(ctx, send)
	if err != nil || len(out.Successful) != 2 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Id) != "1" || !out.Failed[0].SenderFault {
		t.Errorf("batch with a bad entry: %v %+v", err, out)
	}
	if aws.ToString(out.Successful[0].MD5OfMessageBody) != md5Of("x") {
		t.Errorf("MD5OfMessageBody = %s", aws.ToString(out.Successful[0].MD5OfMessageBody))
	}
}

func TestQueueAttributesAndErrors(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("q", nil)
	ctx := context.Background()
	out, err := f.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{"All"}})
	if err != nil {
		t.Fatal(err)
	}
	a := out.Attributes
	if a["VisibilityTimeout"] != "30" || a["QueueArn"] != sqstest.QueueARN("q") || a["ApproximateNumberOfMessages"] != "0" {
		t.Errorf("attributes %v", a)
	}
	for _, n := range []string{"FifoQueue", "ContentBasedDeduplication", "RedrivePolicy"} {
		if _, ok := a[n]; ok {
			t.Errorf("standard queue without redrive has %s", n)
		}
	}
	_, err = f.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{"Nope"}})
	var badName *types.InvalidAttributeName
	if !errors.As(err, &badName) {
		t.Errorf("unknown attribute: %v", err)
	}
	// Other host names for the same queue work, other accounts do not.
	other := "http://127.0.0.1:9324/" + sqstest.Account + "/q"
	if _, err := f.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &other}); err != nil {
		t.Errorf("URL on another host: %v", err)
	}
	wrong := "https://sqs.us-east-1.amazonaws.com/111111111111/q"
	var dne *types.QueueDoesNotExist
	if _, err := f.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &wrong}); !errors.As(err, &dne) {
		t.Errorf("URL of another account: %v", err)
	}
	if _, err := f.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("q"), QueueOwnerAWSAccountId: aws.String("111111111111")}); !errors.As(err, &dne) {
		t.Errorf("GetQueueUrl of another account: %v", err)
	}
	var params *smithy.InvalidParamsError
	if _, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{}); !errors.As(err, &params) {
		t.Errorf("no QueueUrl: %v", err)
	}
	var ae smithy.APIError
	if _, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 11}); !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
		t.Errorf("11 messages: %v", err)
	}
	f.DeleteQueue(url)
	if _, err := f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x")}); !errors.As(err, &dne) {
		t.Errorf("deleted queue: %v", err)
	}
}

// Long polls wake when a message is sent, when a message is released, when
// the clock moves past a visibility timeout, and end with their context.
func TestLongPollWakes(t *testing.T) {
	f, clock := newFake(t)
	url := f.CreateQueue("q", nil)
	ctx := context.Background()
	poll := func() (chan []types.Message, time.Time) {
		ch := make(chan []types.Message, 1)
		go func() {
			out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20, MaxNumberOfMessages: 10})
			if err != nil {
				t.Error(err)
				ch <- nil
				return
			}
			ch <- out.Messages
		}()
		return ch, time.Now()
	}
	wait := func(ch chan []types.Message, start time.Time, what string) []types.Message {
		t.Helper()
		select {
		case ms := <-ch:
			if len(ms) == 0 {
				t.Fatalf("%s: empty receive after %s", what, time.Since(start))
			}
			return ms
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: long poll did not return", what)
		}
		return nil
	}
	ch, start := poll()
	time.Sleep(20 * time.Millisecond)
	f.Send(url, "sent")
	ms := wait(ch, start, "send")

	ch, start = poll()
	time.Sleep(20 * time.Millisecond)
	if _, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: ms[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	wait(ch, start, "release")

	ch, start = poll()
	time.Sleep(20 * time.Millisecond)
	clock.Advance(30 * time.Second)
	wait(ch, start, "clock")

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := f.ReceiveMessage(cctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20})
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled long poll: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelled long poll did not return")
	}
}

// Many goroutines sending, receiving and deleting at once: every message is
// delivered, and none is lost or deleted twice.
func TestConcurrentUse(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "60"})
	ctx := context.Background()
	const senders, each = 4, 50
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				if _, err := f.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(fmt.Sprintf("%d-%d", s, i))}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var mu sync.Mutex
	seen := map[string]int{}
	for range 4 {
		wg.Go(func() {
			for {
				mu.Lock()
				n := len(seen)
				mu.Unlock()
				if n == senders*each {
					return
				}
				out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					t.Error(err)
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				mu.Lock()
				for _, m := range out.Messages {
					seen[aws.ToString(m.Body)]++
				}
				mu.Unlock()
				if d := deleteAll(t, f, url, out.Messages); len(d.Failed) != 0 {
					t.Errorf("delete failed: %+v", d.Failed)
				}
			}
		})
	}
	wg.Wait()
	for b, n := range seen {
		if n != 1 {
			t.Errorf("%s received %d times", b, n)
		}
	}
	if v, fl, d := f.Depth(url); v+fl+d != 0 {
		t.Errorf("depth %d %d %d", v, fl, d)
	}
}

// The Fake frees deleted messages, yet answers for their receipt handles as
// before: the latest deletes again, earlier ones, a moved message's, another
// queue's, a deleted and recreated queue's and altered ones are invalid.
func TestHandlesOfGoneMessages(t *testing.T) {
	f, clock := newFake(t)
	ctx := context.Background()
	dlq := f.CreateQueue("dlq", nil)
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":1}`})
	other := f.CreateQueue("other", nil)
	for _, body := range []string{"a", "b", "c"} {
		f.Send(url, body)
	}
	first := recv(t, f, url, 3) // a, b, c
	if len(first) != 3 {
		t.Fatalf("received %d", len(first))
	}
	deleteAll(t, f, url, first[:1]) // a, after one receive
	f.Send(other, "o")
	otherMsg := recv(t, f, other, 1)
	clock.Advance(30 * time.Second)
	if got := recv(t, f, url, 10); len(got) != 0 { // b and c move to the dead-letter queue
		t.Fatalf("received %d, want the others moved", len(got))
	}
	moved := recv(t, f, dlq, 10)
	if len(moved) != 2 {
		t.Fatalf("%d on the dead-letter queue, want 2", len(moved))
	}
	// b again on the dead-letter queue, deleted after its second receive.
	if _, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &dlq, ReceiptHandle: moved[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	again := recv(t, f, dlq, 1)
	if len(again) != 1 || aws.ToString(again[0].MessageId) != aws.ToString(moved[0].MessageId) {
		t.Fatalf("received %+v again", again)
	}
	deleteAll(t, f, dlq, again)

	altered := []byte(aws.ToString(first[0].ReceiptHandle))
	altered[3] ^= 1
	for _, c := range []struct {
		name, url, handle string
		ok                bool // the delete succeeds
	}{
		{"latest handle of a deleted message", url, aws.ToString(first[0].ReceiptHandle), true},
		{"latest handle of a message deleted after two receives", dlq, aws.ToString(again[0].ReceiptHandle), true},
		{"earlier handle of a message deleted after two receives", dlq, aws.ToString(moved[0].ReceiptHandle), false},
		{"handle of a message moved to the dead-letter queue", url, aws.ToString(first[1].ReceiptHandle), false},
		{"another queue's handle", url, aws.ToString(otherMsg[0].ReceiptHandle), false},
		{"altered handle", url, string(altered), false},
		{"made-up handle", url, "made-up", false},
	} {
		out, err := f.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &c.url, Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: &c.handle}}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.ok {
			if len(out.Successful) != 1 {
				t.Errorf("%s: delete failed: %+v", c.name, out.Failed)
			}
			_, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &c.url, ReceiptHandle: &c.handle, VisibilityTimeout: 10})
			var ae smithy.APIError
			if !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue" {
				t.Errorf("%s: visibility change: %v, want InvalidParameterValue", c.name, err)
			}
			continue
		}
		if len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" || !out.Failed[0].SenderFault {
			t.Errorf("%s: delete: %+v, want ReceiptHandleIsInvalid", c.name, out)
		}
		_, err = f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &c.url, ReceiptHandle: &c.handle, VisibilityTimeout: 10})
		var invalid *types.ReceiptHandleIsInvalid
		if !errors.As(err, &invalid) {
			t.Errorf("%s: visibility change: %v, want ReceiptHandleIsInvalid", c.name, err)
		}
	}
	if v, fl, _ := f.Depth(other); v+fl != 1 {
		t.Errorf("the other queue's message was deleted")
	}

	// A queue deleted and created again knows none of the old handles.
	f.DeleteQueue(other)
	other = f.CreateQueue("other", nil)
	f.Send(other, "o2")
	recv(t, f, other, 1)
	if out := deleteAll(t, f, other, otherMsg); len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" {
		t.Errorf("handle of the deleted queue: %+v", out)
	}
}

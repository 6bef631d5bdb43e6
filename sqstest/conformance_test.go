package sqstest_test

// Conformance: the same scenarios run against the Fake and against the local
// emulator (fauxqs, through sqstest/localtest), so that the Fake keeps
// behaving like SQS where the emulator does. The emulator runs are skipped
// without AWS_ENDPOINT_URL_SQS.
//
// Where the emulator is known to differ from real SQS, the scenarios assert
// what both share and check the SQS behaviour on the Fake only:
//
//   - FIFO: SQS returns several messages of one group in one receive, in
//     order; the emulator returns at most one message per group per receive.
//   - Receipt handles: SQS rejects made-up handles, and the Fake also rejects
//     the handle of an earlier receive of a message received again
//     (ReceiptHandleIsInvalid, SenderFault true); the emulator accepts both
//     without an error and deletes nothing. A visibility change with the
//     handle of a deleted message fails as the caller's fault on both, with
//     InvalidParameterValue on SQS and the Fake, ReceiptHandleIsInvalid on
//     the emulator.
//   - The emulator accepts a message with more than 10 message attributes;
//     SQS and the Fake refuse it with InvalidParameterValue.
//   - FIFO receive attempt IDs: SQS and the Fake answer a receive retried
//     with the ReceiveRequestAttemptId of an earlier one, within 5 minutes
//     and while none of its messages was modified, with the same messages
//     and receipt handles; the emulator accepts the ID and ignores it (the
//     retry is a receive of its own). The scenario checks that on the Fake
//     only, and what follows a delete on both.
//   - Redrive: the emulator counts the receive that moves a message to the
//     dead-letter queue in its ApproximateReceiveCount (maxReceiveCount+2 on
//     the first receive from the dead-letter queue, where the Fake has
//     maxReceiveCount+1), and sets no DeadLetterQueueSourceArn. The
//     scenario logs both and asserts neither.

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// client is what the scenarios call: *sqs.Client and *sqstest.Fake.
type client interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

var (
	_ client = (*sqs.Client)(nil)
	_ client = (*sqstest.Fake)(nil)
)

// backend is one SQS the scenarios run against.
type backend struct {
	t        *testing.T
	c        client
	emulator bool
	newQueue func(o localtest.QueueOptions) localtest.Queue
}

// conform runs scenario against the Fake and against the emulator, in
// parallel.
func conform(t *testing.T, scenario func(t *testing.T, b *backend)) {
	t.Parallel()
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		scenario(t, &backend{t: t, c: f, newQueue: func(o localtest.QueueOptions) localtest.Queue { return fakeQueue(t, f, o) }})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		c := localtest.NewSQS(t)
		scenario(t, &backend{t: t, c: c, emulator: true, newQueue: func(o localtest.QueueOptions) localtest.Queue { return localtest.NewQueue(t, c, o) }})
	})
}

// fakeQueue creates on the Fake the queues localtest.NewQueue creates.
func fakeQueue(t *testing.T, f *sqstest.Fake, o localtest.QueueOptions) localtest.Queue {
	vis := o.VisibilityTimeout
	if vis == 0 {
		vis = 30 * time.Second
	}
	attrs := func() map[string]string {
		a := map[string]string{"VisibilityTimeout": strconv.Itoa(int(vis / time.Second))}
		if o.FIFO {
			a["FifoQueue"] = "true"
			if o.ContentDedup {
				a["ContentBasedDeduplication"] = "true"
			}
		}
		return a
	}
	var q localtest.Queue
	name := localtest.UniqueName(t, o.FIFO)
	a := attrs()
	if o.MaxReceiveCount > 0 {
		q.DLQURL = f.CreateQueue("dlq-"+name, attrs())
		q.DLQARN = sqstest.QueueARN("dlq-" + name)
		a["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, q.DLQARN, o.MaxReceiveCount)
	}
	q.URL, q.ARN = f.CreateQueue(name, a), sqstest.QueueARN(name)
	return q
}

var ctx = context.Background()

var allSystem = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}

// receive makes one receive call.
func (b *backend) receive(url string, max, wait, vis int32) []types.Message {
	b.t.Helper()
	out, err := b.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: max, WaitTimeSeconds: wait, VisibilityTimeout: vis,
		MessageSystemAttributeNames: allSystem, MessageAttributeNames: []string{"All"},
	})
	if err != nil {
		b.t.Fatalf("ReceiveMessage: %v", err)
	}
	return out.Messages
}

// receiveN receives until n messages came, or fails the test after 10s.
func (b *backend) receiveN(url string, n int, vis int32) []types.Message {
	b.t.Helper()
	var got []types.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n {
		if time.Now().After(deadline) {
			b.t.Fatalf("received %d messages, want %d", len(got), n)
		}
		got = append(got, b.receive(url, 10, 1, vis)...)
	}
	if len(got) != n {
		b.t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

// send sends bodies one by one, to group on FIFO queues.
func (b *backend) send(url, group string, bodies ...string) []string {
	b.t.Helper()
	var ids []string
	for i, body := range bodies {
		in := &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(body)}
		if group != "" {
			in.MessageGroupId = aws.String(group)
			in.MessageDeduplicationId = aws.String(fmt.Sprintf("%s-%d-%d", group, i, time.Now().UnixNano()))
		}
		out, err := b.c.SendMessage(ctx, in)
		if err != nil {
			b.t.Fatalf("SendMessage: %v", err)
		}
		ids = append(ids, aws.ToString(out.MessageId))
	}
	return ids
}

func (b *backend) deleteBatch(url string, handles ...string) *sqs.DeleteMessageBatchOutput {
	b.t.Helper()
	in := &sqs.DeleteMessageBatchInput{QueueUrl: &url}
	for i, h := range handles {
		in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h)})
	}
	out, err := b.c.DeleteMessageBatch(ctx, in)
	if err != nil {
		b.t.Fatalf("DeleteMessageBatch: %v", err)
	}
	return out
}

func (b *backend) changeVisibility(url string, secs int32, handles ...string) *sqs.ChangeMessageVisibilityBatchOutput {
	b.t.Helper()
	in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &url}
	for i, h := range handles {
		in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: secs})
	}
	out, err := b.c.ChangeMessageVisibilityBatch(ctx, in)
	if err != nil {
		b.t.Fatalf("ChangeMessageVisibilityBatch: %v", err)
	}
	if len(out.Failed) > 0 {
		b.t.Fatalf("ChangeMessageVisibilityBatch: %d failed: %s %s", len(out.Failed), aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
	}
	return out
}

func (b *backend) depth(url string) (visible, inFlight, delayed int) {
	b.t.Helper()
	out, err := b.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}})
	if err != nil {
		b.t.Fatalf("GetQueueAttributes: %v", err)
	}
	atoi := func(name string) int {
		s, ok := out.Attributes[name]
		n, err := strconv.Atoi(s)
		if !ok || err != nil {
			b.t.Fatalf("attribute %s = %q", name, s)
		}
		return n
	}
	return atoi("ApproximateNumberOfMessages"), atoi("ApproximateNumberOfMessagesNotVisible"), atoi("ApproximateNumberOfMessagesDelayed")
}

func bodies(ms []types.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.Body))
	}
	return out
}

func handles(ms []types.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, aws.ToString(m.ReceiptHandle))
	}
	return out
}

func md5Of(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Sent messages are received with their body, checksum and system
// attributes, and are gone once deleted.
func TestConformanceSendReceiveDelete(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{})
		before := time.Now().Add(-time.Second).UnixMilli()
		sent := []string{"one", "two", `{"three":3}`}
		ids := b.send(q.URL, "", sent...)
		got := b.receiveN(q.URL, 3, 30)
		if gotBodies := bodies(got); !sameSet(gotBodies, sent) {
			t.Errorf("bodies %q, want %q", gotBodies, sent)
		}
		for _, m := range got {
			if !slices.Contains(ids, aws.ToString(m.MessageId)) {
				t.Errorf("message ID %s not among the sent %v", aws.ToString(m.MessageId), ids)
			}
			if aws.ToString(m.MD5OfBody) != md5Of(aws.ToString(m.Body)) {
				t.Errorf("MD5OfBody %s of %q", aws.ToString(m.MD5OfBody), aws.ToString(m.Body))
			}
			a := m.Attributes
			if a["ApproximateReceiveCount"] != "1" {
				t.Errorf("ApproximateReceiveCount = %q, want 1", a["ApproximateReceiveCount"])
			}
			for _, name := range []string{"SentTimestamp", "ApproximateFirstReceiveTimestamp"} {
				if ms, err := strconv.ParseInt(a[name], 10, 64); err != nil || ms < before || ms > time.Now().Add(time.Second).UnixMilli() {
					t.Errorf("%s = %q, want a recent time in milliseconds", name, a[name])
				}
			}
		}
		if v, f, d := b.depth(q.URL); v != 0 || f != 3 || d != 0 {
			t.Errorf("depth after receive = %d visible, %d in flight, %d delayed; want 0, 3, 0", v, f, d)
		}
		out := b.deleteBatch(q.URL, handles(got)...)
		if len(out.Successful) != 3 || len(out.Failed) != 0 {
			t.Errorf("delete: %d successful, %d failed", len(out.Successful), len(out.Failed))
		}
		if v, f, d := b.depth(q.URL); v+f+d != 0 {
			t.Errorf("depth after delete = %d, %d, %d; want 0", v, f, d)
		}
		if m := b.receive(q.URL, 10, 0, 30); len(m) != 0 {
			t.Errorf("received %q after delete", bodies(m))
		}
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A received message comes back after its visibility timeout with a new
// receipt handle and a higher receive count; a visibility change to 0 makes
// it visible at once.
func TestConformanceVisibility(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{VisibilityTimeout: time.Second})
		b.send(q.URL, "", "v")
		first := b.receiveN(q.URL, 1, 0)[0]
		received := time.Now()
		if m := b.receive(q.URL, 10, 0, 0); len(m) != 0 {
			t.Fatalf("received %q while in flight", bodies(m))
		}
		second := b.receiveN(q.URL, 1, 0)[0]
		if d := time.Since(received); d < 900*time.Millisecond {
			t.Errorf("received again after %s, before the 1s visibility timeout", d)
		}
		if aws.ToString(second.MessageId) != aws.ToString(first.MessageId) {
			t.Errorf("another message came back")
		}
		if aws.ToString(second.ReceiptHandle) == aws.ToString(first.ReceiptHandle) {
			t.Errorf("same receipt handle on the second receive")
		}
		if n := second.Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Errorf("ApproximateReceiveCount = %s, want 2", n)
		}
		if a, b := first.Attributes["ApproximateFirstReceiveTimestamp"], second.Attributes["ApproximateFirstReceiveTimestamp"]; a != b {
			t.Errorf("ApproximateFirstReceiveTimestamp changed from %s to %s", a, b)
		}
		// A longer visibility timeout, then back to 0: visible at once.
		third := b.receive(q.URL, 1, 2, 60)
		if len(third) != 1 {
			t.Fatalf("received %d messages, want 1", len(third))
		}
		b.changeVisibility(q.URL, 0, aws.ToString(third[0].ReceiptHandle))
		fourth := b.receive(q.URL, 1, 0, 60)
		if len(fourth) != 1 {
			t.Fatalf("not visible at once after a visibility change to 0")
		}
		if n := fourth[0].Attributes["ApproximateReceiveCount"]; n != "4" {
			t.Errorf("ApproximateReceiveCount = %s, want 4", n)
		}
	})
}

// A message received maxReceiveCount times moves to the dead-letter queue on
// the next receive, with its body, ID and attributes.
func TestConformanceRedrive(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{MaxReceiveCount: 2})
		out, err := b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("doomed"),
			MessageAttributes: map[string]types.MessageAttributeValue{"k": {DataType: aws.String("String"), StringValue: aws.String("v")}}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= 2; i++ {
			m := b.receiveN(q.URL, 1, 60)[0]
			if n := m.Attributes["ApproximateReceiveCount"]; n != strconv.Itoa(i) {
				t.Errorf("receive %d: ApproximateReceiveCount = %s", i, n)
			}
			b.changeVisibility(q.URL, 0, aws.ToString(m.ReceiptHandle))
		}
		if m := b.receive(q.URL, 10, 1, 60); len(m) != 0 {
			t.Fatalf("received %q a third time, want it moved", bodies(m))
		}
		if v, f, d := b.depth(q.URL); v+f+d != 0 {
			t.Errorf("source queue depth %d, %d, %d after the move", v, f, d)
		}
		dl := b.receiveN(q.DLQURL, 1, 60)[0]
		if aws.ToString(dl.Body) != "doomed" || aws.ToString(dl.MessageId) != aws.ToString(out.MessageId) {
			t.Errorf("dead-lettered %q with ID %s, want %q with ID %s", aws.ToString(dl.Body), aws.ToString(dl.MessageId), "doomed", aws.ToString(out.MessageId))
		}
		if v := dl.MessageAttributes["k"]; aws.ToString(v.StringValue) != "v" {
			t.Errorf("attribute k = %q on the dead-letter queue", aws.ToString(v.StringValue))
		}
		t.Logf("receive count on the dead-letter queue: %s, source: %q", dl.Attributes["ApproximateReceiveCount"], dl.Attributes["DeadLetterQueueSourceArn"])
	})
}

// FIFO: messages of a group come in order; a group with a message in flight
// gives out no other; groups do not block each other.
func TestConformanceFIFO(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{FIFO: true})
		b.send(q.URL, "a", "a1", "a2", "a3")
		b.send(q.URL, "b", "b1", "b2")
		first := b.receive(q.URL, 10, 1, 60)
		// Both return the heads of both groups, in group order.
		checkGroupOrder(t, first, map[string][]string{"a": {"a1", "a2", "a3"}, "b": {"b1", "b2"}})
		if !hasBody(first, "a1") || !hasBody(first, "b1") {
			t.Fatalf("first receive %q lacks a group's head", bodies(first))
		}
		if b.emulator {
			// Deviation: the emulator returns one message per group.
			if len(first) != 2 {
				t.Logf("emulator returned %q in one receive", bodies(first))
			}
		} else if got := bodies(first); !slices.Equal(got, []string{"a1", "a2", "a3", "b1", "b2"}) {
			// SQS fills the receive from one group, in order, then the next.
			t.Errorf("first receive = %q, want all of group a then all of b", got)
		}
		// Both groups are locked while their messages are in flight.
		if m := b.receive(q.URL, 10, 1, 60); len(m) != 0 {
			t.Fatalf("received %q while every group had a message in flight", bodies(m))
		}
		// Release group a: it comes again from its head, in order.
		var aHandles, bHandles []string
		for _, m := range first {
			if m.Attributes["MessageGroupId"] == "a" {
				aHandles = append(aHandles, aws.ToString(m.ReceiptHandle))
			} else {
				bHandles = append(bHandles, aws.ToString(m.ReceiptHandle))
			}
		}
		b.changeVisibility(q.URL, 0, aHandles...)
		again := b.receive(q.URL, 10, 1, 60)
		if len(again) == 0 || aws.ToString(again[0].Body) != "a1" {
			t.Fatalf("after release, received %q, want group a from a1", bodies(again))
		}
		for _, m := range again {
			if m.Attributes["MessageGroupId"] != "a" {
				t.Errorf("received %s of locked group b", aws.ToString(m.Body))
			}
			if m.Attributes["SequenceNumber"] == "" || m.Attributes["MessageDeduplicationId"] == "" {
				t.Errorf("%s lacks FIFO attributes: %v", aws.ToString(m.Body), m.Attributes)
			}
		}
		checkGroupOrder(t, again, map[string][]string{"a": {"a1", "a2", "a3"}})
		// Deleting b's head (and its followers received with it) unlocks
		// group b while a stays locked.
		if out := b.deleteBatch(q.URL, bHandles...); len(out.Failed) != 0 {
			t.Fatalf("delete failed: %v", aws.ToString(out.Failed[0].Code))
		}
		rest := b.receive(q.URL, 10, 1, 60)
		if b.emulator {
			if got := bodies(rest); !slices.Equal(got, []string{"b2"}) {
				t.Errorf("after deleting b1, received %q, want [b2]", got)
			}
		} else if len(rest) != 0 { // b2 came with b1 and was deleted with it
			t.Errorf("after deleting group b, received %q", bodies(rest))
		}
	})
}

// FIFO receive attempt IDs: both accept them; a receive retried with the
// same ID gets the same messages on the Fake only (the emulator ignores the
// ID); once they were deleted, a receive with the ID is a new one on both.
func TestConformanceFIFOReceiveAttemptID(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{FIFO: true})
		b.send(q.URL, "a", "a1", "a2")
		receive := func(id string) []types.Message {
			t.Helper()
			out, err := b.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
				QueueUrl: &q.URL, MaxNumberOfMessages: 1, WaitTimeSeconds: 1, VisibilityTimeout: 60,
				ReceiveRequestAttemptId: aws.String(id), MessageSystemAttributeNames: allSystem,
			})
			if err != nil {
				t.Fatalf("ReceiveMessage with attempt ID %s: %v", id, err)
			}
			return out.Messages
		}
		first := receive("attempt-1")
		if got := bodies(first); !slices.Equal(got, []string{"a1"}) {
			t.Fatalf("first receive = %q, want a1", got)
		}
		again := receive("attempt-1")
		switch {
		case b.emulator:
			// Deviation: the emulator ignores the ID; group a is locked.
			t.Logf("emulator: a receive retried with the same attempt ID got %q", bodies(again))
		case len(again) != 1 || aws.ToString(again[0].ReceiptHandle) != aws.ToString(first[0].ReceiptHandle) ||
			again[0].Attributes["ApproximateReceiveCount"] != "1":
			t.Errorf("a receive retried with the same attempt ID got %q, want a1 again, with the same receipt handle and receive count", bodies(again))
		}
		if out := b.deleteBatch(q.URL, handles(first)...); len(out.Failed) != 0 {
			t.Fatalf("delete failed: %v", aws.ToString(out.Failed[0].Code))
		}
		if got := bodies(receive("attempt-1")); !slices.Equal(got, []string{"a2"}) {
			t.Errorf("after a1 was deleted, a receive with its attempt ID got %q, want a2", got)
		}
	})
}

func hasBody(ms []types.Message, body string) bool {
	return slices.Contains(bodies(ms), body)
}

// checkGroupOrder checks that the messages of each group received form a
// prefix of the group's messages, in order.
func checkGroupOrder(t *testing.T, ms []types.Message, want map[string][]string) {
	t.Helper()
	byGroup := map[string][]string{}
	for _, m := range ms {
		g := m.Attributes["MessageGroupId"]
		byGroup[g] = append(byGroup[g], aws.ToString(m.Body))
	}
	for g, got := range byGroup {
		w, ok := want[g]
		if !ok || len(got) > len(w) || !slices.Equal(got, w[:len(got)]) {
			t.Errorf("group %q received %q, want a prefix of %q", g, got, w)
		}
	}
}

// FIFO deduplication drops a message whose deduplication ID was seen, and
// content-based deduplication one whose body was.
func TestConformanceFIFODeduplication(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{FIFO: true, ContentDedup: true})
		send := func(body, dedup string) string {
			in := &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(body), MessageGroupId: aws.String("g")}
			if dedup != "" {
				in.MessageDeduplicationId = aws.String(dedup)
			}
			out, err := b.c.SendMessage(ctx, in)
			if err != nil {
				t.Fatalf("SendMessage: %v", err)
			}
			if aws.ToString(out.SequenceNumber) == "" {
				t.Errorf("no sequence number")
			}
			return aws.ToString(out.MessageId)
		}
		send("x", "d1")
		send("y", "d1") // duplicate ID
		send("z", "")
		send("z", "") // duplicate body
		var got []types.Message
		for {
			more := b.receive(q.URL, 10, 1, 60)
			if len(more) == 0 {
				break
			}
			got = append(got, more...)
			b.deleteBatch(q.URL, handles(more)...)
		}
		if bs := bodies(got); !slices.Equal(bs, []string{"x", "z"}) {
			t.Errorf("received %q, want [x z]", bs)
		}
	})
}

// Message attributes of every type come back as sent, with the MD5 digest
// SQS computes; receives get only the attributes they ask for.
func TestConformanceMessageAttributes(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{})
		attrs := map[string]types.MessageAttributeValue{
			"tenant":      {DataType: aws.String("String"), StringValue: aws.String("acme ✓")},
			"count":       {DataType: aws.String("Number"), StringValue: aws.String("42")},
			"blob":        {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 2, 255}},
			"doc":         {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
			"trace.id":    {DataType: aws.String("String"), StringValue: aws.String("t-1")},
			"trace.other": {DataType: aws.String("Number.int"), StringValue: aws.String("-7")},
		}
		out, err := b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("with attributes"), MessageAttributes: attrs})
		if err != nil {
			t.Fatal(err)
		}
		want := sqstest.AttributesMD5(attrs)
		if got := aws.ToString(out.MD5OfMessageAttributes); got != want {
			t.Errorf("SendMessage MD5OfMessageAttributes = %s, sqstest.AttributesMD5 = %s", got, want)
		}
		if got := aws.ToString(out.MD5OfMessageBody); got != md5Of("with attributes") {
			t.Errorf("MD5OfMessageBody = %s", got)
		}
		m := b.receiveN(q.URL, 1, 0)[0]
		if len(m.MessageAttributes) != len(attrs) {
			t.Errorf("received %d attributes, want %d", len(m.MessageAttributes), len(attrs))
		}
		for k, v := range attrs {
			g, ok := m.MessageAttributes[k]
			if !ok || aws.ToString(g.DataType) != aws.ToString(v.DataType) || aws.ToString(g.StringValue) != aws.ToString(v.StringValue) || string(g.BinaryValue) != string(v.BinaryValue) {
				t.Errorf("attribute %s = %+v, want %+v", k, g, v)
			}
		}
		if got := aws.ToString(m.MD5OfMessageAttributes); got != want {
			t.Errorf("received MD5OfMessageAttributes = %s, want %s", got, want)
		}
		b.changeVisibility(q.URL, 0, aws.ToString(m.ReceiptHandle))
		// Names and prefixes select attributes.
		sel, err := b.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 1, MessageAttributeNames: []string{"tenant", "trace.*"}})
		if err != nil || len(sel.Messages) != 1 {
			t.Fatalf("receive: %v, %d messages", err, len(sel.Messages))
		}
		var names []string
		for k := range sel.Messages[0].MessageAttributes {
			names = append(names, k)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"tenant", "trace.id", "trace.other"}) {
			t.Errorf("selected attributes %q", names)
		}
		if len(sel.Messages[0].Attributes) != 0 {
			t.Errorf("system attributes %v returned unasked", sel.Messages[0].Attributes)
		}
		// Eleven attributes are refused.
		many := map[string]types.MessageAttributeValue{}
		for i := range 11 {
			many[fmt.Sprintf("a%d", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("x")}
		}
		_, err = b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("x"), MessageAttributes: many})
		var ae smithy.APIError
		switch {
		case b.emulator && err == nil:
			// Deviation: the emulator accepts more than 10 attributes.
			t.Logf("emulator: accepted a message with 11 attributes")
		case !errors.As(err, &ae) || ae.ErrorCode() != "InvalidParameterValue":
			t.Errorf("11 attributes: err = %v, want InvalidParameterValue", err)
		}
	})
}

// GetQueueAttributes reports the queue's settings and its depth.
func TestConformanceQueueAttributes(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{VisibilityTimeout: 2 * time.Second, MaxReceiveCount: 4})
		b.send(q.URL, "", "1", "2", "3")
		if _, err := b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("later"), DelaySeconds: 60}); err != nil {
			t.Fatal(err)
		}
		if got := b.receive(q.URL, 1, 0, 60); len(got) != 1 {
			t.Fatalf("received %d messages, want 1", len(got))
		}
		if v, f, d := b.depth(q.URL); v != 2 || f != 1 || d != 1 {
			t.Errorf("depth = %d visible, %d in flight, %d delayed; want 2, 1, 1", v, f, d)
		}
		out, err := b.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &q.URL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		a := out.Attributes
		if a["QueueArn"] != q.ARN || a["VisibilityTimeout"] != "2" {
			t.Errorf("QueueArn %q VisibilityTimeout %q", a["QueueArn"], a["VisibilityTimeout"])
		}
		if _, ok := a["FifoQueue"]; ok && a["FifoQueue"] != "false" {
			t.Errorf("standard queue has FifoQueue %q", a["FifoQueue"])
		}
		rp := a["RedrivePolicy"]
		if !strings.Contains(rp, q.DLQARN) || !strings.Contains(rp, `"maxReceiveCount":4`) && !strings.Contains(rp, `"maxReceiveCount":"4"`) {
			t.Errorf("RedrivePolicy = %s", rp)
		}
		fq := b.newQueue(localtest.QueueOptions{FIFO: true})
		fo, err := b.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &fq.URL, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameFifoQueue, types.QueueAttributeNameQueueArn}})
		if err != nil {
			t.Fatal(err)
		}
		if fo.Attributes["FifoQueue"] != "true" || fo.Attributes["QueueArn"] != fq.ARN {
			t.Errorf("FIFO queue attributes %v", fo.Attributes)
		}
		name := fq.ARN[strings.LastIndexByte(fq.ARN, ':')+1:]
		u, err := b.c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
		if err != nil || aws.ToString(u.QueueUrl) != fq.URL {
			t.Errorf("GetQueueUrl(%s) = %v, %v; want %s", name, aws.ToString(u.QueueUrl), err, fq.URL)
		}
	})
}

// A missing queue is reported as *types.QueueDoesNotExist by every call.
func TestConformanceQueueDoesNotExist(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{})
		missing := q.URL[:strings.LastIndexByte(q.URL, '/')+1] + "no-such-queue-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		name := missing[strings.LastIndexByte(missing, '/')+1:]
		check := func(op string, err error) {
			t.Helper()
			var dne *types.QueueDoesNotExist
			if !errors.As(err, &dne) {
				t.Errorf("%s: err = %v (%T), want *types.QueueDoesNotExist", op, err, err)
				return
			}
			var oe *smithy.OperationError
			if !errors.As(err, &oe) || oe.Operation() != op {
				t.Errorf("%s: err = %v, want a *smithy.OperationError of %s", op, err, op)
			}
		}
		_, err := b.c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &missing, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		check("GetQueueAttributes", err)
		_, err = b.c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &missing})
		check("ReceiveMessage", err)
		_, err = b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &missing, MessageBody: aws.String("x")})
		check("SendMessage", err)
		_, err = b.c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name})
		check("GetQueueUrl", err)
	})
}

// Receipt handles: only the latest receive's handle deletes; batch limits.
func TestConformanceReceiptHandlesAndBatches(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{})
		b.send(q.URL, "", "m")
		old := b.receiveN(q.URL, 1, 60)[0]
		b.changeVisibility(q.URL, 0, aws.ToString(old.ReceiptHandle))
		cur := b.receiveN(q.URL, 1, 60)[0]
		out := b.deleteBatch(q.URL, aws.ToString(old.ReceiptHandle), "made-up-handle")
		if b.emulator {
			// Deviation: the emulator accepts outdated and made-up
			// handles, and deletes nothing.
			t.Logf("emulator: outdated and made-up handles: %d successful, %d failed", len(out.Successful), len(out.Failed))
		} else {
			if len(out.Failed) != 2 || len(out.Successful) != 0 {
				t.Fatalf("outdated and made-up handles: %d successful, %d failed; want 2 failed", len(out.Successful), len(out.Failed))
			}
			for _, f := range out.Failed {
				if aws.ToString(f.Code) != "ReceiptHandleIsInvalid" || !f.SenderFault {
					t.Errorf("failure %s %s, SenderFault %v; want ReceiptHandleIsInvalid, true", aws.ToString(f.Code), aws.ToString(f.Message), f.SenderFault)
				}
			}
		}
		if _, f, _ := b.depth(q.URL); f != 1 {
			t.Errorf("the message is no longer in flight after deletes with wrong handles")
		}
		if out := b.deleteBatch(q.URL, aws.ToString(cur.ReceiptHandle)); len(out.Successful) != 1 {
			t.Errorf("delete with the current handle: %+v", out.Failed)
		}
		if v, f, d := b.depth(q.URL); v+f+d != 0 {
			t.Errorf("depth %d, %d, %d after delete", v, f, d)
		}

		// Eleven entries, repeated Ids.
		in := &sqs.DeleteMessageBatchInput{QueueUrl: &q.URL}
		for i := range 11 {
			in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String("h")})
		}
		_, err := b.c.DeleteMessageBatch(ctx, in)
		var tooMany *types.TooManyEntriesInBatchRequest
		if !errors.As(err, &tooMany) {
			t.Errorf("11 entries: err = %v, want *types.TooManyEntriesInBatchRequest", err)
		}
		in.Entries = in.Entries[:2]
		in.Entries[1].Id = in.Entries[0].Id
		_, err = b.c.DeleteMessageBatch(ctx, in)
		var notDistinct *types.BatchEntryIdsNotDistinct
		if !errors.As(err, &notDistinct) {
			t.Errorf("repeated Ids: err = %v, want *types.BatchEntryIdsNotDistinct", err)
		}
	})
}

// A long poll returns as soon as a message arrives.
func TestConformanceLongPoll(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{})
		go func() {
			time.Sleep(300 * time.Millisecond)
			_, _ = b.c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("late")})
		}()
		start := time.Now()
		got := b.receive(q.URL, 10, 10, 30)
		if d := time.Since(start); len(got) != 1 || d > 5*time.Second {
			t.Errorf("long poll returned %q after %s", bodies(got), d)
		}
		// A cancelled context ends a long poll early.
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err := b.c.ReceiveMessage(cctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 10})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
			t.Errorf("cancelled long poll: err = %v after %s", err, time.Since(start))
		}
	})
}

// A deleted message stays deleted: deleting it again with the handle that
// deleted it succeeds, a visibility change with that handle fails as the
// caller's fault, and it is never received again. The Fake, which frees
// deleted messages, also keeps an earlier receive's handle invalid.
func TestConformanceDeletedMessage(t *testing.T) {
	conform(t, func(t *testing.T, b *backend) {
		q := b.newQueue(localtest.QueueOptions{})
		b.send(q.URL, "", "once", "twice")
		got := b.receiveN(q.URL, 2, 60)
		var once, first types.Message
		for _, m := range got {
			if aws.ToString(m.Body) == "once" {
				once = m
			} else {
				first = m
			}
		}
		b.changeVisibility(q.URL, 0, aws.ToString(first.ReceiptHandle))
		second := b.receiveN(q.URL, 1, 60)[0]
		latest := []string{aws.ToString(once.ReceiptHandle), aws.ToString(second.ReceiptHandle)}
		for i := range 2 {
			if out := b.deleteBatch(q.URL, latest...); len(out.Successful) != 2 || len(out.Failed) != 0 {
				t.Errorf("delete %d with the latest handles: %d successful, failed %+v", i+1, len(out.Successful), out.Failed)
			}
		}
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.URL}
		for i, h := range latest {
			in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 10})
		}
		out, err := b.c.ChangeMessageVisibilityBatch(ctx, in)
		if err != nil {
			t.Fatalf("ChangeMessageVisibilityBatch: %v", err)
		}
		if len(out.Failed) != 2 || len(out.Successful) != 0 {
			t.Errorf("visibility change of deleted messages: %d successful, %d failed; want 2 failed", len(out.Successful), len(out.Failed))
		}
		for _, f := range out.Failed {
			if !f.SenderFault {
				t.Errorf("visibility change of a deleted message: %s not a sender fault", aws.ToString(f.Code))
			}
			// SQS and the Fake answer InvalidParameterValue, the
			// emulator ReceiptHandleIsInvalid.
			t.Logf("visibility change of a deleted message: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
		}
		if !b.emulator {
			// The emulator accepts outdated handles (see above).
			out := b.deleteBatch(q.URL, aws.ToString(first.ReceiptHandle))
			if len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" || !out.Failed[0].SenderFault {
				t.Errorf("delete with an earlier receive's handle of a deleted message: %+v", out)
			}
		}
		if v, f, d := b.depth(q.URL); v+f+d != 0 {
			t.Errorf("depth %d, %d, %d after delete", v, f, d)
		}
		if m := b.receive(q.URL, 10, 1, 60); len(m) != 0 {
			t.Errorf("received %q after delete", bodies(m))
		}
	})
}

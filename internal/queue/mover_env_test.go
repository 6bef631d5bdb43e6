package queue

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// countingSender counts the SendMessage calls a Mover makes: operations,
// not the SDK's attempts, which include its own retries.
type countingSender struct {
	Sender
	n atomic.Int32
}

func (s *countingSender) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	s.n.Add(1)
	return s.Sender.SendMessage(ctx, in, opts...)
}

// receiveEventually receives a message from the queue at url, polling for up
// to 30s. The visibility timeout of each receive is 1s: with the emulator, a
// receive's response is at times lost on the way (the SDK retries the
// receive, which finds the queue empty), and the message it carried then
// comes back after a second instead of the queue's 30s.
func receiveEventually(t *testing.T, c *sqs.Client, url string) *sqsworker.Message {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := c.ReceiveMessage(t.Context(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(url), MaxNumberOfMessages: 1, WaitTimeSeconds: 2, VisibilityTimeout: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			t.Fatalf("receiving from %s: %v", url, err)
		}
		if len(out.Messages) > 0 {
			return sqsmsg.FromSDK(url, &out.Messages[0])
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in %s after 30s", url)
		}
	}
}

// TestMoverLargeMessageEmulator moves a message of 1 MiB minus a few bytes,
// really received from a queue of the local emulator, to its dead-letter
// queue: the copy goes with one SendMessage, without the failure metadata,
// which has no room, and reads back whole. It then moves messages whose
// metadata lands exactly at the 1 MiB limit, or one byte over, to check that
// the mover counts sizes as the emulator does.
func TestMoverLargeMessageEmulator(t *testing.T) {
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	ctx := t.Context()

	info, err := Load(ctx, c, q.URL)
	if err != nil || info.DeadLetterURL == "" {
		t.Fatalf("Load = %+v, %v", info, err)
	}
	limit, err := LoadMaxMessageSize(ctx, c, info.DeadLetterURL)
	if err != nil || limit != sqsworker.MaxMessageSize {
		t.Fatalf("LoadMaxMessageSize = %d, %v; want %d", limit, err, sqsworker.MaxMessageSize)
	}
	api := &countingSender{Sender: c}
	mv := testMover(api, info.DeadLetterURL)
	mv.MaxMessageSize = limit

	own := map[string]types.MessageAttributeValue{"trace-id": {DataType: aws.String("String"), StringValue: aws.String("t-42")}}
	body := strings.Repeat("x", sqsworker.MaxMessageSize-len("trace-id")-len("String")-len("t-42")-5)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: &body, MessageAttributes: own}); err != nil {
		t.Fatalf("sending %d bytes: %v", len(body), err)
	}
	m := receiveEventually(t, c, q.URL)
	if len(m.Body) != len(body) || m.MessageAttributes["trace-id"].StringValue != "t-42" || m.ReceiveCount < 1 {
		t.Fatalf("received %d bytes, attributes %v, receive count %d", len(m.Body), m.MessageAttributes, m.ReceiveCount)
	}
	ok, err := mv.Move(ctx, m, errBadPayload)
	if err != nil || ok {
		t.Fatalf("Move = %v, %v; want false (no room for metadata), nil", ok, err)
	}
	if n := api.n.Load(); n != 1 {
		t.Errorf("%d SendMessage calls, want 1", n)
	}
	checkCopy(t, receiveEventually(t, c, info.DeadLetterURL), m, "none")

	// At the limit, and one byte over: the mover and the emulator must agree
	// to the byte. Each case has a dead-letter queue of its own.
	ownSize := sqsworker.MessageSize("", testMessage("").MessageAttributes)
	fields, json := metadataSizes(t, mv, testMessage(""), errBadPayload)
	for _, tc := range []struct {
		name string
		body int
		form string
	}{
		{"fields exactly at the limit", limit - ownSize - fields, "fields"},
		{"one byte over for the fields", limit - ownSize - fields + 1, "json"},
		{"JSON exactly at the limit", limit - ownSize - json, "json"},
		{"one byte over for the JSON", limit - ownSize - json + 1, "none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dlq := localtest.NewQueue(t, c, localtest.QueueOptions{}).URL
			api := &countingSender{Sender: c}
			mv := testMover(api, dlq)
			m := testMessage(strings.Repeat("y", tc.body))
			ok, err := mv.Move(ctx, m, errBadPayload)
			if err != nil || ok != (tc.form != "none") {
				t.Fatalf("Move = %v, %v", ok, err)
			}
			if n := api.n.Load(); n != 1 {
				t.Errorf("%d SendMessage calls, want 1", n)
			}
			checkCopy(t, receiveEventually(t, c, dlq), m, tc.form)
		})
	}
}

// TestMoverRetryEmulator: the emulator refuses, as SQS does, a copy with
// metadata over a dead-letter queue's MaximumMessageSize that the mover did
// not know of; the mover sends it again without metadata.
func TestMoverRetryEmulator(t *testing.T) {
	c := localtest.NewSQS(t)
	ctx := t.Context()
	name := localtest.UniqueName(t, false)
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{"MaximumMessageSize": "2048"}})
	if err != nil {
		t.Fatalf("creating queue: %v", err)
	}
	dlq := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &dlq}) })

	api := &countingSender{Sender: c}
	mv := testMover(api, dlq) // MaxMessageSize unknown: 1 MiB assumed
	m := testMessage(strings.Repeat("x", 2000))
	ok, err := mv.Move(ctx, m, errBadPayload)
	if err != nil || ok {
		t.Fatalf("Move = %v, %v; want false, nil", ok, err)
	}
	if n := api.n.Load(); n != 2 {
		t.Errorf("%d SendMessage calls, want 2 (refused with metadata, sent without)", n)
	}
	checkCopy(t, receiveEventually(t, c, dlq), m, "none")

	// Too large even without metadata: SQS's error, after one retry.
	api.n.Store(0)
	ok, err = mv.Move(ctx, testMessage(strings.Repeat("x", 2100)), errBadPayload)
	var apiErr smithy.APIError
	if ok || !errors.As(err, &apiErr) || !isInvalidParameter(err) {
		t.Fatalf("Move(too large) = %v, %v; want false, InvalidParameterValue", ok, err)
	}
	if n := api.n.Load(); n != 2 {
		t.Errorf("%d SendMessage calls, want 2", n)
	}
}

// TestMoverFairQueueEmulator moves a fair queue's message (a standard
// queue's, with a group: its tenant) to a standard dead-letter queue of the
// emulator: the copy goes with its group, which the emulator accepts
// as SQS does, and arrives with its body and metadata. The emulator does not
// return a standard queue's MessageGroupId: TestMoverRetriesWithoutMetadata
// checks on the fake that the copy keeps it.
func TestMoverFairQueueEmulator(t *testing.T) {
	c := localtest.NewSQS(t)
	ctx := t.Context()
	dlq := localtest.NewQueue(t, c, localtest.QueueOptions{}).URL
	m := testMessage("job")
	m.GroupID = "tenant-a"
	api := &countingSender{Sender: c}
	ok, err := testMover(api, dlq).Move(ctx, m, errBadPayload)
	if err != nil || !ok {
		t.Fatalf("Move = %v, %v; want true, nil", ok, err)
	}
	if n := api.n.Load(); n != 1 {
		t.Errorf("%d SendMessage calls, want 1", n)
	}
	checkCopy(t, receiveEventually(t, c, dlq), m, "fields")
}

// A copy with no room for failure metadata but room for a key, on the local
// SQS: it carries the job's key (idempotency-key, the key DefaultKey gives
// the original), so that its replay keeps the job's key, and two copies of
// one job (a move sent again after its reply was lost, an original left by
// a crash and moved by SQS) run it once. A copy whose message has its ten
// attributes goes without. Before, a copy without metadata went without a
// key, and its replay was keyed by its own message ID in the dead-letter
// queue.
func TestMoverKeysACopyWithoutMetadataEmulator(t *testing.T) {
	c := localtest.NewSQS(t)
	ctx := t.Context()
	mv := testMover(c, "")
	ownSize := sqsworker.MessageSize("", testMessage("").MessageAttributes)
	_, json := metadataSizes(t, mv, testMessage(""), errBadPayload)
	full := testMessage("job")
	for i := len(full.MessageAttributes); i < sqsworker.MaxMessageAttributes; i++ {
		full.MessageAttributes[strings.Repeat("a", i+1)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	for _, tc := range []struct {
		name string
		m    *sqsworker.Message
		key  string
	}{
		{"room for the key", testMessage(strings.Repeat("y", sqsworker.MaxMessageSize-ownSize-json+1)), "message-id:" + testMessage("").ID},
		{"ten attributes", full, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dlq := localtest.NewQueue(t, c, localtest.QueueOptions{}).URL
			mv := testMover(c, dlq)
			ok, err := mv.Move(ctx, tc.m, errBadPayload)
			if err != nil || ok {
				t.Fatalf("Move = %v, %v; want false (no room for metadata), nil", ok, err)
			}
			got := receiveEventually(t, c, dlq)
			if k := got.MessageAttributes["idempotency-key"].StringValue; k != tc.key {
				t.Errorf("the copy's idempotency-key is %q, want %q", k, tc.key)
			}
			if _, ok := sqsworker.ParseFailure(got.MessageAttributes); ok {
				t.Errorf("the copy has failure metadata")
			}
		})
	}
}

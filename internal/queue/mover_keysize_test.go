package queue

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// replayedAtTheLimit returns a replayed job (see replayedMessage) whose
// dead-letter copy reaches limit bytes with mv's failure metadata: the
// idempotency-key attribute Move adds for it takes the copy over.
func replayedAtTheLimit(t *testing.T, mv *Mover, limit int, cause error) *sqsworker.Message {
	t.Helper()
	m := replayedMessage("")
	attrs, ok := mv.failure(m, cause).AddWithin("", m.MessageAttributes, limit)
	if !ok {
		t.Fatal("no room for the metadata")
	}
	m.Body = strings.Repeat("x", limit-sqsworker.MessageSize("", attrs))
	return m
}

// checkKeptMetadata checks that got, the dead-letter copy of m, kept its
// failure metadata (which names m, the message that failed, and its source
// queue), though it has no room for the idempotency-key attribute.
func checkKeptMetadata(t *testing.T, got, m *sqsworker.Message) {
	t.Helper()
	f, ok := sqsworker.ParseFailure(got.MessageAttributes)
	if !ok || f.MessageID != m.ID || f.SourceQueue == "" {
		t.Errorf("copy's failure metadata %+v, %v: want it kept, naming %s (the key, for which SQS refused the copy, left out instead)", f, ok, m.ID)
	}
	if k := idempotency.DefaultKey(got); k != "message-id:"+m.ID {
		t.Errorf("copy's key %q", k)
	}
}

// A replayed job dead-lettered again whose copy fits the dead-letter
// queue's MaximumMessageSize (not known to the mover, as in the runtimes)
// with its failure metadata, but not with the idempotency-key attribute
// beside it, keeps the metadata: SQS refuses the copy with the key, and
// the mover sends it again without the key, not without the metadata.
func TestMoverKeyOverSizeKeepsMetadata(t *testing.T) {
	f := sqstest.NewFake()
	dlq := f.CreateQueue("jobs-dlq", map[string]string{"MaximumMessageSize": "2048"})
	mv := testMover(f, dlq)
	cause := sqsworker.Permanent(errors.New("bad order"))
	m := replayedAtTheLimit(t, mv, 2048, cause)
	ok, err := mv.Move(t.Context(), m, cause)
	if err != nil || !ok {
		t.Errorf("Move = %v, %v; want true, nil", ok, err)
	}
	checkKeptMetadata(t, receiveOne(t, f, dlq), m)
}

// TestMoverKeyOverSizeKeepsMetadata on the emulator.
func TestMoverKeyOverSizeKeepsMetadataEmulator(t *testing.T) {
	c := localtest.NewSQS(t)
	ctx := t.Context()
	name := localtest.UniqueName(t, false)
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{"MaximumMessageSize": "2048"}})
	if err != nil {
		t.Fatalf("creating queue: %v", err)
	}
	dlq := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &dlq}) })
	mv := testMover(c, dlq)
	cause := sqsworker.Permanent(errors.New("bad order"))
	m := replayedAtTheLimit(t, mv, 2048, cause)
	ok, err := mv.Move(ctx, m, cause)
	if err != nil || !ok {
		t.Errorf("Move = %v, %v; want true, nil", ok, err)
	}
	checkKeptMetadata(t, receiveEventually(t, c, dlq), m)
}

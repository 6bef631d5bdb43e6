package queue

import (
	"errors"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest"
)

// replayedMessage is testMessage as `dlq replay` leaves a job that failed
// before: no idempotency-key attribute, and the failure metadata of its
// earlier dead-letter copy, naming the message it was, which is what the
// idempotency middleware's DefaultKey gives it.
func replayedMessage(body string) *sqsworker.Message {
	m := testMessage(body)
	m.MessageAttributes, _ = sqsworker.Failure{ErrorClass: "c", Error: "boom", MessageID: "first-message-id"}.AddTo(m.MessageAttributes)
	return m
}

// A replayed job that fails again is dead-lettered under the same key: its
// new failure metadata names the replayed message (the one that failed), so
// the copy carries the key DefaultKey gave the job as an idempotency-key
// attribute. Else a replay of this copy, beside the job itself left by a
// crash between the copy and the delete (which then succeeds), would apply
// the effect again under a key of its own. With no room for the key (ten
// attributes, or a message at the size limit) the copy goes without it:
// the move never fails for it.
func TestMoverKeepsAReplayedJobsKey(t *testing.T) {
	f := sqstest.NewFake()
	dlq := f.CreateQueue("jobs-dlq", nil)
	mv := testMover(f, dlq)
	cause := sqsworker.Permanent(errors.New("bad order"))

	m := replayedMessage("job")
	if k := idempotency.DefaultKey(m); k != "message-id:first-message-id" {
		t.Fatalf("the replayed job's key is %q", k)
	}
	if _, err := mv.Move(t.Context(), m, cause); err != nil {
		t.Fatal(err)
	}
	got := receiveOne(t, f, dlq)
	if k := idempotency.DefaultKey(got); k != "message-id:first-message-id" {
		t.Errorf("the dead-letter copy's key is %q, want message-id:first-message-id", k)
	}
	if fl, ok := sqsworker.ParseFailure(got.MessageAttributes); !ok || fl.MessageID != m.ID {
		t.Errorf("failure metadata %+v, %v: want it to name the message that failed, %s", fl, ok, m.ID)
	}

	// No room for the key beside the new failure metadata: the copy keeps
	// the metadata, without the key, and the move goes through.
	nine := testMessage("job")
	for i := 1; i < sqsworker.MaxMessageAttributes-1; i++ {
		nine.MessageAttributes[strings.Repeat("a", i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	nine.MessageAttributes, _ = sqsworker.Failure{ErrorClass: "c", MessageID: "first-message-id"}.AddTo(nine.MessageAttributes)
	if _, err := mv.Move(t.Context(), nine, cause); err != nil {
		t.Fatal(err)
	}
	if got := receiveOne(t, f, dlq); form(got.MessageAttributes) != "json" {
		t.Errorf("nine attributes of its own: failure metadata %s, want json (the key left out for it)", form(got.MessageAttributes))
	}
	full := replayedMessage("")
	full.Body = strings.Repeat("x", sqsworker.MaxMessageSize-sqsworker.MessageSize("", full.MessageAttributes))
	if _, err := mv.Move(t.Context(), full, cause); err != nil {
		t.Errorf("at the size limit: %v", err)
	}
}

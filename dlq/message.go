package dlq

import (
	"sort"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// AttrReplays is the Number message attribute that counts how many times a
// replay sent a message back from a dead-letter queue.
const AttrReplays = "sqsworker.replays"

// Message is one message of a dead-letter queue, with the failure metadata
// the runtimes add to the messages they dead-letter.
type Message struct {
	// Message is the message as the runtimes see messages: ID (its ID in
	// the dead-letter queue), body, system and message attributes, FIFO
	// group. Its message attributes are those its handler saw: a waiting
	// copy's packed ones unpacked (see sqsworker.AttrPackedAttributes),
	// which filters and listings match and show; a replay sends the
	// message as it is stored. Its ReceiptHandle is the one of the scan
	// that read it, which released it at its end.
	sqsworker.Message
	// Failure is the failure metadata, when HasFailure.
	Failure sqsworker.Failure
	// HasFailure is true when the message carries sqsworker failure
	// metadata.
	HasFailure bool
	// Replays is the message's replay count (the [AttrReplays] attribute):
	// 0 for a message never replayed.
	Replays int
	// RedriveSource is the ARN of the queue SQS's own redrive moved the
	// message from (the DeadLetterQueueSourceArn system attribute, which
	// only SQS sets); empty for a message sent to the dead-letter queue,
	// such as the runtimes' copies.
	RedriveSource string
	// Unverified says why the failure metadata cannot be trusted: it names
	// a source queue that does not send its dead letters to this queue, or
	// the message was moved here by SQS's redrive, not by a runtime, so its
	// metadata came with it (from an earlier failure, or from whoever sent
	// it). Empty when the metadata was checked, or when there is none. The
	// metadata is attribute values anyone allowed to send to the source or
	// dead-letter queue can set: a replay never takes its destination from
	// unverified metadata.
	Unverified string
	// DuplicateOf is the ID of a message read before this one, by the same
	// scan or replay, that is a copy of the same message of the source
	// queue: the same original message ID and source queue in the failure
	// metadata, the same body and the same message attributes but the
	// failure metadata (such copies arise when the reply to a runtime's
	// dead-letter send is lost and the SDK sends it again). Empty
	// otherwise. A replay moves one copy of a job and deletes the others.
	DuplicateOf string

	raw types.Message
}

func newMessage(queueURL string, m types.Message) *Message {
	d := &Message{raw: m, Message: *sqsmsg.Unpacked(sqsmsg.FromSDK(queueURL, &m))}
	d.Failure, d.HasFailure = sqsworker.ParseFailure(d.MessageAttributes)
	if v, ok := d.Attribute(AttrReplays); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			d.Replays = int(f)
		}
	}
	d.RedriveSource = d.Attributes[sqsworker.AttrDeadLetterSource]
	return d
}

// Redriven reports whether SQS's own redrive moved m here (RedriveSource
// is set). Its failure metadata, if any, is then of an earlier failure (a
// replayed copy keeps its original's), not of the one that brought it
// here, which SQS does not say: the filters on the failure
// ([Filter.ErrorClasses], Since, Until) never select it, and summaries by
// error class should not count it under the class its metadata names.
func (m *Message) Redriven() bool { return m.RedriveSource != "" }

// OriginalID is the ID of the message in the queue it failed in: from the
// failure metadata, else the dead-letter message's own ID.
func (m *Message) OriginalID() string {
	if m.HasFailure && m.Failure.MessageID != "" {
		return m.Failure.MessageID
	}
	return m.ID
}

// Verified reports whether the message has failure metadata that was
// checked: its source queue sends its dead letters to this queue, and the
// message was not moved here by SQS's redrive.
func (m *Message) Verified() bool { return m.HasFailure && m.Unverified == "" }

// claimedSource is the queue a replay would send m to without a
// destination of its own, and whether that comes from SQS itself: the
// queue SQS's redrive moved it from, else the one its failure metadata
// names.
func (m *Message) claimedSource() (ref string, fromSQS bool) {
	if m.RedriveSource != "" {
		return m.RedriveSource, true
	}
	if m.HasFailure {
		return m.Failure.SourceQueue, false
	}
	return "", false
}

// SortMessages orders messages by failure time, then original ID and ID,
// so that listings are the same from one run to the next whatever order SQS
// returned the messages in. Messages without a failure time come first.
func SortMessages(ms []*Message) {
	sort.SliceStable(ms, func(i, j int) bool {
		a, b := ms[i], ms[j]
		if !a.Failure.FailedAt.Equal(b.Failure.FailedAt) {
			return a.Failure.FailedAt.Before(b.Failure.FailedAt)
		}
		if a.OriginalID() != b.OriginalID() {
			return a.OriginalID() < b.OriginalID()
		}
		return a.ID < b.ID
	})
}

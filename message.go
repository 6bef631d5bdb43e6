package sqsworker

import "time"

// Message is one SQS message as a handler sees it, built by the runtimes from
// the SDK's types.Message or from a Lambda events.SQSMessage.
//
// A handler must not keep a Message, or anything it points to, after it
// returns.
type Message struct {
	// ID is the message ID SQS assigned when the message was sent.
	ID string
	// Body is the message body, exactly as sent.
	Body string
	// ReceiptHandle identifies this receive of the message; it changes on
	// every receive.
	ReceiptHandle string
	// Attributes holds the system attributes SQS returned, such as
	// "ApproximateReceiveCount" and "SentTimestamp".
	Attributes map[string]string
	// MessageAttributes holds the attributes the producer set.
	MessageAttributes map[string]MessageAttribute
	// ReceiveCount is the number of times the message has been received,
	// this receive included (SQS's ApproximateReceiveCount): 1 on the first
	// attempt.
	ReceiveCount int
	// SentAt is when SQS accepted the message (SentTimestamp).
	SentAt time.Time
	// FirstReceivedAt is when the message was first received
	// (ApproximateFirstReceiveTimestamp).
	FirstReceivedAt time.Time
	// GroupID is the message group of a FIFO queue's message; empty on
	// standard queues.
	GroupID string
	// DeduplicationID is the deduplication ID of a FIFO queue's message.
	DeduplicationID string
	// QueueURL is the URL of the queue the message was received from.
	QueueURL string
}

// MessageAttribute is a producer-set attribute of a [Message].
type MessageAttribute struct {
	// DataType is "String", "Number" or "Binary", optionally followed by a
	// custom type label such as "String.json".
	DataType string
	// StringValue holds the value of String and Number attributes.
	StringValue string
	// BinaryValue holds the value of Binary attributes.
	BinaryValue []byte
}

// Attribute returns the string value of the message attribute name, and
// whether the message has it.
func (m *Message) Attribute(name string) (string, bool) {
	a, ok := m.MessageAttributes[name]
	return a.StringValue, ok
}

// Names of the SQS system attributes the runtimes read.
const (
	AttrReceiveCount     = "ApproximateReceiveCount"
	AttrSentTimestamp    = "SentTimestamp"
	AttrFirstReceived    = "ApproximateFirstReceiveTimestamp"
	AttrMessageGroupID   = "MessageGroupId"
	AttrDeduplicationID  = "MessageDeduplicationId"
	AttrSequenceNumber   = "SequenceNumber"
	AttrAWSTraceHeader   = "AWSTraceHeader"
	AttrSenderID         = "SenderId"
	AttrDeadLetterSource = "DeadLetterQueueSourceArn"
)

package sqsworker

import (
	"strings"
	"time"
)

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
	// Attributes holds the message's system attributes, by name (see the
	// Attr constants), as SQS returned them; nil when there are none. The
	// worker asks SQS for all of them: ApproximateReceiveCount,
	// ApproximateFirstReceiveTimestamp, SentTimestamp and SenderId; on FIFO
	// queues MessageGroupId, MessageDeduplicationId and SequenceNumber;
	// AWSTraceHeader when the message has an X-Ray trace header; and
	// DeadLetterQueueSourceArn on a message SQS's redrive moved to a
	// dead-letter queue. On Lambda they are the event record's attributes,
	// which Lambda fills with the same names. The typed fields below are
	// read from them.
	Attributes map[string]string
	// MessageAttributes holds the message attributes the producer set, all
	// of them; nil when there are none. A copy the runtimes moved to a
	// dead-letter queue also has its failure metadata here (see
	// [ParseFailure]). A waiting copy of a job sent with ten attributes
	// packs them into one ([AttrPackedAttributes]), unpacked before the
	// handler sees them: the handler then sees, besides the job's ten, the
	// copy's own ([AttrNotBefore], [AttrPriorAttempts], its idempotency
	// key), more than SQS takes in one message. A handler that forwards
	// them to a message of its own leaves those three out.
	MessageAttributes map[string]MessageAttribute
	// ReceiveCount is the number of times the message has been received,
	// this receive included (SQS's ApproximateReceiveCount): 1 on the first
	// attempt. On a copy the runtimes sent for a backoff longer than 12
	// hours it adds the attempts of the earlier copies
	// ([AttrPriorAttempts]), so that it is the attempt number all the same;
	// Attributes keeps SQS's own count.
	ReceiveCount int
	// SentAt is when SQS accepted the message (SentTimestamp).
	SentAt time.Time
	// FirstReceivedAt is when the message was first received
	// (ApproximateFirstReceiveTimestamp).
	FirstReceivedAt time.Time
	// GroupID is the message group of a FIFO queue's message, or of a
	// fair queue's (a standard queue's message sent with a group, which
	// keeps no order); empty on other standard queues' messages.
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

// MaxMessageSize is the largest message SQS accepts, in bytes, counted by
// [MessageSize]: 1 MiB. It is also the default, and the highest possible,
// MaximumMessageSize of a queue.
const MaxMessageSize = 1 << 20

// MessageSize returns the size of a message as SQS counts it against a
// queue's MaximumMessageSize: the bytes of the body plus, for every message
// attribute, the bytes of its name, its data type and its value (StringValue,
// or BinaryValue for Binary types, as the runtimes send them). System
// attributes, such as AWSTraceHeader, do not count.
func MessageSize(body string, attrs map[string]MessageAttribute) int {
	return len(body) + attributesSize(attrs)
}

func attributesSize(attrs map[string]MessageAttribute) int {
	n := 0
	for name, a := range attrs {
		n += len(name) + len(a.DataType)
		if strings.HasPrefix(a.DataType, "Binary") {
			n += len(a.BinaryValue)
		} else {
			n += len(a.StringValue)
		}
	}
	return n
}

// Attribute returns the string value of the message attribute name, and
// whether the message has it.
func (m *Message) Attribute(name string) (string, bool) {
	a, ok := m.MessageAttributes[name]
	return a.StringValue, ok
}

// Names of SQS system attributes: the keys of [Message.Attributes].
const (
	// AttrReceiveCount is read into [Message.ReceiveCount].
	AttrReceiveCount = "ApproximateReceiveCount"
	// AttrSentTimestamp (milliseconds since the epoch) is read into
	// [Message.SentAt].
	AttrSentTimestamp = "SentTimestamp"
	// AttrFirstReceived (milliseconds since the epoch) is read into
	// [Message.FirstReceivedAt].
	AttrFirstReceived = "ApproximateFirstReceiveTimestamp"
	// AttrMessageGroupID is read into [Message.GroupID].
	AttrMessageGroupID = "MessageGroupId"
	// AttrDeduplicationID is read into [Message.DeduplicationID].
	AttrDeduplicationID = "MessageDeduplicationId"
	// AttrSequenceNumber is the sequence number SQS gave a FIFO queue's
	// message; the runtimes do not use it.
	AttrSequenceNumber = "SequenceNumber"
	// AttrAWSTraceHeader is the X-Ray trace header; the runtimes give it to
	// the message's dead-letter copy (and the otel module links spans
	// through it).
	AttrAWSTraceHeader = "AWSTraceHeader"
	// AttrSenderID is the IAM user or role that sent the message; the
	// runtimes do not use it.
	AttrSenderID = "SenderId"
	// AttrDeadLetterSource is the ARN of the queue SQS's redrive moved the
	// message from (not set on the runtimes' own dead-letter copies, which
	// name it in their failure metadata); the runtimes do not use it.
	AttrDeadLetterSource = "DeadLetterQueueSourceArn"
)

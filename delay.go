package sqsworker

import (
	"strconv"
	"time"
)

// Delays of any length. SQS delays a message by 15 minutes at most
// ([MaxMessageDelay]) and keeps a received one invisible for 12 hours at most
// ([MaxVisibilityTimeout]). A job that must wait longer (a producer's send at
// a time, a backoff or a RetryAfter above 12 hours) carries the time it may
// run in the message attribute [AttrNotBefore]; the runtimes hold such a
// message back, without running the handler and without counting an attempt,
// until that time. See the package documentation of the worker for how, and
// for the requests it costs.
const (
	// AttrNotBefore is the message attribute that holds a job back until
	// a time: a Number, in milliseconds since the Unix epoch. The producer
	// sets it for delays above MaxMessageDelay; the runtimes set it on the
	// copies they send while a job waits. Other producers may set it too:
	// a value that is not a positive whole number is ignored (the job runs
	// at once), and a time more than MaxDelay after the message was sent
	// is cut to that.
	AttrNotBefore = "sqsworker.not-before"
	// AttrPriorAttempts is the message attribute that carries the failed
	// attempts of earlier copies of a job (a Number), set by the runtimes
	// on the copy they send for a backoff longer than a visibility timeout
	// can hold: [Message.ReceiveCount] adds it, so that backoff and
	// dead-letter decisions count every real attempt. The copy a job
	// waits in on its last receive, without an attempt (postponed,
	// released, a dependency down), carries at most the queue's
	// maxReceiveCount less 2 (at least 1): SQS does not tell its earlier
	// receives spent waiting from attempts. The runtimes leave
	// it out of dead-letter copies, and `sqsworker dlq replay` out of the
	// copies it sends back; an SQS message move task is not documented to
	// drop it, which is why `dlq redrive` looks for it first (see the dlq
	// package).
	AttrPriorAttempts = "sqsworker.prior-attempts"
	// AttrPackedAttributes holds, as one JSON String attribute, message
	// attributes of a job's own that the runtimes packed into it on a
	// waiting copy: SQS takes ten message attributes, and a job with ten
	// of its own leaves no room for the copy's idempotency key, time and
	// prior attempts, which stay beside it. The runtimes unpack it before
	// the handler sees the message, which then has every attribute it was
	// sent with, and the runtimes' own. Its value maps each name to its
	// data type ("t"), string value ("s") and binary value ("b", base64).
	// The name is reserved, as every name beginning with "sqsworker." is:
	// a message sent with it, whose value parses so, is taken for a packed
	// one (the producer refuses such names).
	AttrPackedAttributes = "sqsworker.attributes"
	// MaxMessageDelay is the longest delay SQS gives a message when it is
	// sent (DelaySeconds): 15 minutes.
	MaxMessageDelay = 15 * time.Minute
	// MaxDelay is the longest the runtimes hold a job back: 365 days. A
	// longer delay, backoff or RetryAfter is cut to it.
	MaxDelay = 365 * 24 * time.Hour
)

// NotBefore returns the time the message may run, from its [AttrNotBefore]
// attribute, and whether it has a valid one.
func (m *Message) NotBefore() (time.Time, bool) {
	v, ok := m.Attribute(AttrNotBefore)
	if !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// NotBeforeAttribute returns the [AttrNotBefore] attribute that holds a job
// back until t (rounded up to the next millisecond).
func NotBeforeAttribute(t time.Time) MessageAttribute {
	ms := t.UnixMilli()
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return MessageAttribute{DataType: "Number", StringValue: strconv.FormatInt(ms, 10)}
}

// PriorAttempts returns the failed attempts of the message's earlier copies,
// from its [AttrPriorAttempts] attribute: 0 when it has none or a value that
// is not a whole number, and at most 1,048,576 (so that adding a receive
// count cannot overflow).
func (m *Message) PriorAttempts() int {
	v, ok := m.Attribute(AttrPriorAttempts)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return min(n, maxPriorAttempts)
}

// maxPriorAttempts bounds PriorAttempts.
const maxPriorAttempts = 1 << 20

// ClampLongDelay limits d to [0, MaxDelay].
func ClampLongDelay(d time.Duration) time.Duration {
	return min(max(d, 0), MaxDelay)
}

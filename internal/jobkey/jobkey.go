// Package jobkey is the idempotency key a job keeps across its copies
// (waiting copies, dead-letter copies, replays): the message attribute it
// travels in, and the key of a job whose messages carry none. The
// idempotency middleware, the producer, the runtimes and the dead-letter
// tools all derive it here, so that every copy of a job gets the same one.
package jobkey

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/sqsworker/sqsworker"
)

// Attribute is the message attribute that carries a job's idempotency key.
const Attribute = "idempotency-key"

// MaxSize is the longest idempotency key, in bytes, that the idempotency
// middleware takes (its MaxKeySize); the producer refuses a longer one.
const MaxSize = 1024

// OfAttribute returns the key a's value gives, a being a message's
// Attribute: its string value, or a Binary one as "binary:" and its bytes
// in hex; "" when it has neither.
func OfAttribute(a sqsworker.MessageAttribute) string {
	if a.StringValue != "" {
		return a.StringValue
	}
	if len(a.BinaryValue) > 0 {
		return "binary:" + hex.EncodeToString(a.BinaryValue)
	}
	return ""
}

// OfID returns the key of a job without an Attribute whose first message
// had the ID id.
func OfID(id string) string { return "message-id:" + id }

// Default returns the key of m's job when m has no Attribute: OfID of the
// message m's failure metadata names (a replayed job's first message), else
// of m itself.
func Default(m *sqsworker.Message) string {
	if f, ok := sqsworker.ParseFailure(m.MessageAttributes); ok && f.MessageID != "" {
		return OfID(f.MessageID)
	}
	return OfID(m.ID)
}

// Of returns the key of m's job: its Attribute's, else Default's.
func Of(m *sqsworker.Message) string {
	if k := OfAttribute(m.MessageAttributes[Attribute]); k != "" {
		return k
	}
	return Default(m)
}

// GeneratedPrefix begins the keys New generates.
const GeneratedPrefix = "auto:"

// New returns a key for a job sent without one: GeneratedPrefix and 26
// random characters (128 bits), so that the copies of one send (a call the
// SDK sends again after its answer was lost) share it, and no other job
// has it.
func New() string { return GeneratedPrefix + rand.Text() }

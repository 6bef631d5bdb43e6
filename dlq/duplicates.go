package dlq

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strconv"

	"github.com/sqsworker/sqsworker"
)

// jobIdentity returns what makes m a dead-letter copy of one message of its
// source queue, and whether m has such an identity: m was sent here by a
// runtime (its failure metadata names the message it was and its source
// queue; SQS's redrive did not move it), and the identity is that message
// ID and source queue, with the SHA-256 of the body and every message
// attribute but the failure metadata (the idempotency-key among them).
//
// Two messages with the same identity are copies of one message: SQS gives
// every message an ID of its own, and the rest must be equal as well. They
// arise when the reply to a runtime's dead-letter send is lost and the SDK
// sends it again (a standard queue does not deduplicate), or when a
// runtime stops between its dead-letter copy and the delete of the
// original, which then fails again. The failure text and time may differ
// between them, and do not count. Messages of two jobs never share an
// identity.
func jobIdentity(m *Message) (string, bool) {
	if !m.HasFailure || m.Failure.MessageID == "" || m.Failure.SourceQueue == "" || m.RedriveSource != "" {
		return "", false
	}
	h := sha256.New()
	field := func(s string) {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	field(m.Failure.MessageID)
	field(m.Failure.SourceQueue)
	field(m.Body)
	for _, k := range slices.Sorted(maps.Keys(m.MessageAttributes)) {
		if sqsworker.IsFailureAttribute(k) {
			continue
		}
		v := m.MessageAttributes[k]
		field(k)
		field(v.DataType)
		field(v.StringValue)
		field(string(v.BinaryValue))
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// markDuplicate sets m.DuplicateOf when m is a copy of the same message as
// one read before it, whose IDs seen keeps by identity (see jobIdentity),
// and reports whether it did; else it records m in seen.
func markDuplicate(seen map[string]string, m *Message) bool {
	id, ok := jobIdentity(m)
	if !ok {
		return false
	}
	if first, dup := seen[id]; dup && first != m.ID {
		m.DuplicateOf = first
		return true
	}
	seen[id] = m.ID
	return false
}

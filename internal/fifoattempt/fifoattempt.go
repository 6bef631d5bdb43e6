// Package fifoattempt gives the receives of a FIFO queue their
// ReceiveRequestAttemptId, and the ID of a receive that failed to the
// receive that retries it.
//
// SQS answers a FIFO receive sent again with the ID of an earlier one, within
// 5 minutes and while none of the messages it handed that one was modified
// (deleted, its visibility changed), with the same messages and receipt
// handles, and resets their visibility timeout. A receive whose reply was
// lost on the way may have been handed messages: retried with its ID, the
// retry gets them; retried with a new ID, they stay hidden, and their message
// groups blocked, for a visibility timeout, one receive nearer the
// dead-letter queue though no handler saw them.
package fifoattempt

import (
	"crypto/rand"
	"time"
)

// Window is how long after its first send the ID of a failed receive is
// sent again. SQS keeps an ID for 5 minutes; the minute left covers the
// retry's own way there (a long poll, the SDK's retries).
const Window = 4 * time.Minute

// Retry is the attempt ID of a receive loop: one receive after another, not
// safe for concurrent use. The zero value holds none.
type Retry struct {
	id    string
	max   int
	first time.Time
}

// Pending returns the MaxNumberOfMessages of the failed receive whose ID
// [Retry.For] would send again at now, or 0 when there is none.
func (r *Retry) Pending(now time.Time) int {
	if r.id == "" || now.Sub(r.first) >= Window {
		return 0
	}
	return r.max
}

// For returns the ReceiveRequestAttemptId of a receive of up to max
// messages made at now: the failed receive's when it asked for as many
// (SQS answers with what it handed that one: asking for fewer could bring
// more than the caller wants) and was first sent less than [Window] ago;
// otherwise a new one, kept until [Retry.Done].
func (r *Retry) For(max int, now time.Time) string {
	if r.Pending(now) != max {
		*r = Retry{id: rand.Text(), max: max, first: now}
	}
	return r.id
}

// Done forgets the ID once a receive returned, with messages or none: the
// next receive is a new one.
func (r *Retry) Done() { *r = Retry{} }

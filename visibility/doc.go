// Package visibility keeps the messages of long-running jobs invisible while
// their handlers run, so that SQS does not hand them to a second consumer.
//
// An [Extender] tracks the in-flight messages of one queue. Every
// Config.Interval it looks for the messages whose visibility timeout ends
// within Config.Threshold and extends them by Config.Extension with
// ChangeMessageVisibilityBatch: ten messages per call, every due message of
// the queue in the same round. When a round must make a call anyway, it fills
// the call's free entries with the messages due soonest after, so that later
// rounds have less to do.
//
// # Losing the lease
//
// A message's lease is lost when SQS rejects its extension as a sender fault
// (its receipt handle is no longer valid: the message was deleted, or its
// visibility timeout ran out and another consumer received it), when its
// visibility timeout runs out before an extension succeeded, or when its
// total lifetime reaches Config.MaxLifetime (at most SQS's 12 hours from the
// receive). The context that [Extender.Track] returned is then cancelled, with
// a cause that matches [ErrLeaseLost] or [ErrMaxLifetime] under errors.Is; the
// work may by then run elsewhere, so the handler should stop. [Lease.Release],
// called once the message has been handled, cancels the context with
// [ErrReleased] unless it was lost or expired first, so that the cause still
// tells the two apart, and so that the context Track derived it from, which
// outlives every message, keeps nothing of it. Release also waits for an
// extension of the message under way, so that a visibility change sent
// after it is not undone by that extension landing later ([Lease.ReleaseBy]
// bounds that wait, for a runtime with a deadline of its own). An extension SQS
// refuses because it goes past its 12 hours, counted from its own receive
// (earlier than the one the lease was tracked with), ends the lease with
// [ErrMaxLifetime]. Transient
// errors (network, throttling, server faults) are retried in the following
// rounds, while the lease lasts.
//
// # Hooks
//
// Config.OnExtend, and [Lease.OnExtend] for one message, run after every
// successful extension, so that other leases, such as an idempotency record's
// in-progress expiry, can move in step. A handler finds its lease with
// [FromContext].
//
// The worker runtime uses an Extender by default; the Lambda adapter can use
// one for records that run longer than the queue's visibility timeout.
package visibility

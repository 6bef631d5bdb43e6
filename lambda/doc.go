// Package lambda runs a sqsworker.Handler as an AWS Lambda function behind an
// SQS event source mapping, unchanged from the worker runtime:
//
//	func main() {
//		lambda.Start(handler, lambda.Config{})
//	}
//
// The event source mapping must have ReportBatchItemFailures on (the infra
// constructs set it): the function returns the records that failed in
// batchItemFailures, and Lambda deletes the others. The function cannot
// tell whether it is on: without it, Lambda ignores batchItemFailures and
// deletes every record of a batch the function returns without error, so
// failed records are lost, neither retried nor dead-lettered.
//
// # Outcomes
//
// Records become sqsworker.Message values with every field the worker fills;
// the queue URL comes from the record's eventSourceARN. After the handlers
// ran, and before the function returns:
//
//   - a failed record is reported in batchItemFailures, and its visibility
//     timeout set (ChangeMessageVisibilityBatch, ten per call) to the Backoff
//     delay for its receive count, or to its RetryAfter delay, so that it
//     comes back then rather than after the queue's whole visibility timeout;
//   - a Permanent failure, or a failure on the last attempt the queue's
//     redrive policy allows, is copied to the dead-letter queue with the same
//     failure metadata as the worker's (sqsworker.Failure), deleted at once
//     (so that a function killed later in the batch does not leave it to be
//     received again) and reported as handled; if the copy fails, it is
//     reported failed and left to the redrive policy;
//   - a record that succeeds on the last receive the queue's redrive policy
//     allows is deleted at once too, after it is reported handled: a
//     function killed later in the batch would leave it, done, to SQS's
//     redrive on its next receive; should that delete fail, Lambda's, once
//     the function returns, is still to come. It is a request of its own
//     (DeleteMessageBatch of one) for each such record, which with a
//     maxReceiveCount of 1 is every record that succeeds;
//   - a panic is recovered into a *sqsworker.PanicError, a failure;
//   - RetryAfter with a nil error postpones the record without counting it
//     as a failure;
//   - a record whose lease looked lost when its handler returned (the
//     heartbeat found it lost or run out; without a heartbeat, the queue's
//     visibility timeout had passed, counted, as the heartbeat counts it,
//     from Config.BatchingWindow before the invocation, or from when SQS
//     first handed the record out on its first receive, if earlier) is
//     reported failed with its
//     visibility left alone if the handler failed (another consumer may
//     hold it now); if the handler succeeded, its job is done: it is
//     deleted at once and reported handled, the delete landing if SQS
//     still holds it (an extension applied whose reply was lost), so that
//     it is neither run again nor moved to the dead-letter queue by SQS on
//     its last receive;
//   - a record whose sqsworker.AttrNotBefore lies ahead (a job sent for
//     later) is held back without running the handler or counting an
//     attempt: reported failed with a new visibility timeout, or deleted
//     and reported handled once a copy that waits took its place; a backoff or RetryAfter
//     longer than the visibility timeout can hold waits in such a copy too
//     (see "Delays of any length" in package sqsworker).
//
// A batch in which every record failed returns every record in
// batchItemFailures and a nil error: an error would make Lambda count the
// invocation as failed, back off its pollers, and retry the whole batch.
// The function returns an error only when it cannot work at all (an event
// that is not an SQS event): then no handler ran and nothing is deleted. A
// heartbeat setting wrong whatever the queue fails NewHandler, at the cold
// start; one that does not fit the queue's visibility timeout (changed
// since, say) is logged as an error and the records run without the
// heartbeat, rather than failing every invocation alike and spending every
// record's receives toward the dead-letter queue. A queue whose attributes cannot be read
// (throttled, denied, unreachable: a read is given up after the safety
// margin, at least a second, so that an SQS that swallows the function's
// requests does not take the handlers' time) does not stop the batch: the
// records run with the attributes read before, or with Config's DeadLetterQueueURL and
// MaxReceiveCount alone and no heartbeat, and the read is tried again on the
// next invocation. Without the redrive policy the function cannot tell a
// record's last receive from another: it takes each for the last, so that a
// record released or postponed without an attempt (on a standard queue)
// waits in a fresh copy rather than by its visibility, at the cost of a
// send and a delete.
//
// # Concurrency and FIFO
//
// The records of a standard queue run concurrently, at most
// Config.Concurrency at once. On a FIFO queue the records of one message
// group (of one queue) run in order and groups run in parallel; after a failure the rest of
// that group is reported failed (and made visible again at once, behind the
// failed one, even a record whose time has not come: held back in flight,
// it would lock its group, the failed record's retry included, until that
// time; it is held when its turn comes), while other groups go on.
//
// # Deadline
//
// No record starts later than Config.SafetyMargin before the invocation's
// deadline: those left are reported failed and made visible again at once.
// Handlers' contexts end half the margin before the deadline, with the cause
// ErrDeadline, leaving time to report before Lambda stops the function. A
// record cut short that way did not fail: it is made visible again at once,
// never counted as an attempt toward the dead-letter queue. A dead-letter
// move ends before the deadline too, a quarter of the margin before it.
//
// A record released either way on the last receive its redrive policy
// allows would be moved to the dead-letter queue by SQS on its next
// receive, though no handler failed: on a standard queue a fresh copy takes
// its place, carrying the attempts made before, sent by the time the moves
// must end, and the record is deleted at once (reported done). A send that
// fails is sent again, with capped, jittered backoff, until then (or the
// end of the record's lease, with the heartbeat); given up, the record is
// made visible again as above. So is a record postponed on that receive. Records still
// waiting for a slot of Config.Concurrency when the time to start records
// ends are released then, the same way, while there is time for a copy,
// their copies sent together (up to 32 at a time) rather than one after
// another, so that an SQS slow to answer still takes them all. A
// record held back for later (its sqsworker.AttrNotBefore ahead) is held
// back as usual rather than released, so that no copy runs it before its
// time.
// FIFO records keep the release: a copy would go behind the rest of its
// group. A FIFO record that waits without an attempt (its handler found a
// dependency down, or postponed it) on that receive waits in flight
// instead, within the invocation: after its backoff, and once the circuit
// breaker lets it through, it runs again; if the handlers' time ends
// first, it is made visible again as above. Nor is a FIFO record on that
// receive postponed while the breaker is open: it runs, and waits in flight
// that way if its dependency is still down.
//
// A handler that ignores its context, still running then, is left to run:
// the function stops waiting for it and answers with the outcomes of the
// other records, so that Lambda does not time the invocation out and retry
// the whole batch, the records that succeeded included. The record of such
// a handler is reported failed, its visibility left alone (it comes back
// after its visibility timeout, not while its handler may still run), and
// what the handler returns later is ignored, but for a success: Lambda will
// not delete the record, so the handler deletes its message itself, lest
// the job, done, run again. The records that had not started then are
// reported failed and made visible again at once.
//
// # Long records
//
// A visibility heartbeat (package visibility) keeps records invisible while
// they run, for functions whose timeout is longer than the queue's visibility
// timeout; a handler finds its lease with visibility.FromContext, which the
// idempotency middleware uses the same way as in the worker. Invocations
// that run at the same time in one execution environment share a queue's
// heartbeat: one loop extends all their records, from the first of them to
// start until the last ends. A record settled while others of its
// invocation still run stays invisible until they are all settled: one
// done until Lambda deletes it, one failed until its visibility is set to
// its backoff.
//
// The queue's attributes (visibility timeout, redrive policy) are read on the
// first record from that queue, and again once they are Config.QueueRefresh
// old (default 5 minutes), so that a changed queue is seen without a cold
// start.
package lambda

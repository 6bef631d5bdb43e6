// Package sqstest provides an in-memory Amazon SQS for fast unit tests of code
// that consumes SQS through the AWS SDK for Go v2, such as the worker runtime.
//
// [Fake] implements the SQS operations a worker calls (ReceiveMessage,
// DeleteMessageBatch, ChangeMessageVisibilityBatch, SendMessage,
// GetQueueAttributes, GetQueueUrl) and a few more, with the SDK's own input,
// output and error types, so it can stand in for an *sqs.Client behind an
// interface. It needs no network and no emulator, runs in microseconds, and
// lets a test do what no real queue allows:
//
//   - inject failures: [Fake.FailNext] makes whole calls fail (throttling, a
//     network error, a missing queue), [Fake.FailEntries] makes single entries
//     of batch calls fail, retryable or not, [Fake.LoseReplies] applies calls
//     and then loses their replies (a network error: the caller cannot tell
//     that a receive handed out messages, or that a delete deleted);
//   - count calls with [Fake.Calls];
//   - move time with [Fake.Now] and a [Clock], so that visibility timeouts,
//     delays and the FIFO deduplication window pass without waiting;
//   - set raw queue attributes that SQS would refuse, with
//     [Fake.SetAttribute], such as a malformed redrive policy.
//
// The fake follows the documented behaviour of SQS where tests depend on it:
// visibility timeouts and receipt handles (a new handle on every receive, the
// old one invalid: a delete or visibility change with it fails with
// ReceiptHandleIsInvalid, where SQS may also accept it and do nothing),
// receive counts and redrive to a dead-letter queue once
// maxReceiveCount is exceeded, long polling, delays, FIFO ordering and group
// locking — including that SQS returns several messages of one group in a
// single receive, in order, which the local emulator does not do — FIFO
// deduplication, FIFO receive attempt IDs (a receive retried with the
// ReceiveRequestAttemptId of one whose reply was lost gets the same messages
// and receipt handles; the local emulator ignores the ID), message and system
// attributes with their MD5 digests, queue depth counts, batch limits, and
// the modeled error types (*types.QueueDoesNotExist,
// *types.ReceiptHandleIsInvalid, *types.TooManyEntriesInBatchRequest, ...),
// wrapped in a *smithy.OperationError as the SDK client wraps them.
//
// It also runs SQS's dead-letter queue redrive (StartMessageMoveTask,
// ListMessageMoveTasks, CancelMessageMoveTask), which the local emulator
// lacks, moving the messages at once: see [Fake.StartMessageMoveTask] for
// what it models of a moved message (a new message that keeps its message
// attributes).
//
// It leaves out what unit tests of consumers do not need: permissions,
// encryption, tags, message retention, per-queue
// throughput limits, and the approximate, sampled nature of real SQS (a short
// poll of the fake sees every visible message, and a standard queue hands out
// messages in the order they were sent). Errors use the codes of the SQS JSON
// protocol; messages are close to, but not always the same as, SQS's.
//
// The fake does not replace integration tests: the tests that run against
// the local emulator (see sqstest/localtest) remain the reference, and the
// conformance tests of this package run the same scenarios against both to
// keep the fake honest.
package sqstest

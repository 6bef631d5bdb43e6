// Package sqsworker is the vocabulary shared by the runtimes that run job
// handlers on Amazon SQS: the [Message] a handler receives, the [Handler]
// interface and its [Middleware], the control errors that decide what happens
// to a message after its handler returns, and the [Backoff] policy that spaces
// retries.
//
// A handler's return value decides the outcome:
//
//   - nil: the message is deleted.
//   - [Permanent](err): no retry; the message goes straight to the dead-letter
//     queue with failure metadata.
//   - [RetryAfter](d, err): the message comes back after d.
//   - any other error: the message is retried after the [Backoff] delay for
//     its receive count, until the queue's redrive policy sends it to the
//     dead-letter queue.
//   - a panic is recovered into a [*PanicError] and treated as a failure.
//
// # Delays of any length
//
// SQS delays a message by 15 minutes at most ([MaxMessageDelay]) and keeps a
// received one invisible for 12 hours at most ([MaxVisibilityTimeout]). A job
// may wait up to [MaxDelay] (365 days) all the same: the producer sends a
// delay over 15 minutes with 15 minutes of delay and the time the job may
// run in the attribute [AttrNotBefore]; a retry whose backoff or RetryAfter
// delay exceeds what the visibility timeout can still hold is sent again as a
// copy that waits, carrying the attempts made in [AttrPriorAttempts] (which
// [Message.ReceiveCount] adds, so that backoff and dead-letter decisions
// count real attempts across copies; FIFO queues keep the visibility change,
// cut to 12 hours).
//
// Both runtimes hold such a message back without running the handler and
// without counting an attempt: received more than 16 minutes before its time,
// it is made invisible again for up to 11 h 59 min (a visibility step: 2
// requests, the change and the next receive), as long as its receive count
// leaves a spare receive after the next before the redrive policy's
// maxReceiveCount; otherwise, and nearer its time, a copy is sent with a
// delay of up to 15 minutes and the original deleted after the send succeeded
// (a message step: 3 requests). A copy sent more than 15 minutes (and a minute
// for clocks) before its time is sent once more when its time comes, so that
// the job's attempts start from a fresh receive count: waiting never sends a
// job to the dead-letter queue. Copies keep the body, the attributes (the
// idempotency key and trace context too; a message without a key gives its
// copies "message-id:" and its own ID, what the idempotency middleware's
// default key would have used), and the X-Ray trace header. A crash or lost
// reply between a copy's send and the original's delete leaves two copies
// with one key: run delayed jobs under the idempotency middleware.
//
// Cost per day of delay: about 4 requests without a redrive policy, 4.8 with
// a maxReceiveCount of 10, 6 with 5, 7 with 4, 9.8 with 3, and 288 with 2
// (no room for a visibility step: 3 requests per 15 minutes); plus 6 once, 3
// of which any job costs (send, receive, delete). A 40-minute delay costs 8
// requests in all, a 30-hour one 12 (18 with a maxReceiveCount of 3).
//
// The runtimes live in sub-packages: worker (a long-poll runtime for ECS and
// EC2) and lambda (an adapter for SQS event source mappings). This package
// imports only the standard library.
package sqsworker

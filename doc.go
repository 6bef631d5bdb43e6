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
// The runtimes live in sub-packages: worker (a long-poll runtime for ECS and
// EC2) and lambda (an adapter for SQS event source mappings). This package
// imports only the standard library.
package sqsworker

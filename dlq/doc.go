// Package dlq inspects dead-letter queues and moves their messages back:
// the library behind the `sqsworker dlq` commands, for a web UI or for an
// operator's own automation (say, a scheduled Lambda function that replays
// one error class every night).
//
// [Open] opens a dead-letter queue after checking that it is one: a queue
// with a redrive policy of its own is a live source queue, and so is, most
// likely, a queue that no queue names as its dead-letter queue
// (ListDeadLetterSourceQueues; where the endpoint lacks it, the redrive
// policies of the queues ListQueues lists). Receiving from a live queue would
// count receives against its messages' redrive policy and move healthy
// messages to its dead-letter queue, and purging it would lose them: both
// are refused unless [Config.Force] is set.
//
// Then, on the [Queue]:
//
//   - [Queue.Scan] reads the messages (with a [Filter]: error class,
//     attributes, failure time, body text, JSON fields) with their failure
//     metadata, and releases them;
//   - [Queue.Plan] is a dry run of a replay: what would move where;
//   - [Queue.Replay] moves the chosen messages back to their source queue
//     (or another), at a rate, recording each in an [Audit];
//   - [Queue.PlanRedrive] and [Queue.StartRedrive] use SQS's own message
//     move tasks, where the endpoint has them, after a sample that finds
//     jobs carrying earlier attempts, which a move task would keep
//     ([RedriveConfig.Sample], [ErrPriorAttempts]);
//   - [Queue.Purge] deletes every message, audited.
//
// # Receiving without losing sight of messages
//
// SQS has no peek: a scan receives the messages with a short visibility
// timeout and makes them visible again at once when it ends. A receive is
// never cut short (a context is looked at between receives): SQS may hand
// messages to a receive whose caller has gone, and they would stay hidden
// for the visibility timeout, unseen. For the same reason the SDK's own
// retry is off for these receives: a retry after a response lost on the
// way hides what the first attempt was handed. The scan retries itself,
// waits for such messages to come back, and compares what it saw with the
// queue's approximate count ([Coverage]). A scan that outlasts its
// visibility timeout (thousands of messages, a slow endpoint) hides the
// messages it holds again before it runs out, so that it does not read
// them again and take them for the end of the queue.
//
// A replay copies a message, and deletes it, only while half its
// visibility timeout or more is left, and sends the delete within what is
// left: a message waiting its turn behind a destination slow to answer, or
// behind a low rate, would otherwise outlive its visibility timeout, and
// another reader could receive it before its copy was sent or its delete:
// the delete, its receipt handle stale, then refused or applied without
// effect, the job would be in both queues, or replayed twice, unsaid. A
// message with less left is hidden again for the visibility timeout first,
// with the rest of its receive, in one call. One that SQS will not hide
// again (visible again, or received by another reader meanwhile) stays, not
// copied ([ReplayResult.Expired]), or, copied already, is not deleted
// ([ReplayResult.NotDeleted]), each said with what to do. The visibility
// timeout is best more than twice the time one move (a send and a delete)
// takes.
//
// # Where a replay sends a message
//
// The failure metadata the runtimes add to a dead-lettered message names
// its source queue, but it is message attributes, which whoever sends a
// message can set; and a message that SQS's own redrive moved (after a
// crash, a lost lease, a Lambda timeout) keeps the attributes its producer
// gave it. So a replay without a destination of its own sends a message
// only to a queue that sends its dead letters to this dead-letter queue:
// the queue SQS's redrive moved it from (the DeadLetterQueueSourceArn
// system attribute, which only SQS sets), else the one its metadata names,
// checked against the sources Open found. [Message.Unverified] says when
// metadata cannot be trusted.
//
// Every operation takes its SQS client behind the narrow [API] interface,
// which *sqs.Client and the in-memory sqstest.Fake implement; the examples
// run against the fake. The calls of an *sqs.Client send each request's
// body from a copy of their own, so that a reply that comes back while the
// body is still being written does not make the SDK send an applied call
// again (a replayed message sent twice, a receive whose messages then stay
// hidden; see the worker package's documentation).
package dlq

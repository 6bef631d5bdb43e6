// Package worker runs a [sqsworker.Handler] against an SQS queue from a
// long-running process, such as an ECS task or an EC2 instance.
//
// # Receiving
//
// A Worker long-polls the queue (20 s by default) with Config.Pollers receive
// loops, asking for up to ten messages at a time but never for more than it
// has free handler slots: a busy worker leaves messages in the queue for other
// workers. Each message runs on a goroutine of its own, at most
// Config.Concurrency at once, with a context that ends at
// Config.HandlerTimeout, when the message's visibility lease is lost, or
// when the worker must stop. The goroutines are started as messages need
// them and reused; those left idle for a minute return, so that a burst
// does not keep them.
//
// A worker has up to Config.Pollers receives, as many acknowledgement
// batches (at least 4) and the heartbeat's calls (Heartbeat.MaxInFlight,
// by default as many as Pollers, at least 4) under way at once, and each handler a dead-letter move or a
// delayed copy: more than the 10 idle connections per host that the SDK's
// default HTTP client keeps. When the client is an *sqs.Client, the worker
// makes its calls through its own HTTP client around the client's:
//
//   - It sends each request's body from a copy of its own. The SDK closes
//     a request's body once the response is back, and net/http, which reads
//     a body once more after its last byte, then takes the closed body for
//     a failed write and closes the connection under a response still being
//     read: the SDK sends again a request that was applied. A receive sent
//     again that way hides the messages of the first for a visibility
//     timeout and counts a receive against them; the larger the messages
//     and the busier the host, the likelier.
//   - When the HTTP client is the SDK's default kind
//     ([github.com/aws/aws-sdk-go-v2/aws/transport/http.BuildableClient]) with
//     too small a pool, it uses a copy of it with room for the worker's
//     calls, so that no call closes its connection for the next to open a
//     new one (over TLS, a handshake each). An HTTP client of another kind,
//     or one that keeps no idle connections, keeps its pool: give it room
//     for Concurrency + Pollers + max(4, Pollers) + 4 idle connections per
//     host.
//
// # Outcomes
//
//   - nil: the message is deleted. Deletes are batched, ten per
//     DeleteMessageBatch call or whatever is pending after Config.AckInterval
//     (at once for a message whose copy was sent: a waiting copy, a move
//     to the dead-letter queue; such a delete goes once even when the
//     heartbeat found the lease run out, which SQS may still hold), and
//     failed entries are retried; a delete that finally fails is logged
//     and counted in Stats.AckFailures, and the message comes back after its
//     visibility timeout (at-least-once delivery).
//   - an error: the message's visibility timeout is set to the Config.Backoff
//     delay for its receive count (exponential with full jitter by default), or
//     to the delay of a [sqsworker.RetryAfter] error, rounded up to whole
//     seconds; a longer delay than the visibility timeout can hold (12 hours)
//     waits in a copy of the message (see "Delays of any length" in package
//     sqsworker). No failed message waits out the queue's full visibility
//     timeout by accident.
//   - a message whose [sqsworker.AttrNotBefore] lies ahead (a job sent for
//     later) is held back, without running the handler or counting an
//     attempt, until its time.
//   - [sqsworker.Permanent], or a failure on the last attempt that the queue's
//     redrive policy allows (its maxReceiveCount, read at start-up): the worker
//     copies the message to the dead-letter queue itself, with its body, its
//     attributes, its X-Ray trace header and failure metadata
//     ([sqsworker.Failure]: error text and class, attempts, first-received
//     and failed-at times, source queue, original message ID, worker host),
//     then deletes it. If the copy cannot be sent, a last attempt is made
//     visible again at once so that SQS's redrive policy moves it on the next
//     receive (without metadata); the redrive policy also remains the safety
//     net for crashes.
//   - a panic: recovered into a [*sqsworker.PanicError], its stack logged,
//     and treated as a failure.
//
// Without a dead-letter queue (no redrive policy and no
// Config.DeadLetterQueueURL), nothing is dropped: a Permanent failure is logged
// at error level and retried with backoff like any other failure, until the
// queue's retention period ends. Give the queue a redrive policy.
//
// # Heartbeats
//
// By default a [visibility.Extender] keeps every received message invisible
// while it waits for a handler slot and while its handler runs, with batched
// ChangeMessageVisibilityBatch calls (ten messages per call), so that a job
// longer than the queue's visibility timeout is not handed to a second
// consumer. Config.Heartbeat tunes it; Config.DisableHeartbeat turns it off.
// If a lease is lost (SQS rejects the extension, or it could not be made in
// time) the handler's context is cancelled with a cause matching
// visibility.ErrLeaseLost, the event is logged and counted in
// Stats.LeasesLost, and the worker does not acknowledge a failure: another
// consumer may hold the message now. A handler that succeeds all the same
// has done its job: its delete is sent once, at once (and counted in
// Stats.Succeeded), and retried only while the lease holds. The worker's
// view of a lease can be short of SQS's (an extension SQS applied but
// whose reply was lost or came late): the delete then lands, and the
// message is neither handled again nor, on its last receive, moved to the
// dead-letter queue by SQS. Past the lease, a FIFO queue refuses the
// receipt handle, and the message comes back, its job done already; a
// standard queue may still take the delete, even while another consumer
// holds the message again, which then runs a job done already and loses
// its lease. A handler finds its lease with visibility.FromContext, to
// keep other leases in step with it.
//
// # FIFO queues
//
// On a FIFO queue (its name ends in .fifo) the messages of one message group
// run one after another, in order, and different groups run in parallel. After
// a failure, the messages of that group received behind the failed one are
// released at once (visibility 0), so that they come back after it, in order,
// even one whose time has not come (held back in flight, it would lock its
// group, the failed message's retry included, until that time; it is held
// when its turn comes); other groups go on. A message that waits without an
// attempt (sqsworker.Unavailable, or RetryAfter with a nil error) on the
// last receive its redrive policy allows cannot wait in a fresh copy, as on
// a standard queue (the copy would go behind the rest of its group), and
// made visible again it would be moved to the dead-letter queue by SQS on
// its next receive: it waits in flight instead, held by the heartbeat, for
// its backoff and then until the circuit breaker lets it run (its probes
// go before the receives'), and runs again on this receive. Without a
// heartbeat it waits so only within its visibility timeout. The messages of a group received together are kept
// invisible by the heartbeat while they wait; with heartbeats off, a message
// still waiting when half of its visibility timeout has passed is released
// with the rest of its group rather than started late.
//
// Each receive from a FIFO queue carries a ReceiveRequestAttemptId of its
// own. When its reply is lost and the SDK sends it again, SQS answers with
// the messages it handed the first attempt, which would otherwise stay
// hidden, their group blocked, for a visibility timeout. A receive that fails
// for good (the SDK's retries spent) is sent again by the worker with the same
// ID and as many messages asked for, within 4 minutes of its first send (SQS
// keeps an ID 5 minutes); when the loop then holds fewer handler slots (a
// circuit breaker probe, a rate limit), it gives the ID up.
//
// # Errors
//
// Receive errors that may pass (network errors, throttling, an endpoint that
// is down) are logged and retried with capped, jittered backoff, for ever.
// Errors that no retry fixes (the queue does not exist, access is denied,
// credentials are invalid, the redrive policy is malformed) make Run return an
// error that wraps the SDK's own, to be matched with errors.As.
//
// # Shutdown
//
// Shutdown, or cancelling Run's context, starts no new receive and lets the
// long polls under way end (within WaitTime: a cancelled request could leave
// messages SQS already handed it invisible for a whole visibility timeout),
// then releases the messages received but not started (visibility 0), those
// polls' included — waits for running handlers
// until the deadline, then cancels their contexts with the cause ErrShutdown
// and releases their messages, and finally sends the pending deletes and
// visibility changes. Every visibility change made while stopping (a
// release, a failure's backoff) is sent once those last polls have ended,
// or, when the message's lease would end first, at once with a visibility
// timeout that lasts until they have surely ended even at SQS (twice
// WaitTime and 22s from the stop: a receive sent again by the SDK, or given
// up on, may still be held there), and then, once they have, again with the
// visibility asked for. A receive that failed in a way that may have
// reached SQS (given up on WaitTime and 20s after its start, a network
// error, a server fault) may stay open there for WaitTime more after the
// receive loops have returned: a change made until then, even after they
// returned, keeps the message hidden until then. None of them takes the
// message again and spends one of its receives. A crash loses nothing
// either: messages not deleted come back after their visibility timeout (a
// message hidden that way, at most twice WaitTime and 22s after the stop).
//
// A message released (cut short, or received while stopping) on the last
// receive its redrive policy allows would be moved to the dead-letter
// queue by SQS on its next receive, though no handler failed: on a
// standard queue a fresh copy takes its place instead, carrying the
// attempts made before (the release counts none), delayed until the last
// polls have surely ended, and the original is deleted. A send that fails
// is sent again, with backoff, until 5s after the first (an SQS that does
// not answer, or refuses), then given up, and the message released as
// above; a send under way at the shutdown deadline is cut 5s after it. The
// copies of the messages one receive brings while stopping are sent at
// once, not one after another, so that such an SQS holds the stop up by
// those 5s once, not once per message. A FIFO queue's message cannot wait
// in a copy (it would go behind the rest of its group): instead, a group
// with a message on that receive, received while stopping or waiting
// behind a running message of its group, is not released but runs on, in
// order, until the shutdown deadline; what is left then is released.
//
// So does a message postponed without an attempt (RetryAfter with a nil
// error, a dependency down: sqsworker.Unavailable) or held back until its
// time on that receive. While the worker runs, such a copy's send is sent
// again, with capped, jittered backoff, for as long as the worker holds
// the message: its visibility timeout, moved on by the heartbeat, less a
// second to delete the original once its copy is sent (that delete, and
// those pending with it, go at once, not after Config.AckInterval). With
// the heartbeat on, when the lease as it stands leaves no time for another
// send, the sends wait for the heartbeat's next extension (which comes
// only when a half of the visibility timeout is left, by default), so
// that they go on until the lease is lost or reaches the heartbeat's
// MaxLifetime (12h by default). The handler slot stays taken
// meanwhile. Should the worker begin to stop, a wait between two sends
// ends then, and the sends are bound as above (5s from then). Given up, the message is left to its visibility, and the log
// says that SQS will dead-letter it.
// A message received nearly 12 hours ago cannot be hidden past SQS's 12
// hours: its hide is sent only when it ends after the lease, which holds it
// otherwise. Every such change is sent after the message's lease has ended,
// and after any heartbeat extension of it under way has returned, so that
// a late extension does not undo it; while stopping, that wait ends 5s
// past the shutdown deadline at the latest, as the heartbeat gives an
// extension that SQS does not answer up only after its Interval (2 s at
// least, while the lease has that long): a message
// whose extension still lands after its release then comes back when the
// extension ends, not at once.
//
// # Priority queues
//
// SQS has no message priority: a priority is a queue. A [MultiWorker]
// consumes several queues, one per priority level, from one pool of handler
// slots (MultiConfig.Concurrency); each queue keeps its own receive loops,
// heartbeat, acknowledgement batches, dead-letter handling and circuit
// breaker, exactly as a Worker's — a Worker is the one-queue case of the
// same machinery. For each queue, a [QueueConfig] gives:
//
//   - Priority: a slot that frees goes to the highest-priority queue that
//     wants it; while a queue has messages (its last receive came back
//     full, or it has not received yet), the queues below it receive only
//     with their reserved slots.
//   - Reserved: slots only this queue may use, kept free however busy the
//     others are, so that a flood of low-priority jobs cannot delay a
//     critical one by more than one receive.
//   - Config.Concurrency: the most slots the queue may hold (default: the
//     whole pool).
//   - MaxAge and StarvationShare: the starvation guard (below).
//   - Handler: its own handler, or the one given to Run, which tells the
//     queues apart by Message.QueueURL.
//
// A receive loop asks for min(10, the slots its queue may use now)
// messages, and waits, without receiving, while it may use none; an idle
// queue (its last receive brought nothing) long-polls with one slot, not
// ten, so that it does not keep slots from a busy queue. Each queue has one
// receive loop by default (Config.Pollers): an idle queue costs one
// ReceiveMessage per WaitTime, 3 a minute at the default 20 s, whatever the
// size of the pool.
//
// The starvation guard is an age budget, not weights: a queue with MaxAge
// is starved when a message it receives on its first receive was sent more
// than MaxAge ago (SentTimestamp; retries and the runtime's waiting copies
// are as old as the wait it chose, and do not count), or when its receive
// loop has waited for slots for
// MaxAge/2; while starved it holds StarvationShare slots as if reserved
// (a quarter of the pool by default), until what it receives is within
// MaxAge/2 again. Budgets are what the queues promise (critical within a
// second, low within an hour), and the guard costs the higher queues
// nothing until a budget is broken, where fixed weights (8:4:2:1) take slots
// from the critical queue even while the low queue is within its budget.
//
// One queue that SQS refuses (deleted, access revoked, its key disabled,
// its deletes denied) does not stop the others, at start or later: it
// waits, its error logged at each try and in QueueStats.Unusable, and is
// tried again after 10 s, doubling up to 5 minutes, holding no slot
// meanwhile; a queue whose acknowledgements were refused receives again
// only once SQS takes them. Run returns an error when a queue's
// configuration does not fit it at start, as a Worker's does, and when no
// queue could start at all.
//
// Rate limits (golang.org/x/time/rate): Config.RateLimit per queue (for a
// Worker as well) and MultiConfig.RateLimit for the whole worker. A limited
// queue asks for no more messages than it has tokens for, takes the tokens
// for what it received, and makes no receive while it has none: it never
// holds a message invisible while it waits for a token.
//
// # Logs
//
// Logs go to Config.Logger (log/slog) with the queue URL, message ID,
// attempt, error class and duration. Message bodies are never logged.
//
// # Garbage collection
//
// A worker handling many small messages keeps a small live heap, and with
// the Go runtime's default settings collects garbage every few megabytes
// of allocation, dozens of times a second: on the project's benchmark a
// third of the process's CPU. The runtime's own settings, not the worker's,
// decide it: a poller in a container with a memory limit usually does well
// with GOMEMLIMIT at most of that limit and a higher GOGC (GOGC=400 cut the
// benchmark worker's CPU per message by a third; BENCHMARKS.md). The
// worker's own memory stays flat over time (see its soak benchmark), so the
// limit is there for the handlers.
package worker

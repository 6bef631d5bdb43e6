// Package batch runs a job as a batch of chunk jobs and enqueues one
// completion job when every chunk has succeeded: the coordinator pattern,
// on SQS and DynamoDB.
//
// [Coordinator.Create] records the batch in DynamoDB (its size, its
// counters, the completion job to send) and then enqueues its chunks, each
// with the [Attribute] "batch-chunk" ("<batch ID>#<chunk index>") and an
// idempotency key of its own ([ChunkKey], "batch#<ID>#<index>"). Creating a
// batch again with the same ID and the same spec (after a crash, say)
// sends its chunks again unless they were all sent: a chunk is counted once
// however often it arrives, and its handler runs once behind
// [Coordinator.WithIdempotency] (a copy sent again arrives as a first
// delivery, which [Coordinator.Middleware] alone runs again); with another spec it is
// a [*SpecMismatchError]. The ID of a batch that expired is refused, with
// a [*ReusedIDError], while items of its counted or failed chunks remain
// (they expire Config.TTL after their count): the new batch's chunks would
// be taken for counted, and it would never complete.
//
// On the consumer side, [Coordinator.Middleware] counts each chunk whose
// handler succeeded exactly once, in a DynamoDB transaction that puts a
// chunk item ("batch#<ID>#chunk#<index>", on the condition that it does not
// exist) and adds one to the batch's done counter: a redelivered chunk, a
// chunk sent twice, or a transaction retried after a lost reply finds its
// chunk item and is not counted again. With the idempotency middleware,
// [Coordinator.WithIdempotency] adds these writes to the idempotency
// record's own transaction (idempotency.AddWrites), so that a chunk's
// effects, its idempotency record and its count commit together, or not at
// all. Both are ordinary sqsworker middleware: they work the same in the
// worker and in the Lambda adapter.
//
// # Completion
//
// After each successful chunk (or a duplicate of one), the middleware reads
// the batch with a strongly consistent read. The chunk that finds every
// chunk counted and the completion not yet sent takes a short lease on
// sending it (a conditional update: one holder at a time), sends the
// completion job to the callback queue, and marks it sent. Until the send
// is marked, the chunk's message is not acknowledged: a crash anywhere in
// between redelivers the chunk, which is found already counted, finds the
// completion not marked sent, and sends it once the lease has ended (the
// holder's chunk, coming back while the lease holds, is put off with
// sqsworker.RetryAfter and a nil error: not a failure, so its waits never
// dead-letter it).
//
// A chunk on the last receive its queue's redrive policy allows
// (Config.MaxReceiveCount, or else the queue's RedrivePolicy, read once
// when a completion is due) would not be redelivered after a crash: SQS
// would move it to the dead-letter queue, a chunk that did not fail, and
// the completion would wait for an operator's replay. Such a chunk is
// postponed instead (sqsworker.RetryAfter with a nil error), which the
// runtime carries out on a last receive with a fresh copy of its message,
// keeping the job's key and its attempts; the copy finds the chunk counted
// and sends the completion with receives to spare. A crash between the
// copy's send and the original's delete leaves the original to SQS's
// redrive (the copy still sends the completion). With neither
// MaxReceiveCount nor a readable redrive policy, with a maxReceiveCount of
// 1 (a copy's receive would be its last too), on a FIFO queue (whose
// runtime makes no copy: it would go behind the rest of its group), or
// when the copy would have no room for its attempts (eight attributes of
// the chunk's own, or a body near SQS's size limit: without them, the copy
// would run the chunk's handler again), the chunk sends the completion
// itself.
//
// What holds where:
//
//   - Counting is exactly once per chunk index, whatever the deliveries.
//   - The completion job is sent at least once, and more than once only
//     when SQS's reply to its send is lost (the SDK sends it again), or
//     when a consumer dies (or loses DynamoDB) between SQS accepting the
//     completion and the update marking it sent: a window of one request.
//     On a FIFO callback queue its deduplication ID (derived from the batch
//     ID) drops such a second send within SQS's five-minute window.
//   - The completion job carries the idempotency key [DoneKey]
//     ("batch#<ID>#done"): a callback handler run under the idempotency
//     middleware runs it once even in that case.
//
// # Failures
//
// A chunk whose handler fails with sqsworker.Permanent, or fails its last
// attempt (Config.MaxReceiveCount), is recorded as failed, with its error
// class and text, in an item of its own; so is one whose handler succeeded
// but whose writes the idempotency middleware's commit refused (a condition
// of its own, [Coordinator.WithIdempotency]). A run the runtime cut short
// because it stops (a worker's shutdown, a Lambda invocation's deadline) is
// not: its message is released, not dead-lettered, and the chunk stays
// pending. The batch's item counts it,
// exactly however many fail, and lists its index while the list has room:
// at most [MaxFailedIndexes], so that the item, which every count rewrites,
// stays small. [Coordinator.Get] reads the listed chunks with their errors,
// and counts the others in Progress.FailedUnlisted. Failed chunks keep the
// batch from completing; a failed chunk replayed from the dead-letter queue
// that then succeeds moves from failed to done, listed or not (and leaves
// the list, making room). Chunks SQS dead-lettered without the middleware
// knowing it was their last attempt, and failed chunks not listed, are
// found in the dead-letter queue by [DeadLetters], with the failure
// metadata the runtimes add.
//
// # Table
//
// Batches live in the idempotency table (idempotency.CreateTable, and the
// CDK construct that makes it), under keys that start with "batch#": one
// table to provision, alarm on and pay for, and the only way a chunk's
// count can commit in the same DynamoDB transaction as the chunk's
// idempotency record and effects, since a transaction stays within one
// account and region and its writes are checked against the idempotency
// table's. The idempotency stores that share the table must therefore not
// use keys starting with "batch#" themselves (give them a
// StoreConfig.KeyPrefix); the records of chunk keys (ChunkKey) are distinct
// from the batch's own items. Items expire with the table's TTL,
// Config.TTL after the batch was created.
//
// # Cost
//
// Create reads the MaximumMessageSize of the chunks' queue (twice: once to
// check the spec, once for its sends) and of the callback queue (three
// GetQueueAttributes), reads the batch's item and its
// chunks' items for the leftovers of an expired batch (one consistent
// BatchGetItem per 100 chunks), writes the batch and its
// completion job (one TransactWriteItems of two items), sends its chunks ten per SendMessageBatch, and marks them
// sent (one UpdateItem). Each chunk costs one TransactWriteItems of two
// items (or two more items in the idempotency record's transaction) and
// two consistent GetItem, of the chunk and (unless it is counted) its batch, before its
// handler runs (a chunk counted already is acknowledged without running
// it, a chunk of a batch the table does not hold fails for good before
// its effect) and one consistent GetItem of the batch after its count. The completion costs one UpdateItem (lease), one
// consistent GetItem (the completion job), one SendMessage and one
// UpdateItem (sent); without Config.MaxReceiveCount, one GetQueueAttributes
// per chunks' queue and process; on the chunk's last receive, one
// SendMessage (its copy) and the copy's run more. The completion job is kept in an item of its own
// ("batch#<ID>#callback"), and the batch's item lists at most
// MaxFailedIndexes failed chunks, so that the batch's item, which every
// chunk's count updates, stays small (under 2 KB without failures, under
// 8 KB with a full list, with batch IDs of MaxIDLength and queue URLs of
// 256 bytes): DynamoDB bills a write by the size of the item written, and
// one item takes about 1,000 write units a second. A failure recorded once
// the list is full costs one cancelled transaction more.
package batch

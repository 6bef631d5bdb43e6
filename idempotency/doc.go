// Package idempotency makes a handler's effect happen once per idempotency
// key, although SQS delivers messages at least once: a crash before the
// delete, a lost acknowledgement, a visibility timeout that runs out, a
// dead-letter replay or a producer's retry each deliver a job again.
//
// A [Guard] is handler middleware, the same in the worker and in Lambda. For
// each message it takes the key (by default the producer-set
// "idempotency-key" attribute, see [DefaultKey]) and claims it in a [Store]:
//
//   - a new key is claimed, the handler runs, and the record is completed
//     (or released if the handler failed, so that the retry can claim it);
//   - a duplicate of a completed key is acknowledged without running the
//     handler;
//   - a duplicate of a key another process is running is postponed until
//     that claim's lease ends, without counting as a failure (one running
//     under the same Guard is waited for first, briefly);
//   - a key reused for another payload is a Permanent error naming it.
//
// [DynamoStore] keeps the records in DynamoDB with conditional writes: a
// first-time message costs two requests (claim, complete; or claim and one
// TransactWriteItems with the handler's writes), a duplicate one (the
// failed claim returns the old record, ReturnValuesOnConditionCheckFailure
// ALL_OLD), and none with Config.CacheSize. Records expire after
// StoreConfig.TTL (an in-progress one never before its claim's lease ends,
// however long the job runs); an expired record counts as absent even before
// DynamoDB's TTL deletes it, which can take hours.
//
// # Transactional effects
//
// A handler whose effect is a DynamoDB write adds it with [AddWrites] rather
// than making it itself: the middleware commits it in one TransactWriteItems
// with the completion of the idempotency record, conditioned on the claim
// still being the handler's. The effect and the completed record both exist,
// or neither does, so a crash anywhere re-runs the job cleanly and a
// duplicate never applies the effect again. The commit's ClientRequestToken
// makes a retry after a lost reply harmless. A failed condition of the
// handler's own writes fails the job with a [*TransactionCanceledError];
// writes beyond DynamoDB's limits (99 writes, 4 MB, one account and region,
// one write per item) are refused by AddWrites with an error matching
// [ErrInvalidWrites].
//
// An effect outside DynamoDB cannot join the transaction: pass the key
// ([KeyFromContext]) to a service that deduplicates requests itself, as an
// Idempotency-Key header for instance.
//
// # Outages
//
// A DynamoStore marks the errors that mean DynamoDB is unreachable,
// throttled or failing (network errors, timeouts, HTTP 5xx,
// ProvisionedThroughputExceeded, ThrottlingException, RequestLimitExceeded)
// with sqsworker.Unavailable: the runtimes' circuit breaker counts them, and
// never dead-letters a message for them. A claim whose outcome is unknown is
// deleted as a best effort, so that the retry need not wait for its lease.
//
// It marks so too the requests DynamoDB refuses for the store's
// configuration, an operator's to fix rather than the job's
// (ErrMisconfigured): the table missing (ResourceNotFoundException), access
// denied (AccessDeniedException), credentials refused, a ValidationException
// of a request on the record alone (the table keyed by another attribute).
// Every job would fail the same way; they wait behind the circuit breaker,
// and the middleware logs one error naming the table and the fix until a
// claim succeeds again.
//
// A commit refused because a table of the handler's writes (AddWrites) is
// missing or denied, or is keyed otherwise than the items written to it,
// while the idempotency table answered the claim, is that table's
// configuration (a tenant's table, chosen per job, say): its error, a
// *WritesTableError matching ErrMisconfigured and marked
// sqsworker.PartlyUnavailable, names the table (the one DynamoDB's message
// names, else the writes'; for a key, the table's key and the key the
// items carry) and the fix; the middleware logs it once per table, until a
// commit with a write on it succeeds, however many jobs writing to other
// tables succeed meanwhile. The jobs that write to it wait, never
// dead-lettered for it; the circuit breaker does not count them (DynamoDB
// answers), so that the jobs writing to other tables go on.
//
// DynamoDB's refusal of a key that does not fit its table (a
// ValidationException, or a transaction cancelled with a ValidationError)
// names no table, and reads as any invalid write's. So after such a
// refusal, and only then, a DynamoStore describes the tables of the
// refused writes (DescribeTable, once per table a minute, however many
// commits ask) and compares their keys with the items'. An item whose key
// does not fit makes the refusal that table's; otherwise it stays the
// job's (a TransactionCanceledError, or a plain error). The role needs
// dynamodb:DescribeTable on the tables of the writes for it: without it
// (or when a description fails otherwise) the refusal stays the job's, as
// it was before the check, counted toward the dead-letter queue, and the
// middleware logs one warning naming the permission. A description that
// fails for an outage leaves the job waiting, to be checked again.
//
// # Leases
//
// A claim holds for a lease: a worker that dies mid-job leaves an in-progress
// record that another worker may take over once its lease ends. With the
// worker's visibility heartbeat, the lease is the message's visibility
// deadline plus Config.ClaimGrace (30s by default), and moves with every
// extension (via visibility.Lease.OnExtend); without one, it ends at the
// handler context's deadline, or after Config.Lease, plus the grace.
//
// The grace covers a DynamoDB brownout: lease extensions that fail are
// retried with backoff, apart from the handler, until the claim's lease
// ends, so a job keeps its claim while its message is kept invisible. When
// the claim is lost anyway (another holder has taken the key, or the lease
// ended without a successful extension) the handler's context is cancelled
// with a cause matching [ErrNotHolder]: the job may run elsewhere and should
// stop. Completing a claim is retried with backoff too, for up to 30s and
// never past its lease (nor, in a Lambda invocation, past its handlers'
// deadline, or 250ms after the handler returned: a Lambda function must
// report in time), so that a duplicate finds the key completed rather than
// in progress.
//
// A duplicate of a running job is postponed until the claim's lease, grace
// included, ends; it is then acknowledged if the job completed. A duplicate
// of a job running under the same Guard (two copies in one batch, or a send
// retried after its reply was lost; share one Guard in a process) first
// waits for it, until 5s after the job started: then it is acknowledged, or
// runs if the job failed, without spending a receive.
//
// One holder waits less: the next receive of the same message on a FIFO
// queue (its URL ends in ".fifo"), held by the visibility heartbeat. SQS
// delivers a FIFO queue's message again only once its earlier receive's
// visibility timeout has ended, so the claim of that receive belongs to a
// worker that died, or that lost the message's lease. The claim records
// its message's ID and receive count (see [Receive]), and the next receive
// takes it over once the earlier receive's visibility deadline lies the
// heartbeat's LossLag (two of its Interval) and a second in the past: by
// then a holder still running has seen its lease lost and had its
// handler's context cancelled, and a holder whose claim's extensions fail
// gives the claim up LossLag past the visibility deadline the claim
// records, not at the end of the grace (such a claim's holder keeps less
// of the grace through a DynamoDB brownout: half the visibility timeout and
// LossLag). The next receive waits for the takeover in its handler, its
// message held by the heartbeat, when it is due within the longer of its
// LossLag and ClaimGrace, and two seconds (as it is when SQS has just
// delivered the message again), and is postponed otherwise. Waiting for the whole grace would cost a
// receive with every crash of a crash loop faster than the grace, while the
// message waited at the head of its group, and send a job no handler failed
// to the dead-letter queue once the redrive policy's maxReceiveCount was
// spent. The holder taken over, if its handler goes on (it ignores its
// context, or its process was stalled past its lease), can no longer
// extend, complete or commit its claim: the writes it adds with AddWrites
// are refused, and applied once, by the new holder; the effects it makes
// by itself may happen twice. A standard queue's message takes nothing
// over, a fair queue's included: SQS may deliver it again while its first
// receive is still in flight. Nor does a message without the heartbeat,
// whose handler nothing cancels when its lease ends. The claim also records
// its holder's share of the grace that the next receive does not wait for
// (ClaimGrace less LossLag), and is taken over by that, not by the next
// receive's own: workers of one queue configured otherwise (two versions
// during a deployment, a ClaimGrace or a visibility timeout changed) wait
// as long as the holder's configuration needs, no shorter and no longer.
//
// # Cache
//
// With Config.CacheSize, the records of completed keys are kept in memory:
// a cached duplicate is answered as the store would answer it, with the same
// payload check (a reused key is a Permanent error) and the same Record,
// saved result included, for Config.OnDuplicate.
//
// # Sharing a table
//
// Stores sharing a table tell their keys apart with StoreConfig.KeyPrefix:
// a key k is stored as prefix + KeySeparator + k ("#"), and a prefix must not
// contain the separator. Give each handler, and each tenant whose producers
// pick their own keys, a store with a prefix of its own: two jobs with one
// key under one prefix are one job. Keys are at most [MaxKeySize] (1 KiB)
// bytes of valid UTF-8 (encode binary keys, a digest's bytes say, as hex or
// base64: DynamoDB would store each invalid byte as U+FFFD, two keys as
// one); another fails its message as Permanent.
package idempotency

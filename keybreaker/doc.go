// Package keybreaker is a circuit breaker per key, as handler middleware:
// it stops calling a part of a dependency that keeps failing (one webhook
// endpoint, one tenant's API) while the jobs that need the rest go on.
//
// It is the webhook delivery pattern's "mark an endpoint unhealthy after ten
// failures in a row, and stop delivering to it until it recovers". The
// runtimes' own circuit breaker ([sqsworker.BreakerConfig]) pauses every job
// of a queue when a dependency they all need is down; a key's breaker pauses
// only the jobs of that key:
//
//   - Config.Key names the key of each message's job;
//   - a handler failure that Config.IsFailure counts (by default one marked
//     [sqsworker.Unavailable] or, better here, [sqsworker.PartlyUnavailable])
//     adds to its key's failures in a row (one marked neither Unavailable nor
//     [sqsworker.Permanent] is returned marked PartlyUnavailable: the
//     endpoint's failure spends none of the job's attempts); a success
//     clears them; a
//     postponement by the handler behind the middleware ([sqsworker.RetryAfter]
//     with a nil error: an idempotency duplicate, say) counts as nothing, as
//     does a job cut short by its context (the runtime stopping, the lease
//     lost) with an error IsFailure does not count;
//   - a job that ran out of time (the worker's HandlerTimeout) counts as a
//     failure of its key, as from an endpoint that takes requests and never
//     answers: the key opens after Config.Failures failures in a row. Such a
//     timeout spends the job's attempt unless another job of the key timed
//     out in the same run, for alone it may be the job's own (a payload too
//     large to handle in time);
//   - after Config.Failures in a row the key opens: its jobs are not run but
//     postponed ([sqsworker.RetryAfter] with a nil error) until the key's
//     open interval ends: never moved to the dead-letter queue for it, not
//     counted as failures, and counted as nothing by the runtime's own
//     breaker, which PartlyUnavailable failures leave closed;
//   - once the interval has passed, one job of the key runs as its probe: a
//     success closes the key, a failure opens it again for twice as long, up
//     to Config.MaxOpenFor; a probe postponed, or cut short so, lets the
//     next job of its key probe.
//
// Each process keeps its own view: a fleet of workers probes an endpoint
// once per worker per interval. A job waiting on an open key costs a
// receive and a visibility change per interval, as any retried job does,
// and on its queue's last receive waits in a fresh copy (see
// [sqsworker.RetryAfter]); the backlog of a key that recovers comes back
// within one interval of its probe's success. A FIFO queue's job on its
// last receive cannot wait in a copy, which would go behind its group: the
// runtime keeps it in flight, holding its handler slot and locking its
// group, until its key's probe may go (within the worker's MaxLifetime, or
// the Lambda invocation's deadline). As many groups of open keys on their
// last receive as the worker's Concurrency leave no slot for the other
// keys' jobs meanwhile: on a FIFO queue, set maxReceiveCount well above the
// receives a key's open intervals cost, or keep Concurrency above the
// number of keys likely to be down at once.
//
// Memory stays bounded over a poller's life: only keys with failures, open
// or probing are tracked, at most Config.MaxKeys of them (one more while a
// new key's first failures are counted beside open keys only).
package keybreaker

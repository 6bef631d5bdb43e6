// Package schedule reads and writes the envelope of a scheduled job: the
// JSON body that an EventBridge Scheduler schedule made by the sqsinfra
// Schedule construct sends to a queue at each occurrence,
//
//	{"sqsworker.schedule":{"name":"nightly-report","scheduledTime":"2026-12-01T03:00:00Z"},"payload":{...}}
//
// EventBridge Scheduler cannot set SQS message attributes, so the
// occurrence's identity travels in the body: the schedule's name and the
// occurrence's scheduled time (its <aws.scheduler.scheduled-time> context
// attribute, the same for every send of one occurrence, retries included).
//
// Key derives a deterministic idempotency key from them,
// "schedule:NAME@TIME" with TIME in UTC RFC 3339, for idempotency.Config.Key:
// an occurrence sent twice, or its job redelivered, runs the handler once
// while its idempotency record lives (idempotency.StoreConfig.TTL), given
// that its two sends have one body (the sqsinfra construct refuses the
// context attributes that differ between sends). EventBridge Scheduler
// retries a send for up to the schedule's MaxEventAge (24 hours by
// default), and a send it retried after SQS applied it unanswered arrives
// as a second message, up to that long after the first plus the time it
// waits in the queue: give the store a TTL longer than both (the default
// record's day equals the default MaxEventAge, and leaves no margin), or
// a late second send runs the occurrence again.
//
// Parse returns the occurrence (name, time, payload) to a handler, in the
// worker and on Lambda alike.
//
// Envelope builds the same body locally, for tests and for the local
// equivalent of a schedule: a loop calling `sqsworker send` with it (see
// the README).
package schedule

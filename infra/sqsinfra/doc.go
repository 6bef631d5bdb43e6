// Package sqsinfra holds AWS CDK constructs that provision a job system run
// by sqsworker: a JobQueue (queue, dead-letter queue, TLS-only policies,
// encryption and alarms), an IdempotencyTable for the idempotency package,
// a LambdaConsumer running the Go bootstrap built by `make lambda`
// behind an SQS event source, a PollerService running the sqsworker image on
// ECS Fargate scaled on the backlog per task, a Dashboard, and an
// OperatorPolicy for dead-letter inspection and replay.
//
// Every props struct documents the default of each field; the zero value of
// a field means its default. Props that cannot work (a maxReceiveCount below
// 1, a FIFO queue with a standard dead-letter queue, a queue visibility
// timeout shorter than six times the function timeout, ...) make the
// constructor panic with a message naming the construct and the prop, which
// is how a CDK app fails synthesis.
package sqsinfra

// Package sqsinfra holds AWS CDK constructs that provision a job system run
// by sqsworker: a JobQueue (queue, dead-letter queue, TLS-only policies,
// encryption, alarms on an AlarmTopic it can create; ImportJobQueue for an
// existing queue), an IdempotencyTable for the idempotency package, a
// LambdaConsumer running the Go bootstrap built by `make lambda` behind an
// SQS event source mapping, a PollerService running the sqsworker image and
// its handler on ECS Fargate, scaled on the backlog per task (to zero if
// asked) in a Network its stack's pollers share, a Dashboard, and an
// OperatorPolicy for dead-letter inspection and replay. PriorityQueues make
// a JobQueue per priority level, consumed by one PollerService or by
// NewPriorityLambdaConsumer (an event source per level); a Schedule sends a
// job to a queue at each occurrence of an EventBridge Scheduler
// expression, in the envelope the Go package schedule reads.
//
// Every props struct documents the default of each field; the zero value of
// a field means its default. Props that cannot work (a maxReceiveCount below
// 5 with a Lambda consumer, a FIFO queue with a standard dead-letter queue,
// a poller with no handler to POST to, a duration passed as a token, ...)
// make the constructor panic with a message naming the construct, the prop
// and the fix, which is how a CDK app fails synthesis.
//
// The constructs are checked by synthesis: template assertions, cdk-nag's
// AwsSolutions rules and a golden template of the example app (package
// exampleapp), with the CDK's recommended feature flags of infra/cdk.json.
package sqsinfra

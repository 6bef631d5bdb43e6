// Package lambda will run a sqsworker.Handler as an AWS Lambda function behind
// an SQS event source mapping: partial batch responses, FIFO group rules,
// backoff through visibility changes, dead-letter moves with failure metadata,
// and deadline awareness. It is not implemented yet.
package lambda

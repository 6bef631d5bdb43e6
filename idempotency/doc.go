// Package idempotency will make a handler's effect happen once per key, with
// conditional writes to a DynamoDB table, as handler middleware that works in
// both runtimes. It is not implemented yet.
package idempotency

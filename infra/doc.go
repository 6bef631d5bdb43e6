// Package infra will hold AWS CDK constructs, in a Go module of its own, that
// provision queues with dead-letter queues and alarms, the idempotency table,
// Lambda consumers and autoscaled ECS pollers. It is not implemented yet.
package infra

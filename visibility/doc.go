// Package visibility will keep long-running messages invisible with batched
// heartbeats (ChangeMessageVisibilityBatch), cancelling the handler's context
// when the lease is lost. It is not implemented yet.
package visibility

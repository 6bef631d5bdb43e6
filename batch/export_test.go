package batch

import "time"

// SetFailedCap makes c list at most n failed chunks in a batch's item (its
// failed_chunks set), in place of MaxFailedIndexes: the tests reach the cap
// with a few chunks.
func SetFailedCap(c *Coordinator, n int) { c.failedCap = n }

// SetCountBudget bounds c's counts and failure records, with their
// retries, by d, in place of 30s: the tests of contention end sooner.
func SetCountBudget(c *Coordinator, d time.Duration) { c.countBudget = d }

// ItemSize is itemSize, for the tests on DynamoDB Local.
var ItemSize = itemSize

// WorstBatchItem is worstBatchItem, for the tests on DynamoDB Local.
var WorstBatchItem = worstBatchItem

// MaxBatchItemSize is maxBatchItemSize, for the tests on DynamoDB Local.
const MaxBatchItemSize = maxBatchItemSize

package batch

// SetFailedCap makes c list at most n failed chunks in a batch's item (its
// failed_chunks set), in place of MaxFailedIndexes: the tests reach the cap
// with a few chunks.
func SetFailedCap(c *Coordinator, n int) { c.failedCap = n }

// ItemSize is itemSize, for the tests on DynamoDB Local.
var ItemSize = itemSize

// WorstBatchItem is worstBatchItem, for the tests on DynamoDB Local.
var WorstBatchItem = worstBatchItem

// MaxBatchItemSize is maxBatchItemSize, for the tests on DynamoDB Local.
const MaxBatchItemSize = maxBatchItemSize

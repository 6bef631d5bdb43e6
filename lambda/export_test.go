package lambda

import (
	"testing"
	"time"
)

// SetLookupClock sets the clock of the GetQueueUrl answers the adapter
// keeps, until t ends. t must not be parallel.
func SetLookupClock(t testing.TB, now func() time.Time) {
	old := lookupNow
	lookupNow = now
	t.Cleanup(func() { lookupNow = old })
}

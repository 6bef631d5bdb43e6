package keybreaker

import "time"

// SetClock replaces the breaker's clock.
func (b *Breaker) SetClock(now func() time.Time) { b.now = now }

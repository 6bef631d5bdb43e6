package producer

import "time"

// SetClock sets the clock p reads the time of its size reads with.
func SetClock(p *Producer, now func() time.Time) { p.now = now }

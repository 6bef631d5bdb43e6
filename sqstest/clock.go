package sqstest

import (
	"sync"
	"time"
)

// Clock is a settable clock for [Fake.Now], safe for concurrent use:
//
//	clock := sqstest.NewClock(time.Now())
//	f := sqstest.NewFake()
//	f.Now = clock.Now
//	...
//	clock.Advance(31 * time.Second) // the visibility timeout has passed
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock that stands at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set sets the clock's time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

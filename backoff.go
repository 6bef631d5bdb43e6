package sqsworker

import (
	"math/rand/v2"
	"time"
)

// Backoff decides how long a failed message waits before its next attempt.
// attempt is the message's receive count: 1 after the first failure.
// Implementations must be safe for concurrent use.
type Backoff interface {
	Delay(attempt int, err error) time.Duration
}

// BackoffFunc adapts an ordinary function to a [Backoff].
type BackoffFunc func(attempt int, err error) time.Duration

// Delay calls f(attempt, err).
func (f BackoffFunc) Delay(attempt int, err error) time.Duration { return f(attempt, err) }

// Default values of [ExponentialBackoff].
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffCap  = 15 * time.Minute
)

// ExponentialBackoff is exponential backoff with full jitter: the delay after
// attempt n is drawn uniformly from [0, min(Cap, Base * 2^(n-1))]. Jitter keeps
// messages that failed together from coming back together.
//
// The zero value is ready to use.
type ExponentialBackoff struct {
	// Base is the upper bound of the first delay. Default 1s.
	Base time.Duration
	// Cap is the largest delay. Default 15m; at most MaxDelay (365 days).
	// A delay above MaxVisibilityTimeout (12h), such as a webhook's 24h
	// backoff, is carried out as a delay of any length: the runtimes send
	// a copy of the message that waits (see [AttrNotBefore]) and carries
	// the attempts made so far ([AttrPriorAttempts]).
	Cap time.Duration
	// Jitter returns a number in [0, 1) that scales the delay. Default a
	// uniform random number; return 1-ε for no jitter, or a fixed value in
	// tests.
	Jitter func() float64
}

// Delay returns the jittered delay after the given attempt.
func (b ExponentialBackoff) Delay(attempt int, _ error) time.Duration {
	return time.Duration(float64(b.Ceiling(attempt)) * b.jitter())
}

// Ceiling returns the largest delay Delay can return for attempt.
func (b ExponentialBackoff) Ceiling(attempt int) time.Duration {
	base, ceil := b.Base, b.Cap
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if ceil <= 0 {
		ceil = DefaultBackoffCap
	}
	ceil = ClampLongDelay(ceil)
	d := base
	for i := 1; i < attempt && d < ceil; i++ {
		d *= 2
	}
	return min(d, ceil)
}

func (b ExponentialBackoff) jitter() float64 {
	if b.Jitter != nil {
		return min(max(b.Jitter(), 0), 1)
	}
	return rand.Float64()
}

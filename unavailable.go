package sqsworker

import (
	"errors"
	"time"
)

// UnavailableError marks a failure caused by a dependency that is down (a
// database refusing connections, an API answering 503, a throttled store),
// not by the message. Create one with [Unavailable] and detect it with
// errors.As or [IsUnavailable].
type UnavailableError struct {
	Err error
}

// Unavailable marks err as the failure of a dependency that is down rather
// than of the message. The runtimes count such failures toward their circuit
// breaker (see [BreakerConfig]): once it opens they stop taking messages
// until a probe succeeds, so that an outage does not spend the messages'
// receive counts; and a message that failed this way is never moved to the
// dead-letter queue by the runtime's own hand, even on its last attempt or
// when err is also Permanent; on the last receive its redrive policy allows,
// a standard queue's message waits in a fresh copy (the worker's requeue)
// rather than be moved by SQS on its next receive. Unavailable(nil) returns
// nil.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err}
}

func (e *UnavailableError) Error() string { return "dependency unavailable: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports whether err, or an error it wraps, is an
// [UnavailableError].
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// BreakerConfig configures the circuit breaker both runtimes put in front of
// their handler. The zero value is a breaker with the documented defaults,
// on.
//
// The breaker counts dependency failures: errors marked with [Unavailable]
// (the idempotency store marks its own outages so) and errors whose
// [ErrorClass] is listed in Classes. After Threshold of them in a row it
// opens: the worker stops receiving, and the messages it received but has
// not started are released; the Lambda adapter postpones the records it is
// given. After ProbeInterval (jittered, doubling up to MaxProbeInterval
// while probes fail) it lets one message through as a probe; CloseAfter
// successful probes in a row close it. Any outcome other than a dependency
// failure (success, or a failure of the message itself) counts as a success.
type BreakerConfig struct {
	// Disabled turns the breaker off.
	Disabled bool
	// Threshold is the number of dependency failures in a row that opens
	// the breaker. Default 5.
	Threshold int
	// ProbeInterval is how long the breaker stays open before its first
	// probe. Default 5s.
	ProbeInterval time.Duration
	// MaxProbeInterval caps the wait between probes, which doubles after
	// each failed probe. Default 60s.
	MaxProbeInterval time.Duration
	// CloseAfter is the number of successful probes in a row that close
	// the breaker. Default 2.
	CloseAfter int
	// Classes lists error classes (see ErrorClass) that count as
	// dependency failures besides Unavailable errors, such as
	// "connection-refused". Default none.
	Classes []string
}

// Defaults of BreakerConfig.
const (
	DefaultBreakerThreshold        = 5
	DefaultBreakerProbeInterval    = 5 * time.Second
	DefaultBreakerMaxProbeInterval = time.Minute
	DefaultBreakerCloseAfter       = 2
)

// Validate returns an error naming each field out of range.
func (c BreakerConfig) Validate() error {
	var errs []error
	if c.Threshold < 0 {
		errs = append(errs, errors.New("Breaker.Threshold is negative"))
	}
	if c.ProbeInterval < 0 {
		errs = append(errs, errors.New("Breaker.ProbeInterval is negative"))
	}
	if c.MaxProbeInterval < 0 {
		errs = append(errs, errors.New("Breaker.MaxProbeInterval is negative"))
	}
	if c.ProbeInterval > 0 && c.MaxProbeInterval > 0 && c.MaxProbeInterval < c.ProbeInterval {
		errs = append(errs, errors.New("Breaker.MaxProbeInterval is below ProbeInterval"))
	}
	if c.CloseAfter < 0 {
		errs = append(errs, errors.New("Breaker.CloseAfter is negative"))
	}
	return errors.Join(errs...)
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c BreakerConfig) WithDefaults() BreakerConfig {
	if c.Threshold == 0 {
		c.Threshold = DefaultBreakerThreshold
	}
	if c.ProbeInterval == 0 {
		c.ProbeInterval = DefaultBreakerProbeInterval
	}
	if c.MaxProbeInterval == 0 {
		c.MaxProbeInterval = max(DefaultBreakerMaxProbeInterval, c.ProbeInterval)
	}
	if c.CloseAfter == 0 {
		c.CloseAfter = DefaultBreakerCloseAfter
	}
	return c
}

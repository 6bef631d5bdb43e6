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
	// Partial says that only a part of the dependency failed, one that
	// some jobs need and others do not, while the dependency itself
	// answers: see [PartlyUnavailable].
	Partial bool
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

// PartlyUnavailable marks err as the failure of a part of a dependency that
// only some jobs need (one tenant's table, say) while the dependency itself
// answers (the same database served the rest of the job). The job is treated
// as for [Unavailable]: never moved to the dead-letter queue by the
// runtime's own hand, and on the last receive its redrive policy allows it
// waits in a fresh copy. But the circuit breaker does not count it as a
// dependency failure (to the breaker it is an outcome like a success): the
// jobs that do not need that part go on being received, rather than wait
// behind a breaker opened by the jobs that do. When every job fails so, the
// runtimes go on taking them, each retried after its backoff.
// PartlyUnavailable(nil) returns nil.
func PartlyUnavailable(err error) error {
	if err == nil {
		return nil
	}
	return &UnavailableError{Err: err, Partial: true}
}

func (e *UnavailableError) Error() string {
	if e.Partial {
		return "dependency partly unavailable: " + e.Err.Error()
	}
	return "dependency unavailable: " + e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *UnavailableError) Unwrap() error { return e.Err }

// IsUnavailable reports whether err, or an error it wraps, is an
// [UnavailableError], partial or not.
func IsUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u)
}

// IsPartlyUnavailable reports whether the first [UnavailableError] that
// errors.As finds in err is partial (see [PartlyUnavailable]): one that
// marks a part of a dependency, which the circuit breaker does not count.
func IsPartlyUnavailable(err error) bool {
	var u *UnavailableError
	return errors.As(err, &u) && u.Partial
}

// BreakerConfig configures the circuit breaker both runtimes put in front of
// their handler. The zero value is a breaker with the documented defaults,
// on.
//
// The breaker counts dependency failures: errors marked with [Unavailable]
// (the idempotency store marks its own outages so) and errors whose
// [ErrorClass] is listed in Classes, except those marked with
// [PartlyUnavailable] (the failure of a part only some jobs need, such as
// one tenant's table of the idempotency store's writes), which are not
// counted: a success to the breaker, although the job waits. After Threshold of them in a row it
// opens: the worker stops receiving, and the messages it received but has
// not started are released; the Lambda adapter postpones the records it is
// given. After ProbeInterval (jittered, doubling up to MaxProbeInterval
// while probes fail) it lets one message through as a probe; CloseAfter
// successful probes in a row close it. A postponement ([RetryAfter] with a
// nil error, which says nothing of the dependency: an idempotency duplicate
// waiting for its claim, a job of a key its own breaker holds back, see the
// keybreaker package) counts as nothing: it does not break a run of
// failures, and a probe postponed lets the next message probe. So does a
// handler cut short by its context (the runtime stopping, the lease lost,
// the handler timeout) that returns an error the breaker does not count:
// it did not show the dependency healthy. Any other outcome than a
// dependency failure (success, or a failure of the message itself)
// counts as a success.
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
	// each failed probe. It is also how long a probe is waited for: one
	// whose handler has not returned by then (a call that hangs) lets
	// another probe through. Its own outcome, should it come, no longer
	// settles the breaker (the newer probe's does); it counts as any
	// message's, which changes nothing until the breaker is closed.
	// Default 60s.
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

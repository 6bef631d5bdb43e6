package sqsworker

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"
)

// MaxVisibilityTimeout is the longest visibility timeout SQS accepts, and so
// the longest a message can be held back before its next attempt.
const MaxVisibilityTimeout = 12 * time.Hour

// PermanentError marks a failure that retrying will not fix. Runtimes send the
// message straight to the dead-letter queue. Create one with [Permanent] and
// detect it with errors.As.
type PermanentError struct {
	Err error
}

// Permanent marks err as a failure that no retry will fix: the message is not
// retried but moved to the dead-letter queue with failure metadata.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryAfterError asks for the message to come back after Delay instead of
// after the backoff policy's delay. Create one with [RetryAfter] and detect it
// with errors.As.
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

// RetryAfter returns an error that makes the message come back after d,
// clamped to [0, MaxDelay]. A delay longer than a visibility timeout can hold
// (12 hours) is carried out as a delay of any length (see [AttrNotBefore]). Use it when the failure says when to
// try again, such as an HTTP 429 with a Retry-After header. With a nil err the
// message is postponed rather than failed: the runtimes neither count it as a
// failure nor move it to the dead-letter queue on its last attempt. SQS's
// redrive policy still counts the receive: on the last receive it allows, a
// message of a standard queue is postponed in a fresh copy instead (sent with
// the delay, carrying the attempts made; the original deleted), so that its
// next receive is not SQS's move to the dead-letter queue. A FIFO queue's
// keeps its visibility, as a copy would go behind the rest of its group.
func RetryAfter(d time.Duration, err error) error {
	return &RetryAfterError{Delay: ClampLongDelay(d), Err: err}
}

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %s", e.Delay)
	}
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// IsPostponed reports whether err, or an error it wraps, is a
// [RetryAfterError] with a nil Err: a job put off, not failed. It says
// nothing of the job's dependencies, which it did not call: the circuit
// breakers count it as nothing.
func IsPostponed(err error) bool {
	// errors.AsType, not errors.As: errors.As's target escapes, and
	// the breakers call this for every outcome, a success included.
	ra, ok := errors.AsType[*RetryAfterError](err)
	return ok && ra.Err == nil
}

// PanicError is the failure a runtime reports when a handler panics.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the goroutine's stack trace at the panic.
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panic: %v", e.Value) }

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// ErrorClass returns a short, low-cardinality name for the kind of err, used
// in dead-letter metadata, logs and metrics.
//
// It looks at err and every error err wraps, in the order errors.As and
// errors.Is use: depth-first, pre-order — an error, then what its
// Unwrap() error returns, or, for a multi-error (Unwrap() []error, as made by
// errors.Join and by fmt.Errorf with several %w), each wrapped error in turn,
// with everything it wraps, before the next. The class is the first of:
//
//   - the ErrorClass() of the first error in that order with an
//     ErrorClass() string method that returns a non-empty string;
//   - "panic" if errors.As finds a [*PanicError]; "timeout" if
//     errors.Is(err, context.DeadlineExceeded); "canceled" if
//     errors.Is(err, context.Canceled);
//   - the Go type of the first error in that order that is not a mere
//     wrapper, such as "*net.OpError" or "*errors.errorString". The
//     wrappers are fmt.Errorf's error with one %w, [*PermanentError],
//     [*RetryAfterError] and every multi-error: so errors.Join(a, b) has
//     the class of a, unless a holds nothing but wrappers (say
//     RetryAfter(d, nil)), and then that of b;
//   - when err holds nothing but wrappers, the Go type of the first one that
//     wraps nothing, such as "*sqsworker.RetryAfterError" for
//     RetryAfter(d, nil).
func ErrorClass(err error) string {
	if err == nil {
		return ""
	}
	var class string
	walkErrors(err, func(e error) bool {
		if c, ok := e.(interface{ ErrorClass() string }); ok {
			class = c.ErrorClass()
		}
		return class != ""
	})
	if class != "" {
		return class
	}
	var p *PanicError
	switch {
	case errors.As(err, &p):
		return "panic"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	var concrete, empty error
	walkErrors(err, func(e error) bool {
		if !isWrapper(e) {
			concrete = e
			return true
		}
		if empty == nil && wrapsNothing(e) {
			empty = e
		}
		return false
	})
	switch {
	case concrete != nil:
		return reflect.TypeOf(concrete).String()
	case empty != nil:
		return reflect.TypeOf(empty).String()
	}
	return reflect.TypeOf(err).String()
}

// walkErrors calls visit on err and every error it wraps, depth-first and
// pre-order as errors.As does, until visit returns true. It reports whether
// visit did.
func walkErrors(err error, visit func(error) bool) bool {
	for err != nil {
		if visit(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walkErrors(e, visit) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// wrappers are the error types with one wrapped error that only add context
// to it.
var wrappers = map[string]bool{
	"*fmt.wrapError":              true,
	"*sqsworker.PermanentError":   true,
	"*sqsworker.RetryAfterError":  true,
	"*sqsworker.UnavailableError": true,
}

// isWrapper reports whether err only adds context to the errors it wraps: one
// of wrappers, or any multi-error.
func isWrapper(err error) bool {
	if _, multi := err.(interface{ Unwrap() []error }); multi {
		return true
	}
	return wrappers[reflect.TypeOf(err).String()]
}

// wrapsNothing reports whether err wraps no non-nil error.
func wrapsNothing(err error) bool {
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return u.Unwrap() == nil
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if e != nil {
				return false
			}
		}
	}
	return true
}

// ClampDelay limits d to what SQS can express as a visibility timeout:
// [0, MaxVisibilityTimeout].
func ClampDelay(d time.Duration) time.Duration {
	return min(max(d, 0), MaxVisibilityTimeout)
}

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
// clamped to [0, MaxVisibilityTimeout]. Use it when the failure says when to
// try again, such as an HTTP 429 with a Retry-After header. With a nil err the
// message is postponed rather than failed: the runtimes neither count it as a
// failure nor move it to the dead-letter queue on its last attempt (SQS's
// redrive policy still counts the receive).
func RetryAfter(d time.Duration, err error) error {
	return &RetryAfterError{Delay: ClampDelay(d), Err: err}
}

func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %s", e.Delay)
	}
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}

// Unwrap returns the wrapped error.
func (e *RetryAfterError) Unwrap() error { return e.Err }

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
// in dead-letter metadata, logs and metrics:
//
//   - the ErrorClass() of the first error in err's chain that has such a
//     method;
//   - "panic" for a [*PanicError], "timeout" for context.DeadlineExceeded,
//     "canceled" for context.Canceled;
//   - otherwise the Go type of the first error in the chain that is not a
//     mere wrapper (fmt.Errorf's %w, errors.Join, [Permanent], [RetryAfter]),
//     such as "*net.OpError" or "*errors.errorString".
func ErrorClass(err error) string {
	if err == nil {
		return ""
	}
	var c interface{ ErrorClass() string }
	if errors.As(err, &c) {
		return c.ErrorClass()
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
	for {
		name := reflect.TypeOf(err).String()
		next := errors.Unwrap(err)
		if !wrappers[name] || next == nil {
			return name
		}
		err = next
	}
}

// wrappers are error types that only add context to the error they wrap.
var wrappers = map[string]bool{
	"*fmt.wrapError":             true,
	"*fmt.wrapErrors":            true,
	"*sqsworker.PermanentError":  true,
	"*sqsworker.RetryAfterError": true,
}

// ClampDelay limits d to what SQS can express as a visibility timeout:
// [0, MaxVisibilityTimeout].
func ClampDelay(d time.Duration) time.Duration {
	return min(max(d, 0), MaxVisibilityTimeout)
}

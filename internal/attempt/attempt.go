// Package attempt bounds each attempt of an AWS SDK request, so that an
// endpoint that takes requests and never answers costs an attempt, not the
// caller's whole context.
//
// The SDK's HTTP client has no timeout for an answer: a request to an
// endpoint that swallows it waits as long as its context lives. [Bound]
// ends each attempt after a time, and has the SDK's retryer send the
// request again, as it does after a connection reset: the same input, so
// the same idempotency key or deduplication ID, with the retryer's backoff
// and its limit on attempts. An attempt cut short may have been applied,
// its answer late: the retry is then a request sent twice, as after a lost
// answer, which the callers are built for.
package attempt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/smithy-go/middleware"
)

// ID is the name of the middleware Bound adds.
const ID = "sqsworkerAttemptTimeout"

// errCut is the cause of an attempt's context ended by Bound.
var errCut = errors.New("attempt timed out")

// TimeoutError is the error of an attempt Bound ended: it had no answer
// within After. The SDK's retryer retries it (RetryableError), and it is a
// timeout to it (Timeout), which costs more of its retry quota than another
// failure. It wraps context.DeadlineExceeded, not the SDK's error for a
// cancelled request, which the retryer would not retry.
type TimeoutError struct {
	After time.Duration
	// Msg is the text of the error the cut attempt returned.
	Msg string
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("no answer within %s (the attempt was given up): %s", e.After, e.Msg)
}

// Unwrap returns context.DeadlineExceeded.
func (e *TimeoutError) Unwrap() error { return context.DeadlineExceeded }

// RetryableError reports true: the SDK's retryer sends the request again.
func (e *TimeoutError) RetryableError() bool { return true }

// Timeout reports true.
func (e *TimeoutError) Timeout() bool { return true }

// Bound returns an option for a client's APIOptions that ends each attempt
// of a request after d: it sits in the finalize step after the SDK's retry
// middleware, which sends each attempt through it. An attempt it ends
// returns a *TimeoutError, unless the request's own context ended too.
func Bound(d time.Duration) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc(ID,
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				actx, cancel := context.WithTimeoutCause(ctx, d, errCut)
				defer cancel()
				out, md, err := next.HandleFinalize(actx, in)
				if err != nil && ctx.Err() == nil && errors.Is(context.Cause(actx), errCut) {
					err = &TimeoutError{After: d, Msg: err.Error()}
				}
				return out, md, err
			}), middleware.After)
	}
}

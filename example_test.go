package sqsworker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sqsworker/sqsworker"
)

var errInvalidOrder = errors.New("invalid order")

// A handler decides each message's fate by what it returns.
func ExampleHandlerFunc() {
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "ok":
			return nil // deleted
		case "malformed":
			return sqsworker.Permanent(errInvalidOrder) // straight to the DLQ
		case "rate-limited":
			return sqsworker.RetryAfter(30*time.Second, errors.New("429 from upstream"))
		default:
			return errors.New("upstream unavailable") // retried with backoff
		}
	})
	for _, body := range []string{"ok", "malformed", "rate-limited", "other"} {
		err := h.HandleMessage(context.Background(), &sqsworker.Message{Body: body})
		var p *sqsworker.PermanentError
		var ra *sqsworker.RetryAfterError
		switch {
		case err == nil:
			fmt.Println(body, "-> delete")
		case errors.As(err, &p):
			fmt.Println(body, "-> dead-letter:", sqsworker.ErrorClass(err))
		case errors.As(err, &ra):
			fmt.Println(body, "-> retry after", ra.Delay)
		default:
			fmt.Println(body, "-> retry with backoff")
		}
	}
	// Output:
	// ok -> delete
	// malformed -> dead-letter: *errors.errorString
	// rate-limited -> retry after 30s
	// other -> retry with backoff
}

// Middleware wraps handlers; the first one given to Chain runs first.
func ExampleChain() {
	logging := func(next sqsworker.Handler) sqsworker.Handler {
		return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			fmt.Println("before", m.ID)
			err := next.HandleMessage(ctx, m)
			fmt.Println("after", m.ID, err)
			return err
		})
	}
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		fmt.Println("handling", m.ID)
		return nil
	}), logging)
	_ = h.HandleMessage(context.Background(), &sqsworker.Message{ID: "m-1"})
	// Output:
	// before m-1
	// handling m-1
	// after m-1 <nil>
}

// The default backoff draws each delay from [0, min(cap, base·2^(n-1))].
func ExampleExponentialBackoff() {
	b := sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Minute}
	for attempt := 1; attempt <= 8; attempt++ {
		fmt.Printf("attempt %d: up to %s\n", attempt, b.Ceiling(attempt))
	}
	// Output:
	// attempt 1: up to 1s
	// attempt 2: up to 2s
	// attempt 3: up to 4s
	// attempt 4: up to 8s
	// attempt 5: up to 16s
	// attempt 6: up to 32s
	// attempt 7: up to 1m0s
	// attempt 8: up to 1m0s
}

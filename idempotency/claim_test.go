package idempotency

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("idempotency: completing key %q: %w", "k", ErrNotHolder), false},
		{&smithy.OperationError{Err: &smithy.GenericAPIError{Code: "ValidationException", Message: "Item size has exceeded the maximum allowed size"}}, false},
		{&smithy.OperationError{Err: &types.ResourceNotFoundException{}}, false},
		{&smithy.OperationError{Err: &types.ProvisionedThroughputExceededException{}}, true},
		{&smithy.OperationError{Err: &types.InternalServerError{}}, true},
		{&smithy.OperationError{Err: &smithy.GenericAPIError{Code: "ThrottlingException", Fault: smithy.FaultClient}}, true},
		{context.DeadlineExceeded, true},
		{errors.New("connection reset by peer"), true},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestBackoffBounded(t *testing.T) {
	for n := 1; n < 100; n++ {
		d := min(retryBase<<min(n-1, 10), retryCap)
		if b := backoff(n); b < d/2 || b > d {
			t.Errorf("backoff(%d) = %s, want within %s..%s", n, b, d/2, d)
		}
	}
}

// retry stops at its deadline, after the first attempt whatever the
// deadline, and at once on an error no retry fixes.
func TestRetryBounded(t *testing.T) {
	g := &Guard{}
	calls := 0
	err := g.retry(context.Background(), time.Now().Add(-time.Second), func(context.Context) error { calls++; return errors.New("down") })
	if err == nil || calls != 1 {
		t.Errorf("past deadline: %v after %d calls, want one call", err, calls)
	}
	calls = 0
	err = g.retry(context.Background(), time.Now().Add(time.Minute), func(context.Context) error { calls++; return ErrNotHolder })
	if !errors.Is(err, ErrNotHolder) || calls != 1 {
		t.Errorf("not the holder: %v after %d calls", err, calls)
	}
	calls = 0
	err = g.retry(context.Background(), time.Now().Add(time.Minute), func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("down")
		}
		return nil
	})
	if err != nil || calls != 3 || g.storeErrors.Load() != 4 {
		t.Errorf("passing failure: %v after %d calls, %d store errors", err, calls, g.storeErrors.Load())
	}
}

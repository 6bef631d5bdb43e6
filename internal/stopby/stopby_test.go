package stopby

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestWithFrom(t *testing.T) {
	if _, ok := From(context.Background()); ok {
		t.Error("a context without a stop time has one")
	}
	at := time.Now().Add(time.Second)
	ctx, cancel := context.WithTimeout(With(context.Background(), at, time.Time{}), time.Minute)
	defer cancel()
	if got, ok := From(ctx); !ok || !got.Equal(at) {
		t.Errorf("From = %v, %v, want %v", got, ok, at)
	}
}

func TestCause(t *testing.T) {
	c := Cause("worker: stopping")
	if c.Error() != "worker: stopping" || !errors.Is(c, ErrStopping) || !errors.Is(fmt.Errorf("wrapped: %w", c), ErrStopping) {
		t.Errorf("Cause: %v, matching ErrStopping %v", c, errors.Is(c, ErrStopping))
	}
	if errors.Is(errors.New("worker: stopping"), ErrStopping) || errors.Is(c, context.Canceled) {
		t.Error("ErrStopping matched by another error, or Cause matches another error")
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(c)
	child, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	if !errors.Is(context.Cause(child), ErrStopping) {
		t.Errorf("the cause of a child context: %v", context.Cause(child))
	}
}

// End gives the soft time the context carries, or Late from now when that
// is later but no later than its hard time, and nothing without one.
func TestEnd(t *testing.T) {
	now := time.Now()
	if _, ok := End(context.Background(), now); ok {
		t.Error("End of a context carrying no time: ok")
	}
	at := now.Add(time.Second)
	if got, ok := End(With(context.Background(), at, time.Time{}), now); !ok || !got.Equal(at) {
		t.Errorf("End a second ahead = %v, %v, want %v", got, ok, at)
	}
	if got, ok := End(With(context.Background(), now.Add(-time.Second), time.Time{}), now); !ok || !got.Equal(now.Add(Late)) {
		t.Errorf("End a second past = %v, %v, want Late from now", got, ok)
	}
	// Late from now goes no further than the hard time: the runtime stops
	// waiting for the job's outcome then.
	hard := now.Add(50 * time.Millisecond)
	if got, ok := End(With(context.Background(), now.Add(-time.Second), hard), now); !ok || !got.Equal(hard) {
		t.Errorf("End past the soft time, 50ms before the hard one = %v, %v, want the hard time", got, ok)
	}
}

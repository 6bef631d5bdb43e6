package sqsworker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

func TestExponentialBackoffCeiling(t *testing.T) {
	b := sqsworker.ExponentialBackoff{Base: time.Second, Cap: 10 * time.Second}
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 1000: 10 * time.Second} {
		if got := b.Ceiling(attempt); got != want {
			t.Errorf("Ceiling(%d) = %s, want %s", attempt, got, want)
		}
	}
	var zero sqsworker.ExponentialBackoff
	if got := zero.Ceiling(100); got != sqsworker.DefaultBackoffCap {
		t.Errorf("zero value cap = %s", got)
	}
	huge := sqsworker.ExponentialBackoff{Cap: 100 * time.Hour}
	if got := huge.Ceiling(100); got != sqsworker.MaxVisibilityTimeout {
		t.Errorf("cap above 12h gives %s", got)
	}
}

func TestExponentialBackoffFullJitter(t *testing.T) {
	b := sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Minute}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := b.Delay(4, nil)
		if d < 0 || d > 8*time.Second {
			t.Fatalf("Delay(4) = %s, outside [0, 8s]", d)
		}
		seen[d.Truncate(time.Second)] = true
	}
	if len(seen) < 6 {
		t.Errorf("delays not spread over [0, 8s]: %v", seen)
	}
	fixed := sqsworker.ExponentialBackoff{Base: time.Second, Jitter: func() float64 { return 0.5 }}
	if d := fixed.Delay(3, nil); d != 2*time.Second {
		t.Errorf("Delay with jitter 0.5 = %s, want 2s", d)
	}
}

func TestControlErrors(t *testing.T) {
	if sqsworker.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	base := errors.New("bad input")
	err := fmt.Errorf("handling: %w", sqsworker.Permanent(base))
	var p *sqsworker.PermanentError
	if !errors.As(err, &p) || !errors.Is(err, base) {
		t.Errorf("Permanent not matched through wrapping: %v", err)
	}
	var ra *sqsworker.RetryAfterError
	if !errors.As(sqsworker.RetryAfter(20*time.Hour, base), &ra) || ra.Delay != sqsworker.MaxVisibilityTimeout {
		t.Errorf("RetryAfter not clamped to 12h: %+v", ra)
	}
	if !errors.As(sqsworker.RetryAfter(-time.Second, nil), &ra) || ra.Delay != 0 || ra.Error() != "retry after 0s" {
		t.Errorf("RetryAfter(-1s, nil) = %+v", ra)
	}
}

type classed struct{}

func (classed) Error() string      { return "x" }
func (classed) ErrorClass() string { return "my-class" }

func TestErrorClass(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("x"), "*errors.errorString"},
		{fmt.Errorf("a: %w", &fs.PathError{Op: "open", Err: fs.ErrNotExist}), "*fs.PathError"},
		{fmt.Errorf("a: %w, %w", &fs.PathError{Op: "open", Err: fs.ErrNotExist}, errors.New("y")), "*fmt.wrapErrors"},
		{fmt.Errorf("not wrapped: %v", &fs.PathError{}), "*errors.errorString"},
		{sqsworker.Permanent(fmt.Errorf("w: %w", classed{})), "my-class"},
		{&sqsworker.PanicError{Value: "boom"}, "panic"},
		{fmt.Errorf("op: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "canceled"},
		{sqsworker.Permanent(&fs.PathError{Op: "open", Path: "p"}), "*fs.PathError"},
	} {
		if got := sqsworker.ErrorClass(c.err); got != c.want {
			t.Errorf("ErrorClass(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

func TestChainOrder(t *testing.T) {
	var trace []string
	mw := func(name string) sqsworker.Middleware {
		return func(next sqsworker.Handler) sqsworker.Handler {
			return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				trace = append(trace, name)
				return next.HandleMessage(ctx, m)
			})
		}
	}
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		trace = append(trace, "h")
		return nil
	}), mw("a"), mw("b"))
	_ = h.HandleMessage(context.Background(), &sqsworker.Message{})
	if got := strings.Join(trace, ","); got != "a,b,h" {
		t.Errorf("order %s, want a,b,h", got)
	}
}

func TestFailureRoundTrip(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 123, time.UTC)
	f := sqsworker.Failure{Error: "boom\x00\x01 " + strings.Repeat("é", 2000), ErrorClass: "panic", Attempts: 3,
		FirstReceived: now, FailedAt: now.Add(time.Minute), SourceQueue: "q", MessageID: "id"}
	few := map[string]sqsworker.MessageAttribute{"a": {DataType: "String", StringValue: "1"}, sqsworker.AttrFailureClass: {DataType: "String", StringValue: "old"}}
	attrs, ok := f.AddTo(few)
	if !ok || len(attrs) != 9 || attrs["a"].StringValue != "1" {
		t.Fatalf("AddTo = %v, %v", attrs, ok)
	}
	got, ok := sqsworker.ParseFailure(attrs)
	if !ok || got.ErrorClass != "panic" || got.Attempts != 3 || !got.FirstReceived.Equal(now) || got.Host != "" {
		t.Errorf("ParseFailure = %+v", got)
	}
	if len(got.Error) > sqsworker.MaxFailureErrorLen || !strings.HasPrefix(got.Error, "boom\uFFFD\uFFFD ") {
		t.Errorf("error text not made safe and short: %d bytes %.12q", len(got.Error), got.Error)
	}
	many := map[string]sqsworker.MessageAttribute{}
	for i := range 9 {
		many[fmt.Sprint(i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	attrs, ok = f.AddTo(many)
	if !ok || len(attrs) != 10 || attrs[sqsworker.AttrFailure].DataType != "String.json" {
		t.Fatalf("AddTo with 9 attributes = %v, %v", attrs, ok)
	}
	if got, ok := sqsworker.ParseFailure(attrs); !ok || got.Attempts != 3 || got.MessageID != "id" {
		t.Errorf("ParseFailure(JSON) = %+v, %v", got, ok)
	}
	many["9"] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	if attrs, ok := f.AddTo(many); ok || len(attrs) != 10 {
		t.Errorf("AddTo with 10 attributes = %d attributes, %v; want the originals, false", len(attrs), ok)
	}
	if _, ok := sqsworker.ParseFailure(many); ok {
		t.Error("ParseFailure found metadata in plain attributes")
	}
}

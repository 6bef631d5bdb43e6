package sqsworker_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
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
	// A cap above 12h (a webhook's 24h) holds: the runtimes carry such a
	// delay out with a waiting copy of the message.
	day := sqsworker.ExponentialBackoff{Cap: 24 * time.Hour}
	if got := day.Ceiling(100); got != 24*time.Hour {
		t.Errorf("cap of 24h gives %s", got)
	}
	huge := sqsworker.ExponentialBackoff{Cap: 1000 * 24 * time.Hour}
	if got := huge.Ceiling(100); got != sqsworker.MaxDelay {
		t.Errorf("cap above MaxDelay gives %s", got)
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
	if !errors.As(sqsworker.RetryAfter(20*time.Hour, base), &ra) || ra.Delay != 20*time.Hour {
		t.Errorf("RetryAfter(20h) not kept: %+v", ra)
	}
	if !errors.As(sqsworker.RetryAfter(400*24*time.Hour, base), &ra) || ra.Delay != sqsworker.MaxDelay {
		t.Errorf("RetryAfter not clamped to MaxDelay: %+v", ra)
	}
	if !errors.As(sqsworker.RetryAfter(-time.Second, nil), &ra) || ra.Delay != 0 || ra.Error() != "retry after 0s" {
		t.Errorf("RetryAfter(-1s, nil) = %+v", ra)
	}
}

// Unavailable and PartlyUnavailable both mark a dependency's failure,
// through wrapping; only the partial one says so to IsPartlyUnavailable,
// and the outermost mark decides.
func TestUnavailableMarks(t *testing.T) {
	if sqsworker.Unavailable(nil) != nil || sqsworker.PartlyUnavailable(nil) != nil {
		t.Error("Unavailable(nil) or PartlyUnavailable(nil) != nil")
	}
	base := errors.New("table tenant-b missing")
	whole := fmt.Errorf("commit: %w", sqsworker.Unavailable(base))
	part := fmt.Errorf("commit: %w", sqsworker.PartlyUnavailable(base))
	for _, c := range []struct {
		err           error
		unavail, part bool
	}{{base, false, false}, {whole, true, false}, {part, true, true}, {sqsworker.Unavailable(part), true, false}} {
		if got := sqsworker.IsUnavailable(c.err); got != c.unavail || !errors.Is(c.err, base) {
			t.Errorf("IsUnavailable(%v) = %v, want %v", c.err, got, c.unavail)
		}
		if got := sqsworker.IsPartlyUnavailable(c.err); got != c.part {
			t.Errorf("IsPartlyUnavailable(%v) = %v, want %v", c.err, got, c.part)
		}
	}
	if sqsworker.ErrorClass(part) != sqsworker.ErrorClass(base) {
		t.Errorf("class of a partial failure %q, want its cause's %q", sqsworker.ErrorClass(part), sqsworker.ErrorClass(base))
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
		{fmt.Errorf("a: %w, %w", &fs.PathError{Op: "open", Err: fs.ErrNotExist}, errors.New("y")), "*fs.PathError"},
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

type emptyClass struct{}

func (emptyClass) Error() string      { return "e" }
func (emptyClass) ErrorClass() string { return "" }

// TestErrorClassMultiErrors: errors.Join and fmt.Errorf with several %w are
// unwrapped as ErrorClass documents, never named by their own types.
func TestErrorClassMultiErrors(t *testing.T) {
	pathErr := &fs.PathError{Op: "open", Path: "p", Err: fs.ErrNotExist}
	opErr := &net.OpError{Op: "dial", Err: errors.New("refused")}
	postponed := sqsworker.RetryAfter(time.Second, nil) // a wrapper of nothing
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"join: the first error's type", errors.Join(pathErr, opErr), "*fs.PathError"},
		{"join, other order", errors.Join(opErr, pathErr), "*net.OpError"},
		{"several %w", fmt.Errorf("a: %w; b: %w", opErr, pathErr), "*net.OpError"},
		{"join of wrapped errors", errors.Join(fmt.Errorf("ctx: %w", sqsworker.Permanent(pathErr)), opErr), "*fs.PathError"},
		{"join inside wrappers", sqsworker.Permanent(fmt.Errorf("ctx: %w", errors.Join(pathErr, opErr))), "*fs.PathError"},
		{"nested joins, depth first", errors.Join(errors.Join(fmt.Errorf("x: %w", opErr)), pathErr), "*net.OpError"},
		{"a first error of wrappers only is skipped", errors.Join(fmt.Errorf("ctx: %w", postponed), pathErr), "*fs.PathError"},
		{"nothing but wrappers: the first that wraps nothing", errors.Join(postponed, sqsworker.RetryAfter(2*time.Second, nil)), "*sqsworker.RetryAfterError"},
		{"an ErrorClass method anywhere wins", errors.Join(pathErr, fmt.Errorf("w: %w", classed{})), "my-class"},
		{"an empty ErrorClass is no class", errors.Join(emptyClass{}, classed{}), "my-class"},
		{"an empty ErrorClass alone: its type", errors.Join(emptyClass{}), "sqsworker_test.emptyClass"},
		{"a panic anywhere", errors.Join(pathErr, &sqsworker.PanicError{Value: "boom"}), "panic"},
		{"a timeout anywhere", fmt.Errorf("%w, %w", pathErr, context.DeadlineExceeded), "timeout"},
		{"a cancellation anywhere", errors.Join(opErr, fmt.Errorf("w: %w", context.Canceled)), "canceled"},
		{"a wrapper of nothing alone", postponed, "*sqsworker.RetryAfterError"},
		{"wrapped wrapper of nothing", fmt.Errorf("ctx: %w", postponed), "*sqsworker.RetryAfterError"},
	} {
		if got := sqsworker.ErrorClass(c.err); got != c.want {
			t.Errorf("%s: ErrorClass(%v) = %q, want %q", c.name, c.err, got, c.want)
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

func TestMessageSize(t *testing.T) {
	attrs := map[string]sqsworker.MessageAttribute{
		"s":   {DataType: "String", StringValue: "héllo"},                           // 1 + 6 + 6
		"n":   {DataType: "Number", StringValue: "42"},                              // 1 + 6 + 2
		"bin": {DataType: "Binary.gz", BinaryValue: []byte{1, 2, 3}},                // 3 + 9 + 3
		"b2":  {DataType: "Binary", BinaryValue: []byte{1}, StringValue: "ignored"}, // 2 + 6 + 1
	}
	if got, want := sqsworker.MessageSize("bödy", attrs), 5+13+9+15+9; got != want {
		t.Errorf("MessageSize = %d, want %d", got, want)
	}
	if got := sqsworker.MessageSize("", nil); got != 0 {
		t.Errorf("MessageSize of nothing = %d", got)
	}
}

// TestFailureAddWithin: the metadata goes one attribute per field, else as
// JSON, else not at all, whichever first keeps the message within the size
// limit and SQS's ten attributes.
func TestFailureAddWithin(t *testing.T) {
	f := sqsworker.Failure{Error: "boom", ErrorClass: "*fs.PathError", Attempts: 2, SourceQueue: "https://q", MessageID: "m-1",
		FailedAt: time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)}
	own := map[string]sqsworker.MessageAttribute{"k": {DataType: "String", StringValue: "v"}, sqsworker.AttrFailureHost: {DataType: "String", StringValue: "old"}}
	ownSize := sqsworker.MessageSize("", map[string]sqsworker.MessageAttribute{"k": own["k"]})
	fieldsAttrs, _ := f.AddTo(nil)
	fields := sqsworker.MessageSize("", fieldsAttrs)
	nine := map[string]sqsworker.MessageAttribute{}
	for i := range 9 {
		nine[fmt.Sprint(i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	jsonAttrs, _ := f.AddTo(nine)
	json := sqsworker.MessageSize("", jsonAttrs) - sqsworker.MessageSize("", nine)
	if json >= fields {
		t.Fatalf("JSON form %d bytes, fields %d: the cases assume JSON is smaller", json, fields)
	}
	const limit = 4096
	for _, c := range []struct {
		body, maxSize int
		want          string
	}{
		{100, limit, "fields"},
		{limit - ownSize - fields, limit, "fields"},
		{limit - ownSize - fields + 1, limit, "json"},
		{limit - ownSize - json, limit, "json"},
		{limit - ownSize - json + 1, limit, "none"},
		{limit + 10, limit, "none"},
		{sqsworker.MaxMessageSize - ownSize - fields, 0, "fields"}, // 0: 1 MiB
		{sqsworker.MaxMessageSize - ownSize - fields + 1, 0, "json"},
		{sqsworker.MaxMessageSize - 3, -1, "none"},
	} {
		body := strings.Repeat("x", c.body)
		attrs, ok := f.AddWithin(body, own, c.maxSize)
		_, isJSON := attrs[sqsworker.AttrFailure]
		_, isFields := attrs[sqsworker.AttrFailureClass]
		got := "none"
		switch {
		case isJSON && isFields:
			got = "both"
		case isJSON:
			got = "json"
		case isFields:
			got = "fields"
		}
		if got != c.want || ok != (c.want != "none") {
			t.Errorf("AddWithin(%d bytes, max %d) = %s, %v; want %s", c.body, c.maxSize, got, ok, c.want)
		}
		if attrs["k"].StringValue != "v" || (got != "fields" && len(attrs) != map[string]int{"json": 2, "none": 1}[got]) {
			t.Errorf("AddWithin(%d bytes, max %d) attributes = %v", c.body, c.maxSize, attrs)
		}
		if got != "none" {
			if p, ok := sqsworker.ParseFailure(attrs); !ok || p.Host != "" || p.MessageID != "m-1" {
				t.Errorf("ParseFailure = %+v, %v (the old host must be gone)", p, ok)
			}
		}
		if most := cmp.Or(max(c.maxSize, 0), sqsworker.MaxMessageSize); got != "none" && sqsworker.MessageSize(body, attrs) > most {
			t.Errorf("AddWithin(%d bytes) made a message of %d bytes, over %d", c.body, sqsworker.MessageSize(body, attrs), most)
		}
	}
	// The attribute count still rules: ten own attributes leave no room.
	ten := maps.Clone(nine)
	ten["9"] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	if attrs, ok := f.AddWithin("b", ten, 0); ok || len(attrs) != 10 {
		t.Errorf("AddWithin with ten attributes = %d attributes, %v", len(attrs), ok)
	}
}

// TestFailureAttributeSafe: every text field of the metadata is made safe for
// SQS, not only the error.
func TestFailureAttributeSafe(t *testing.T) {
	f := sqsworker.Failure{Error: "e\x00", ErrorClass: "c\x01", SourceQueue: "q\x02", MessageID: "m\uFFFE", Host: "h\x7f\x1b"}
	for _, attrs := range []map[string]sqsworker.MessageAttribute{
		func() map[string]sqsworker.MessageAttribute { a, _ := f.AddTo(nil); return a }(),
		func() map[string]sqsworker.MessageAttribute {
			nine := map[string]sqsworker.MessageAttribute{}
			for i := range 9 {
				nine[fmt.Sprint(i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
			}
			a, _ := f.AddTo(nine)
			return a
		}(),
	} {
		got, ok := sqsworker.ParseFailure(attrs)
		want := sqsworker.Failure{Error: "e\uFFFD", ErrorClass: "c\uFFFD", SourceQueue: "q\uFFFD", MessageID: "m\uFFFD", Host: "h\x7f\uFFFD"}
		if !ok || got != want {
			t.Errorf("ParseFailure = %#v, want %#v", got, want)
		}
	}
}

func TestIsPostponed(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{sqsworker.RetryAfter(time.Minute, nil), true},
		{fmt.Errorf("wrapped: %w", sqsworker.RetryAfter(time.Minute, nil)), true},
		{sqsworker.RetryAfter(time.Minute, errors.New("429")), false},
		{sqsworker.Unavailable(errors.New("down")), false},
	} {
		if got := sqsworker.IsPostponed(tc.err); got != tc.want {
			t.Errorf("IsPostponed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	// The circuit breakers ask it of every outcome: a success costs no
	// allocation.
	if n := testing.AllocsPerRun(100, func() { sqsworker.IsPostponed(nil) }); n != 0 {
		t.Errorf("IsPostponed(nil) allocates %v times, want 0", n)
	}
}

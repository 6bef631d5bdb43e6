package sqsotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/goleak"

	"github.com/sqsworker/sqsworker"
	sqsotel "github.com/sqsworker/sqsworker/sqsotel"
)

// TestMain sets the global propagator to W3C Trace Context, as a program that
// traces does; the global tracer provider is never set in this process (see
// TestGlobalProviderSetLater). It fails the run if a goroutine is left
// behind.
func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the SDK's shared HTTP transport.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

const (
	queueURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs"
	// A producer span's context, in both formats.
	traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	xrayHeader  = "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=1"
)

var producerSC = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
	SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
	TraceFlags: trace.FlagsSampled,
	Remote:     true,
})

// newTracer returns a provider that samples every span into a recorder.
func newTracer(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, rec
}

// message returns a message of the queue at queueURL, on its second attempt.
func message() *sqsworker.Message {
	return &sqsworker.Message{
		ID:           "6f1c2ae4-0d1e-4f5b-9a39-2b8f1c4e7d10",
		Body:         `{"order":42}`,
		QueueURL:     queueURL,
		ReceiveCount: 2,
		Attributes:   map[string]string{sqsworker.AttrReceiveCount: "2"},
	}
}

func withTraceparent(m *sqsworker.Message) *sqsworker.Message {
	m.MessageAttributes = map[string]sqsworker.MessageAttribute{
		"traceparent": {DataType: "String", StringValue: traceparent},
		"tracestate":  {DataType: "String", StringValue: "vendor=opaque"},
	}
	return m
}

func withXRay(m *sqsworker.Message) *sqsworker.Message {
	m.Attributes[sqsworker.AttrAWSTraceHeader] = xrayHeader
	return m
}

// run handles m with h wrapped in the middleware, and returns the span the
// handler's context carried, the one span recorded, and the handler's error.
func run(t *testing.T, rec *tracetest.SpanRecorder, m *sqsworker.Message, h sqsworker.HandlerFunc, opts ...sqsotel.Option) (trace.SpanContext, sdktrace.ReadOnlySpan, error) {
	t.Helper()
	var inHandler trace.SpanContext
	wrapped := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		inHandler = trace.SpanContextFromContext(ctx)
		if h == nil {
			return nil
		}
		return h(ctx, m)
	}), sqsotel.Middleware(opts...))
	err := wrapped.HandleMessage(context.Background(), m)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans recorded, want 1", len(spans))
	}
	return inHandler, spans[0], err
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// checkAttrs checks that the span has the attributes want, given as strings,
// and none of absent.
func checkAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string, absent ...string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[attribute.Key(k)]; !ok || g.String() != v {
			t.Errorf("attribute %s = %q (present: %v), want %q", k, g.String(), ok, v)
		}
	}
	for _, k := range absent {
		if g, ok := got[attribute.Key(k)]; ok {
			t.Errorf("attribute %s = %q, want none", k, g.String())
		}
	}
}

func checkLinkedTo(t *testing.T, s sdktrace.ReadOnlySpan, want trace.SpanContext) {
	t.Helper()
	if s.Parent().IsValid() {
		t.Errorf("consumer span has the parent %v, want a root span", s.Parent())
	}
	if s.SpanContext().TraceID() == want.TraceID() {
		t.Errorf("consumer span is in the producer's trace %v, want a trace of its own", want.TraceID())
	}
	if len(s.Links()) != 1 {
		t.Fatalf("%d links, want 1", len(s.Links()))
	}
	if l := s.Links()[0].SpanContext; l.TraceID() != want.TraceID() || l.SpanID() != want.SpanID() || l.IsSampled() != want.IsSampled() {
		t.Errorf("link to %v, want %v", l, want)
	}
}

func checkChildOf(t *testing.T, s sdktrace.ReadOnlySpan, want trace.SpanContext) {
	t.Helper()
	if p := s.Parent(); p.TraceID() != want.TraceID() || p.SpanID() != want.SpanID() || !p.IsRemote() {
		t.Errorf("parent %v, want the remote producer span %v", p, want)
	}
	if s.SpanContext().TraceID() != want.TraceID() {
		t.Errorf("trace %v, want the producer's %v", s.SpanContext().TraceID(), want.TraceID())
	}
	if len(s.Links()) != 0 {
		t.Errorf("%d links, want none", len(s.Links()))
	}
}

// The consumer span, linked to the producer's span from the traceparent
// attribute, has the messaging attributes; the handler's ctx carries it.
func TestMiddlewareLinksToProducer(t *testing.T) {
	tp, rec := newTracer(t)
	inHandler, s, err := run(t, rec, withTraceparent(message()), nil, sqsotel.WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	if s.Name() != "process jobs" || s.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("span %q of kind %v, want %q of kind consumer", s.Name(), s.SpanKind(), "process jobs")
	}
	if !inHandler.Equal(s.SpanContext()) {
		t.Errorf("the handler's ctx carries %v, want the consumer span %v", inHandler, s.SpanContext())
	}
	checkLinkedTo(t, s, producerSC)
	if ts := s.Links()[0].SpanContext.TraceState().String(); ts != "vendor=opaque" {
		t.Errorf("link's trace state %q, want the tracestate attribute", ts)
	}
	checkAttrs(t, s, map[string]string{
		"messaging.system":            "aws_sqs",
		"messaging.operation.type":    "process",
		"messaging.operation.name":    "process",
		"messaging.destination.name":  "jobs",
		"messaging.message.id":        "6f1c2ae4-0d1e-4f5b-9a39-2b8f1c4e7d10",
		"messaging.message.body.size": "12",
		"aws.sqs.queue.url":           queueURL,
		"sqsworker.attempt":           "2",
	}, "sqsworker.message.group_id", "error.type")
	if s.Status().Code != codes.Unset {
		t.Errorf("status %v, want unset", s.Status())
	}
	if s.InstrumentationScope().Name != sqsotel.ScopeName {
		t.Errorf("scope %q, want %q", s.InstrumentationScope().Name, sqsotel.ScopeName)
	}
}

// With AsChild the consumer span is the producer span's child.
func TestMiddlewareAsChild(t *testing.T) {
	tp, rec := newTracer(t)
	inHandler, s, err := run(t, rec, withTraceparent(message()), nil, sqsotel.WithTracerProvider(tp), sqsotel.AsChild())
	if err != nil {
		t.Fatal(err)
	}
	checkChildOf(t, s, producerSC)
	if !inHandler.Equal(s.SpanContext()) {
		t.Errorf("the handler's ctx carries %v, want the consumer span %v", inHandler, s.SpanContext())
	}
}

// A span the handler's ctx already carries (a Lambda invocation's, say) is
// the consumer span's parent; the producer's is a link.
func TestMiddlewareKeepsAmbientParent(t *testing.T) {
	tp, rec := newTracer(t)
	ctx, outer := tp.Tracer("test").Start(context.Background(), "invocation")
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		sqsotel.Middleware(sqsotel.WithTracerProvider(tp)))
	if err := h.HandleMessage(ctx, withTraceparent(message())); err != nil {
		t.Fatal(err)
	}
	outer.End()
	s := rec.Ended()[0]
	if s.Parent().SpanID() != outer.SpanContext().SpanID() {
		t.Errorf("parent %v, want the ambient span %v", s.Parent(), outer.SpanContext())
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != producerSC.SpanID() {
		t.Errorf("links %v, want the producer span", s.Links())
	}
}

// Without trace attributes, the producer's span is found in SQS's
// AWSTraceHeader (X-Ray); the W3C attributes win when both are there.
func TestMiddlewareAWSTraceHeader(t *testing.T) {
	otherParent := "00-11111111111111111111111111111111-2222222222222222-01"
	for _, c := range []struct {
		name    string
		m       *sqsworker.Message
		asChild bool
		want    trace.SpanContext
	}{
		{"link", withXRay(message()), false, producerSC},
		{"child", withXRay(message()), true, producerSC},
		{"unsampled", func() *sqsworker.Message {
			m := message()
			m.Attributes[sqsworker.AttrAWSTraceHeader] = "Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331;Sampled=0;Lineage=a87bd80c:1|68fd508a:5"
			return m
		}(), false, producerSC.WithTraceFlags(0)},
		{"W3C first", func() *sqsworker.Message {
			m := withXRay(message())
			m.MessageAttributes = map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: otherParent}}
			return m
		}(), false, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11},
			SpanID:     trace.SpanID{0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22},
			TraceFlags: trace.FlagsSampled,
		})},
		{"other attributes only", func() *sqsworker.Message {
			m := withXRay(message())
			m.MessageAttributes = map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}}
			return m
		}(), true, producerSC},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp, rec := newTracer(t)
			opts := []sqsotel.Option{sqsotel.WithTracerProvider(tp)}
			if c.asChild {
				opts = append(opts, sqsotel.AsChild())
			}
			_, s, _ := run(t, rec, c.m, nil, opts...)
			if c.asChild {
				checkChildOf(t, s, c.want)
			} else {
				checkLinkedTo(t, s, c.want)
			}
		})
	}
}

// A malformed AWSTraceHeader, or none, gives a root span without links.
func TestMiddlewareNoProducerSpan(t *testing.T) {
	for _, h := range []string{
		"",
		"Root=1-0af76519-16cd43dd8448eb211c80319c;Sampled=1", // no parent: X-Ray's own root segment
		"Parent=b7ad6b7169203331;Sampled=1",
		"Root=1-0af76519-16cd43dd8448eb211c80319;Parent=b7ad6b7169203331",  // 23 digits
		"Root=2-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331", // version 2
		"Root=1-0af76519x16cd43dd8448eb211c80319c;Parent=b7ad6b7169203331", // separator
		"Root=1-0af76519-16cd43dd8448eb211c80319g;Parent=b7ad6b7169203331", // not hex
		"Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=b7ad6b716920333",  // 15 digits
		"Root=1-00000000-000000000000000000000000;Parent=b7ad6b7169203331", // zero trace ID
		"Root=1-0af76519-16cd43dd8448eb211c80319c;Parent=0000000000000000", // zero span ID
		"garbage",
	} {
		t.Run(h, func(t *testing.T) {
			tp, rec := newTracer(t)
			m := message()
			if h != "" {
				m.Attributes[sqsworker.AttrAWSTraceHeader] = h
			}
			m.MessageAttributes = map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: "not a traceparent"}}
			_, s, _ := run(t, rec, m, nil, sqsotel.WithTracerProvider(tp), sqsotel.AsChild())
			if s.Parent().IsValid() || len(s.Links()) != 0 {
				t.Errorf("parent %v, links %v; want a root span without links", s.Parent(), s.Links())
			}
		})
	}
}

// FIFO messages carry their group; a queue URL without a path still names
// the span.
func TestMiddlewareFIFOAndNames(t *testing.T) {
	tp, rec := newTracer(t)
	m := message()
	m.QueueURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo"
	m.GroupID = "customer-7"
	_, s, _ := run(t, rec, m, nil, sqsotel.WithTracerProvider(tp))
	if s.Name() != "process jobs.fifo" {
		t.Errorf("span name %q", s.Name())
	}
	checkAttrs(t, s, map[string]string{"messaging.destination.name": "jobs.fifo", "sqsworker.message.group_id": "customer-7"})

	rec.Reset()
	m = message()
	m.QueueURL = ""
	_, s, _ = run(t, rec, m, nil, sqsotel.WithTracerProvider(tp))
	if s.Name() != "process" {
		t.Errorf("span name %q without a queue URL, want %q", s.Name(), "process")
	}
	checkAttrs(t, s, nil, "messaging.destination.name", "aws.sqs.queue.url")
}

type classedError struct{}

func (classedError) Error() string      { return "endpoint down" }
func (classedError) ErrorClass() string { return "endpoint-unavailable" }

// A handler's error is recorded, with the status Error and its class as
// error.type; a Permanent one is marked; a postponement is no error.
func TestMiddlewareError(t *testing.T) {
	boom := errors.New("boom")
	for _, c := range []struct {
		name      string
		err       error
		errorType string // "" for no error status
		permanent bool
	}{
		{"plain", boom, "*errors.errorString", false},
		{"wrapped", fmt.Errorf("charging: %w", boom), "*errors.errorString", false},
		{"permanent", sqsworker.Permanent(boom), "*errors.errorString", true},
		{"classed", fmt.Errorf("calling: %w", classedError{}), "endpoint-unavailable", false},
		{"timeout", fmt.Errorf("calling: %w", context.DeadlineExceeded), "timeout", false},
		{"retry after", sqsworker.RetryAfter(time.Minute, boom), "*errors.errorString", false},
		{"postponed", sqsworker.RetryAfter(time.Minute, nil), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp, rec := newTracer(t)
			_, s, err := run(t, rec, message(), func(context.Context, *sqsworker.Message) error { return c.err }, sqsotel.WithTracerProvider(tp))
			if err != c.err {
				t.Errorf("middleware returned %v, want the handler's %v", err, c.err)
			}
			if c.errorType == "" {
				if s.Status().Code != codes.Unset || len(s.Events()) != 0 {
					t.Errorf("status %v, events %v; want neither", s.Status(), s.Events())
				}
				checkAttrs(t, s, map[string]string{"sqsworker.postponed": "true"}, "error.type")
				return
			}
			if s.Status().Code != codes.Error || s.Status().Description != c.err.Error() {
				t.Errorf("status %+v, want Error %q", s.Status(), c.err.Error())
			}
			if len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
				t.Errorf("events %v, want the error recorded", s.Events())
			}
			want := map[string]string{"error.type": c.errorType}
			var absent []string
			if c.permanent {
				want["sqsworker.error.permanent"] = "true"
			} else {
				absent = append(absent, "sqsworker.error.permanent")
			}
			checkAttrs(t, s, want, absent...)
		})
	}
}

// A panic goes through to the runtime; the span still ends, as an error.
func TestMiddlewarePanic(t *testing.T) {
	tp, rec := newTracer(t)
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { panic("kaboom") }),
		sqsotel.Middleware(sqsotel.WithTracerProvider(tp)))
	func() {
		defer func() {
			if v := recover(); v != "kaboom" {
				t.Errorf("recovered %v, want the handler's panic", v)
			}
		}()
		_ = h.HandleMessage(context.Background(), message())
	}()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans ended, want 1", len(spans))
	}
	if s := spans[0]; s.Status().Code != codes.Error || attrs(s)["error.type"].AsString() != "panic" {
		t.Errorf("status %v, attributes %v; want Error and error.type panic", s.Status(), s.Attributes())
	}
}

// A custom propagator reads its own attributes.
func TestMiddlewareWithPropagator(t *testing.T) {
	tp, rec := newTracer(t)
	m := message()
	m.MessageAttributes = map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: traceparent}}
	_, s, _ := run(t, rec, m, nil, sqsotel.WithTracerProvider(tp), sqsotel.WithPropagator(propagation.NewCompositeTextMapPropagator()))
	if len(s.Links()) != 0 {
		t.Errorf("links %v with a propagator that reads nothing, want none", s.Links())
	}
	rec.Reset()
	m.MessageAttributes["baggage"] = sqsworker.MessageAttribute{DataType: "String", StringValue: "tenant=acme"}
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	var tenant string
	_, s, _ = run(t, rec, m, func(ctx context.Context, _ *sqsworker.Message) error {
		tenant = baggageValue(ctx, "tenant")
		return nil
	}, sqsotel.WithTracerProvider(tp), sqsotel.WithPropagator(prop))
	checkLinkedTo(t, s, producerSC)
	if tenant != "acme" {
		t.Errorf("the handler's ctx has the baggage tenant=%q, want acme", tenant)
	}
}

// Inject puts the span context of ctx in traceparent and tracestate
// attributes, which the middleware reads back; nothing without a span.
func TestInject(t *testing.T) {
	if got := sqsotel.Inject(context.Background()); got != nil {
		t.Errorf("Inject without a span = %v, want nil", got)
	}
	ctx := trace.ContextWithSpanContext(context.Background(), producerSC)
	got := sqsotel.Inject(ctx)
	if len(got) != 1 || got["traceparent"].StringValue != traceparent || got["traceparent"].DataType != "String" {
		t.Errorf("Inject = %v, want the traceparent alone", got)
	}
	ts, _ := trace.ParseTraceState("vendor=opaque")
	got = sqsotel.Inject(trace.ContextWithSpanContext(context.Background(), producerSC.WithTraceState(ts)))
	if len(got) != 2 || got["tracestate"].StringValue != "vendor=opaque" || got["tracestate"].DataType != "String" {
		t.Errorf("Inject = %v, want traceparent and tracestate", got)
	}

	tp, rec := newTracer(t)
	_, s, _ := run(t, rec, &sqsworker.Message{ID: "1", QueueURL: queueURL, MessageAttributes: got}, nil, sqsotel.WithTracerProvider(tp))
	checkLinkedTo(t, s, producerSC.WithTraceState(ts))
}

// With the global tracer provider unset, or a no-op one, the handler runs
// with no recording span in its ctx and the middleware allocates nothing.
func TestMiddlewareNoopProvider(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []sqsotel.Option
	}{
		{"global unset", nil},
		{"global unset, given", []sqsotel.Option{sqsotel.WithTracerProvider(otel.GetTracerProvider())}},
		{"noop", []sqsotel.Option{sqsotel.WithTracerProvider(noop.NewTracerProvider())}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ran := 0
			var span trace.Span
			h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				ran++
				span = trace.SpanFromContext(ctx)
				return nil
			}), sqsotel.Middleware(c.opts...))
			m := withXRay(withTraceparent(message()))
			if err := h.HandleMessage(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			if ran != 1 {
				t.Fatalf("handler ran %d times, want 1", ran)
			}
			if span.IsRecording() || span.SpanContext().IsValid() {
				t.Errorf("the handler's ctx carries the span %v (recording: %v), want none", span.SpanContext(), span.IsRecording())
			}
			ctx := context.Background()
			if n := testing.AllocsPerRun(100, func() { _ = h.HandleMessage(ctx, m) }); n != 0 {
				t.Errorf("%v allocations per message, want 0", n)
			}
		})
	}
}

// Once otel.SetTracerProvider is called, a middleware made before traces
// with the provider set. Run in a process of its own: the global provider
// cannot be unset.
func TestGlobalProviderSetLater(t *testing.T) {
	if os.Getenv("SQSOTEL_GLOBAL_SUBPROCESS") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGlobalProviderSetLater$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "SQSOTEL_GLOBAL_SUBPROCESS=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("subprocess: %v\n%s", err, out)
		}
		return
	}
	mw := sqsotel.Middleware()
	var recording bool
	h := mw(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		recording = trace.SpanFromContext(ctx).IsRecording()
		return nil
	}))
	_ = h.HandleMessage(context.Background(), message())
	if recording {
		t.Fatal("a recording span before any provider was set")
	}
	tp, rec := newTracer(t)
	otel.SetTracerProvider(tp)
	_ = h.HandleMessage(context.Background(), withTraceparent(message()))
	if !recording || len(rec.Ended()) != 1 {
		t.Fatalf("recording %v, %d spans, after the provider was set; want a recorded span", recording, len(rec.Ended()))
	}
	checkLinkedTo(t, rec.Ended()[0], producerSC)
}

func baggageValue(ctx context.Context, key string) string {
	return baggage.FromContext(ctx).Member(key).Value()
}

// The consumer span is named as the messaging semantic conventions (v1.26
// and later) say: "{messaging.operation.name} {destination}", the
// destination left out when there is none. Before, it was "jobs process".
func TestSpanNameOperationThenDestination(t *testing.T) {
	for _, c := range []struct{ url, want string }{
		{queueURL, "process jobs"},
		{"https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.fifo", "process jobs.fifo"},
		{"", "process"},
	} {
		tp, rec := newTracer(t)
		m := message()
		m.QueueURL = c.url
		_, s, _ := run(t, rec, m, nil, sqsotel.WithTracerProvider(tp))
		if s.Name() != c.want {
			t.Errorf("queue %q: span %q, want %q", c.url, s.Name(), c.want)
		}
		if op := attrs(s)["messaging.operation.name"].AsString(); !strings.HasPrefix(s.Name(), op) {
			t.Errorf("span %q does not start with messaging.operation.name %q", s.Name(), op)
		}
	}
}

// Baggage the propagator reads from the message attributes reaches the
// handler when the producer's span comes from X-Ray's AWSTraceHeader, not
// a traceparent attribute, linked or as a child; the handler's own span
// stays the consumer span's parent. Before, the baggage was dropped.
func TestMiddlewareBaggageWithXRay(t *testing.T) {
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	for _, asChild := range []bool{false, true} {
		t.Run(fmt.Sprintf("asChild=%v", asChild), func(t *testing.T) {
			tp, rec := newTracer(t)
			m := withXRay(message())
			m.MessageAttributes = map[string]sqsworker.MessageAttribute{"baggage": {DataType: "String", StringValue: "tenant=acme"}}
			opts := []sqsotel.Option{sqsotel.WithTracerProvider(tp), sqsotel.WithPropagator(prop)}
			if asChild {
				opts = append(opts, sqsotel.AsChild())
			}
			var tenant string
			_, s, _ := run(t, rec, m, func(ctx context.Context, _ *sqsworker.Message) error {
				tenant = baggageValue(ctx, "tenant")
				return nil
			}, opts...)
			if tenant != "acme" {
				t.Errorf("the handler's ctx has the baggage tenant=%q, want acme", tenant)
			}
			if asChild {
				checkChildOf(t, s, producerSC)
			} else {
				checkLinkedTo(t, s, producerSC)
			}
		})
	}
	// With a span in the handler's context (a Lambda invocation's), it is
	// still the parent, and the baggage still arrives.
	tp, rec := newTracer(t)
	ctx, outer := tp.Tracer("test").Start(context.Background(), "invocation")
	var tenant string
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
		tenant = baggageValue(ctx, "tenant")
		return nil
	}), sqsotel.Middleware(sqsotel.WithTracerProvider(tp), sqsotel.WithPropagator(prop)))
	m := withXRay(message())
	m.MessageAttributes = map[string]sqsworker.MessageAttribute{"baggage": {DataType: "String", StringValue: "tenant=acme"}}
	if err := h.HandleMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	outer.End()
	s := rec.Ended()[0]
	if s.Parent().SpanID() != outer.SpanContext().SpanID() || tenant != "acme" {
		t.Errorf("parent %v (want the ambient span %v), baggage tenant=%q (want acme)", s.Parent(), outer.SpanContext(), tenant)
	}
	if len(s.Links()) != 1 || s.Links()[0].SpanContext.SpanID() != producerSC.SpanID() {
		t.Errorf("links %v, want the X-Ray span", s.Links())
	}
}

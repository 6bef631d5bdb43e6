package sqsotel

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sqsworker/sqsworker"
)

// ScopeName is the instrumentation scope of the tracer the middleware uses.
const ScopeName = "github.com/sqsworker/sqsworker/sqsotel"

// Attributes of the consumer span that the semantic conventions do not
// define, in sqsworker's namespace.
const (
	// AttemptKey is the attempt the span processes: the message's receive
	// count, 1 on the first.
	AttemptKey = attribute.Key("sqsworker.attempt")
	// MessageGroupKey is the message group of a FIFO queue's message.
	MessageGroupKey = attribute.Key("sqsworker.message.group_id")
	// PermanentKey is true on a span whose handler returned a
	// [sqsworker.Permanent] error: the message is not retried.
	PermanentKey = attribute.Key("sqsworker.error.permanent")
	// PostponedKey is true on a span whose handler postponed its message
	// with sqsworker.RetryAfter and a nil error: not a failure.
	PostponedKey = attribute.Key("sqsworker.postponed")
)

// An Option configures [Middleware].
type Option func(*config)

type config struct {
	tp      trace.TracerProvider
	prop    propagation.TextMapPropagator
	asChild bool
}

// WithTracerProvider makes the middleware start its spans with tp's tracer.
// Default otel.GetTracerProvider().
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithPropagator makes the middleware read the producer's span context from
// the message attributes with p. Default otel.GetTextMapPropagator(), which
// reads nothing until otel.SetTextMapPropagator is called.
func WithPropagator(p propagation.TextMapPropagator) Option {
	return func(c *config) { c.prop = p }
}

// AsChild makes each consumer span a child of the producer's span, in the
// producer's trace, instead of the root of a trace of its own (or a child of
// the span the handler's context already carries) that links to it.
func AsChild() Option {
	return func(c *config) { c.asChild = true }
}

// unsetGlobal is the global tracer provider as long as
// otel.SetTracerProvider has not been called: a provider of
// go.opentelemetry.io/otel/internal/global whose tracers make non-recording
// spans until a provider is set, and which otel.GetTracerProvider stops
// returning once one is. Nil if a provider was set before this package was
// initialised.
var unsetGlobal = func() trace.TracerProvider {
	tp := otel.GetTracerProvider()
	if t := reflect.TypeOf(tp); t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return tp
	}
	return nil
}()

// Middleware returns a middleware that runs each message's handler in a
// consumer span, as the package documentation describes. Panics are left to
// the runtime, which recovers them; the span still ends, with the status
// Error and error.type "panic".
func Middleware(opts ...Option) sqsworker.Middleware {
	var c config
	for _, o := range opts {
		o(&c)
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	if c.prop == nil {
		c.prop = otel.GetTextMapPropagator()
	}
	switch c.tp.(type) {
	case noop.TracerProvider, *noop.TracerProvider:
		return func(next sqsworker.Handler) sqsworker.Handler { return next }
	}
	t := &tracing{
		tracer:  c.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL)),
		prop:    c.prop,
		asChild: c.asChild,
		lazy:    unsetGlobal != nil && c.tp == unsetGlobal,
	}
	return func(next sqsworker.Handler) sqsworker.Handler {
		return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			return t.handle(ctx, m, next)
		})
	}
}

type tracing struct {
	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	asChild bool
	// lazy is true when tracer comes from the global provider before one
	// was set: it makes spans once otel.SetTracerProvider is called.
	lazy  bool
	names atomic.Pointer[queueNames]
}

// queueNames caches the names of the last queue seen, to make no string per
// message.
type queueNames struct {
	url, queue, span string
}

func (t *tracing) queueNames(url string) *queueNames {
	if n := t.names.Load(); n != nil && n.url == url {
		return n
	}
	n := &queueNames{url: url, queue: url[strings.LastIndexByte(url, '/')+1:]}
	// "{messaging.operation.name} {destination}", the destination left
	// out when there is none (semantic conventions v1.26 and later).
	n.span = "process"
	if n.queue != "" {
		n.span = "process " + n.queue
	}
	t.names.Store(n)
	return n
}

func (t *tracing) handle(ctx context.Context, m *sqsworker.Message, next sqsworker.Handler) error {
	// No provider set yet: the tracer would make non-recording spans, at
	// the cost of an extraction and a dozen allocations. (eBPF
	// auto-instrumentation, which hooks those unset tracers, sees no span
	// of ours either.)
	if t.lazy && otel.GetTracerProvider() == unsetGlobal {
		return next.HandleMessage(ctx, m)
	}
	names := t.queueNames(m.QueueURL)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		semconv.MessagingSystemAWSSQS,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingMessageID(m.ID),
		semconv.MessagingMessageBodySize(len(m.Body)),
		AttemptKey.Int(m.ReceiveCount),
	)
	if names.queue != "" {
		attrs = append(attrs, semconv.MessagingDestinationName(names.queue), semconv.AWSSQSQueueURL(m.QueueURL))
	}
	if m.GroupID != "" {
		attrs = append(attrs, MessageGroupKey.String(m.GroupID))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...)}

	start := ctx
	if sc, extracted := t.producerContext(&start, m); sc.IsValid() {
		switch {
		case t.asChild:
			if !extracted {
				start = trace.ContextWithRemoteSpanContext(start, sc)
			}
		default:
			if extracted {
				// The propagator made the producer's span the
				// current one; the consumer span's parent is the
				// handler's own (none, usually), and the producer's
				// a link.
				start = trace.ContextWithSpan(start, trace.SpanFromContext(ctx))
			}
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := t.tracer.Start(start, names.span, opts...)
	ended := false
	defer func() {
		if !ended { // a panic, or runtime.Goexit
			span.SetAttributes(semconv.ErrorTypeKey.String("panic"))
			span.SetStatus(codes.Error, "handler panic")
			span.End()
		}
	}()
	err := next.HandleMessage(ctx, m)
	ended = true
	if err != nil && span.IsRecording() {
		recordError(span, err)
	}
	span.End()
	return err
}

// producerContext returns the span context of the producer's span: from the
// message attributes through the propagator, which then makes it the
// current span of *ctx and reports extracted; else from the AWSTraceHeader
// system attribute. Whatever else the propagator reads, such as baggage, is
// kept in *ctx either way.
func (t *tracing) producerContext(ctx *context.Context, m *sqsworker.Message) (sc trace.SpanContext, extracted bool) {
	if len(m.MessageAttributes) > 0 {
		ambient := trace.SpanFromContext(*ctx)
		ectx := t.prop.Extract(*ctx, carrier(m.MessageAttributes))
		if sc := trace.SpanContextFromContext(ectx); sc.IsValid() && !sc.Equal(ambient.SpanContext()) {
			*ctx = ectx
			return sc, true
		}
		// No producer span in the attributes: keep what the propagator
		// read besides, with the span the handler's context had.
		*ctx = trace.ContextWithSpan(ectx, ambient)
	}
	if h, ok := m.Attributes[sqsworker.AttrAWSTraceHeader]; ok {
		return parseAWSTraceHeader(h), false
	}
	return trace.SpanContext{}, false
}

// recordError records a handler's error on its span.
func recordError(span trace.Span, err error) {
	var ra *sqsworker.RetryAfterError
	if errors.As(err, &ra) && ra.Err == nil {
		span.SetAttributes(PostponedKey.Bool(true))
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorTypeKey.String(sqsworker.ErrorClass(err)))
	var perm *sqsworker.PermanentError
	if errors.As(err, &perm) {
		span.SetAttributes(PermanentKey.Bool(true))
	}
}

package sqsotel_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/sqsworker/sqsworker"
	sqsotel "github.com/sqsworker/sqsworker/sqsotel"
)

// BenchmarkMiddleware measures what the middleware adds to a handler that
// does nothing, per message: without a tracer (the global provider unset, or
// a no-op one), and with an SDK provider that samples every span (or none)
// into an exporter that drops them, through the batch span processor a
// program would use. The messages carry a traceparent attribute, and the
// W3C propagator is the global one (TestMain).
func BenchmarkMiddleware(b *testing.B) {
	sdk := func(sampler sdktrace.Sampler) sqsotel.Option {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		return sqsotel.WithTracerProvider(tp)
	}
	bare := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	for _, c := range []struct {
		name string
		mw   sqsworker.Middleware // nil for the bare handler
		m    *sqsworker.Message
	}{
		{"bare handler", nil, withTraceparent(message())},
		{"no-op/global unset", sqsotel.Middleware(), withTraceparent(message())},
		{"no-op/noop provider", sqsotel.Middleware(sqsotel.WithTracerProvider(noop.NewTracerProvider())), withTraceparent(message())},
		{"sdk/sampled, link", sqsotel.Middleware(sdk(sdktrace.AlwaysSample())), withTraceparent(message())},
		{"sdk/sampled, child", sqsotel.Middleware(sdk(sdktrace.AlwaysSample()), sqsotel.AsChild()), withTraceparent(message())},
		{"sdk/sampled, X-Ray header", sqsotel.Middleware(sdk(sdktrace.AlwaysSample())), withXRay(message())},
		{"sdk/sampled, no trace", sqsotel.Middleware(sdk(sdktrace.AlwaysSample())), message()},
		{"sdk/never sampled", sqsotel.Middleware(sdk(sdktrace.NeverSample())), withTraceparent(message())},
	} {
		b.Run(c.name, func(b *testing.B) {
			h := sqsworker.Handler(bare)
			if c.mw != nil {
				h = c.mw(bare)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				_ = h.HandleMessage(ctx, c.m)
			}
		})
	}
}

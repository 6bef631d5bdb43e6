package sqsotel_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	sqsotel "github.com/sqsworker/sqsworker/sqsotel"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// A job sent in a producer span is processed in a consumer span that links to
// it. The in-memory sqstest.Fake stands in for the *sqs.Client, and a span
// recorder for an exporter.
func Example() {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	client := sqstest.NewFake()
	url := client.CreateQueue("orders", nil)

	// The producer: Inject carries the span of ctx in the message.
	p, err := producer.New(client, producer.Config{QueueURL: url, Attributes: sqsotel.Inject})
	if err != nil {
		panic(err)
	}
	ctx, send := tp.Tracer("shop").Start(context.Background(), "orders send", trace.WithSpanKind(trace.SpanKindProducer))
	if _, err := p.Send(ctx, producer.Message{Body: `{"order":42}`}); err != nil {
		panic(err)
	}
	send.End()

	// The worker: the middleware runs the handler in a consumer span.
	handled := make(chan struct{})
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		defer close(handled)
		fmt.Println("the handler's ctx is recording:", trace.SpanFromContext(ctx).IsRecording())
		return nil
	})
	w, err := worker.New(client, worker.Config{
		QueueURL: url,
		WaitTime: time.Second,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		panic(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.Chain(h, sqsotel.Middleware(sqsotel.WithTracerProvider(tp))))
	}()
	<-handled
	_ = w.Shutdown(context.Background())
	<-done

	for _, s := range rec.Ended() {
		if s.SpanKind() != trace.SpanKindConsumer {
			continue
		}
		fmt.Println("span:", s.Name(), s.SpanKind())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "messaging.system", "messaging.destination.name", "messaging.operation.type", "sqsworker.attempt":
				fmt.Printf("  %s=%s\n", kv.Key, kv.Value.String())
			}
		}
		l := s.Links()[0].SpanContext
		fmt.Println("links to the producer span:", l.TraceID() == send.SpanContext().TraceID() && l.SpanID() == send.SpanContext().SpanID())
		fmt.Println("in a trace of its own:", s.SpanContext().TraceID() != send.SpanContext().TraceID())
	}
	// Output:
	// the handler's ctx is recording: true
	// span: process orders consumer
	//   messaging.system=aws_sqs
	//   messaging.operation.type=process
	//   sqsworker.attempt=1
	//   messaging.destination.name=orders
	// links to the producer span: true
	// in a trace of its own: true
}

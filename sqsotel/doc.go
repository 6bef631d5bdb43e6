// Package sqsotel traces sqsworker jobs with OpenTelemetry, from the code that
// sends them to the handlers that process them.
//
// It is a module of its own, github.com/sqsworker/sqsworker/sqsotel, so that
// programs that do not trace never download OpenTelemetry.
//
// On the producer's side, [Inject] is a producer.Config.Attributes hook: it
// puts the span context of the ctx a message is sent with into the message's
// "traceparent" and "tracestate" attributes (W3C Trace Context), through the
// global propagator:
//
//	otel.SetTextMapPropagator(propagation.TraceContext{})
//	p, err := producer.New(client, producer.Config{QueueURL: url, Attributes: sqsotel.Inject})
//
// On the consumer's side, [Middleware] starts a span of kind consumer for
// every message, named "process <queue name>" and carrying the messaging
// semantic conventions' attributes (messaging.system "aws_sqs",
// messaging.destination.name, messaging.message.id,
// messaging.operation.type "process", ...), the attempt (the receive count)
// and, on FIFO queues, the message group. The span is linked to the
// producer's span, found in the message's attributes with the propagator or,
// failing that, in SQS's AWSTraceHeader system attribute (X-Ray); with
// [AsChild] it is the producer span's child instead. What else the
// propagator reads from the attributes, such as W3C baggage, is in the
// handler's context whichever of the two gave the producer's span. A handler's error is
// recorded on the span, which gets the status Error and the attribute
// error.type, [sqsworker.ErrorClass] of the error. The handler's context
// carries the span:
//
//	h := sqsworker.Chain(handler, sqsotel.Middleware())
//
// Links, not parent and child, are what the semantic conventions recommend
// for messaging: a message may wait in its queue for hours and be processed
// several times, and each attempt is then a trace of its own that points to
// the one that sent the message, instead of one trace that lasts as long as
// the message lived.
//
// Without a tracer provider (the global one, before otel.SetTracerProvider is
// called, or a go.opentelemetry.io/otel/trace/noop provider), Middleware adds
// next to nothing to a handler: no span, no extraction, no allocation; the
// handler's context then carries no trace context either.
package sqsotel

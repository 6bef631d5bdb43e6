package sqsotel

import (
	"context"
	"encoding/hex"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsworker/sqsworker"
)

// Inject returns the message attributes that carry the span context of ctx to
// the consumer: the fields the global propagator (otel.GetTextMapPropagator)
// injects, as String attributes; "traceparent" and "tracestate" with W3C
// Trace Context. It returns nil when ctx has no valid span context, or when
// the propagator injects nothing, as the global one does until
// otel.SetTextMapPropagator is called.
//
// It is meant for producer.Config.Attributes. Its attributes count in SQS's
// limit of ten per message: the producer leaves them out of a message they
// would put over it (or over the queue's size), which is then sent
// untraced rather than refused.
func Inject(ctx context.Context) map[string]sqsworker.MessageAttribute {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := make(carrier, 2)
	otel.GetTextMapPropagator().Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}

// carrier carries a propagator's fields in message attributes.
type carrier map[string]sqsworker.MessageAttribute

func (c carrier) Get(key string) string { return c[key].StringValue }

// Set sets a String attribute; SQS refuses empty ones.
func (c carrier) Set(key, value string) {
	if value != "" {
		c[key] = sqsworker.MessageAttribute{DataType: "String", StringValue: value}
	}
}

func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// parseAWSTraceHeader returns the span context an X-Ray trace header names,
// such as "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1":
// the trace ID is the root's 8 and 24 hex digits together, the span ID the
// parent, sampled when Sampled is 1. It returns an invalid span context when
// the header has no well-formed root and parent.
func parseAWSTraceHeader(h string) trace.SpanContext {
	var cfg trace.SpanContextConfig
	var haveRoot, haveParent bool
	for field := range strings.SplitSeq(h, ";") {
		k, v, _ := strings.Cut(strings.TrimSpace(field), "=")
		switch k {
		case "Root":
			// 1-<8 hex digits: epoch seconds>-<24 hex digits>
			if len(v) != 35 || v[:2] != "1-" || v[10] != '-' ||
				!decodeHex(cfg.TraceID[:4], v[2:10]) || !decodeHex(cfg.TraceID[4:], v[11:]) {
				return trace.SpanContext{}
			}
			haveRoot = true
		case "Parent":
			if len(v) != 16 || !decodeHex(cfg.SpanID[:], v) {
				return trace.SpanContext{}
			}
			haveParent = true
		case "Sampled":
			if v == "1" {
				cfg.TraceFlags = trace.FlagsSampled
			}
		}
	}
	if !haveRoot || !haveParent {
		return trace.SpanContext{}
	}
	cfg.Remote = true
	return trace.NewSpanContext(cfg)
}

// decodeHex decodes s into dst, which it must fill exactly.
func decodeHex(dst []byte, s string) bool {
	if hex.DecodedLen(len(s)) != len(dst) {
		return false
	}
	_, err := hex.Decode(dst, []byte(s))
	return err == nil
}

package sqsotel_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	sqsotel "github.com/sqsworker/sqsworker/sqsotel"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A trace goes from a producer span, through a real queue on the local SQS
// emulator, to the handler a worker runs: the consumer span links to the
// producer span (or, with AsChild, is its child), and has the messaging
// attributes. On the FIFO queue the messages go with SendBatch, which takes
// the trace from its ctx once.
func TestTraceThroughQueue(t *testing.T) {
	for _, c := range []struct {
		name    string
		fifo    bool
		asChild bool
	}{
		{"standard, link", false, false},
		{"FIFO, child", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			client := localtest.NewSQS(t)
			q := localtest.NewQueue(t, client, localtest.QueueOptions{FIFO: c.fifo, ContentDedup: c.fifo})
			tp, rec := newTracer(t)

			p, err := producer.New(client, producer.Config{QueueURL: q.URL, Attributes: sqsotel.Inject})
			if err != nil {
				t.Fatal(err)
			}
			ctx, send := tp.Tracer("test").Start(context.Background(), "jobs send", trace.WithSpanKind(trace.SpanKindProducer))
			var ids []string
			if c.fifo {
				res, err := p.SendBatch(ctx, []producer.Message{{Body: "a", GroupID: "g1"}, {Body: "b", GroupID: "g1"}})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range res {
					ids = append(ids, r.MessageID)
				}
			} else {
				id, err := p.Send(ctx, producer.Message{Body: "a"})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			send.End()
			producerSpan := send.SpanContext()

			type handled struct {
				id   string
				span trace.SpanContext
			}
			got := make(chan handled, len(ids))
			h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				got <- handled{m.ID, trace.SpanContextFromContext(ctx)}
				return nil
			})
			opts := []sqsotel.Option{sqsotel.WithTracerProvider(tp)}
			if c.asChild {
				opts = append(opts, sqsotel.AsChild())
			}
			w, err := worker.New(client, worker.Config{
				QueueURL: q.URL,
				WaitTime: time.Second,
				Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- w.Run(context.Background(), sqsworker.Chain(h, sqsotel.Middleware(opts...))) }()
			inHandler := map[string]trace.SpanContext{}
			timeout := time.After(30 * time.Second)
			for len(inHandler) < len(ids) {
				select {
				case r := <-got:
					inHandler[r.id] = r.span
				case <-timeout:
					t.Fatalf("%d of %d messages handled", len(inHandler), len(ids))
				}
			}
			sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if err := w.Shutdown(sctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}

			var consumer []sdktrace.ReadOnlySpan
			for _, s := range rec.Ended() {
				if s.SpanKind() == trace.SpanKindConsumer {
					consumer = append(consumer, s)
				}
			}
			if len(consumer) != len(ids) {
				t.Fatalf("%d consumer spans, want %d", len(consumer), len(ids))
			}
			queueName := queueNameOf(q.URL)
			for _, s := range consumer {
				id := attrs(s)["messaging.message.id"].AsString()
				sc, ok := inHandler[id]
				if !ok {
					t.Errorf("span for message %q, which was not handled", id)
					continue
				}
				if !sc.Equal(s.SpanContext()) {
					t.Errorf("message %s: the handler's ctx carries %v, want the consumer span %v", id, sc, s.SpanContext())
				}
				if c.asChild {
					checkChildOf(t, s, producerSpan)
				} else {
					checkLinkedTo(t, s, producerSpan)
				}
				want := map[string]string{
					"messaging.system":           "aws_sqs",
					"messaging.operation.type":   "process",
					"messaging.destination.name": queueName,
					"aws.sqs.queue.url":          q.URL,
					"sqsworker.attempt":          "1",
				}
				var absent []string
				if c.fifo {
					want["sqsworker.message.group_id"] = "g1"
				} else {
					absent = append(absent, "sqsworker.message.group_id")
				}
				checkAttrs(t, s, want, absent...)
				if s.Name() != "process "+queueName {
					t.Errorf("span name %q, want %q", s.Name(), "process "+queueName)
				}
				if s.Status().Code != codes.Unset {
					t.Errorf("status %v", s.Status())
				}
			}
		})
	}
}

// queueNameOf returns the last path segment of a queue URL: its name.
func queueNameOf(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}

package metrics_test

import (
	"io"
	"testing"

	"github.com/sqsworker/sqsworker/metrics"
)

// BenchmarkPerMessage makes the recorder calls the worker makes for one
// successful message (received, in-flight twice, three latencies, succeeded),
// with a flush every 10,000 messages, for each sink. Compare with the
// worker's per-message cost (BenchmarkWorkerPerMessage in ./worker).
func BenchmarkPerMessage(b *testing.B) {
	q := metrics.Dims{Queue: "orders"}
	qh := metrics.Dims{Queue: "orders", Handler: "jobs"}
	for _, c := range []struct {
		name string
		r    metrics.Recorder
	}{
		{"nop", metrics.Nop{}},
		{"emf", metrics.NewEMF(io.Discard, "bench")},
		{"memory", metrics.NewMemory()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				c.r.Add(metrics.MessagesReceived, 1, q)
				c.r.Set(metrics.InFlight, 1, q)
				c.r.Set(metrics.InFlight, 0, q)
				c.r.Observe(metrics.HandlerDuration, float64(i%1000)/1e4, qh)
				c.r.Observe(metrics.ReceiveToDoneLatency, float64(i%1000)/1e3, q)
				c.r.Observe(metrics.EnqueueToDoneLatency, float64(i%1000)/1e2, q)
				c.r.Add(metrics.MessagesSucceeded, 1, qh)
				if f, ok := c.r.(interface{ Flush() error }); ok && i%10000 == 9999 {
					_ = f.Flush()
				}
			}
		})
	}
}

package sqsprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsworker/sqsworker/metrics"
	sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
)

// BenchmarkRecorder measures one call of the Recorder on a series that
// exists, as the worker makes several per message; "parallel" runs the calls
// on every core at once. "client_golang" is the same counter increment done
// with the client's WithLabelValues, for comparison.
func BenchmarkRecorder(b *testing.B) {
	r := sqsprom.New(prometheus.NewRegistry(), sqsprom.Options{})
	dqh := metrics.Dims{Queue: "jobs", Handler: "email"}
	failed := metrics.Dims{Queue: "jobs", Handler: "email", ErrorClass: "timeout"}

	b.Run("Add", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Add(metrics.MessagesSucceeded, 1, dqh)
		}
	})
	b.Run("Add/3labels", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Add(metrics.MessagesFailed, 1, failed)
		}
	})
	b.Run("Observe", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Observe(metrics.HandlerDuration, 0.042, dqh)
		}
	})
	b.Run("Set", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r.Set(metrics.InFlight, 3, dqh)
		}
	})
	b.Run("Add/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Add(metrics.MessagesSucceeded, 1, dqh)
			}
		})
	})
	b.Run("Observe/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Observe(metrics.HandlerDuration, 0.042, dqh)
			}
		})
	})
	b.Run("client_golang/WithLabelValues", func(b *testing.B) {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "c"}, []string{"queue", "handler"})
		b.ReportAllocs()
		for b.Loop() {
			v.WithLabelValues(dqh.Queue, dqh.Handler).Add(1)
		}
	})
}

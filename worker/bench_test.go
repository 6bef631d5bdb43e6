package worker_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// BenchmarkWorkerPerMessage measures the worker's cost per message with a
// no-op handler against the in-memory fake: receive, dispatch, handler call,
// batched delete (the fake's own cost included; its queue is kept at about
// 1,000 messages, as its scans are linear). Run with
// `go test -run '^$' -bench WorkerPerMessage -benchmem ./worker`.
func BenchmarkWorkerPerMessage(b *testing.B) {
	b.Run("no-metrics", func(b *testing.B) { benchWorker(b, nil) })
	b.Run("emf", func(b *testing.B) { benchWorker(b, metrics.NewEMF(io.Discard, "bench")) })
	b.Run("memory", func(b *testing.B) { benchWorker(b, metrics.NewMemory()) })
}

func benchWorker(b *testing.B, rec metrics.Recorder) {
	f := sqstest.NewFake()
	url := f.CreateQueue("bench", nil)
	sent := 0
	topUp := func() {
		for v, inFlight, _ := f.Depth(url); sent < b.N && v+inFlight < 1000; v++ {
			f.Send(url, `{"job":1}`)
			sent++
		}
	}
	topUp()
	w, err := worker.New(f, worker.Config{
		QueueURL: url, Concurrency: 80, WaitTime: time.Second,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Metrics: rec, MetricsInterval: time.Second, DisableDepth: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	for w.Stats().Deleted < int64(b.N) {
		topUp()
		time.Sleep(50 * time.Microsecond)
	}
	b.StopTimer()
	if err := w.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

package worker_test

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// BenchmarkSoak runs a worker over a million messages with a no-op handler,
// 80 handlers and the visibility heartbeat on (the default), on the in-memory
// SQS, and reports the heap in use (after a garbage collection) once 100k
// and once 1M messages were deleted, and the time per message. A worker's
// heap must not grow with the messages it has handled. Run with
// `go test -run '^$' -bench Soak -benchtime 1x ./worker`.
func BenchmarkSoak(b *testing.B) {
	const total = 1_000_000
	for range b.N {
		r := soak(b, total, []int{100_000, total})
		b.ReportMetric(float64(r.heap[0])/(1<<20), "MB-heap-at-100k")
		b.ReportMetric(float64(r.heap[1])/(1<<20), "MB-heap-at-1M")
		b.ReportMetric(float64(r.took.Microseconds())/total, "µs/msg")
	}
}

// TestSoakHeapFlat is BenchmarkSoak at a scale that fits the race detector:
// the heap in use must not grow by 5 MB between 10k and 100k messages, as it
// would if the worker kept 60 bytes of each (the samples vary by about a
// megabyte either way).
func TestSoakHeapFlat(t *testing.T) {
	const first, total = 10_000, 100_000
	const bound = 5 << 20
	if testing.Short() {
		t.Skip("soak: not in -short")
	}
	r := soak(t, total, []int{first, total})
	grew := int64(r.heap[1]) - int64(r.heap[0])
	t.Logf("heap in use %.1f MB at %d messages, %.1f MB at %d: %+.1f bytes per message",
		float64(r.heap[0])/(1<<20), first, float64(r.heap[1])/(1<<20), total, float64(grew)/(total-first))
	if grew > bound {
		t.Errorf("heap in use grew by %.1f MB (%.0f bytes per message) over %d messages, want less than %d MB: the worker keeps something of every message",
			float64(grew)/(1<<20), float64(grew)/(total-first), total-first, bound>>20)
	}
}

// soakResult is what soak measured: the heap in use at each sample point,
// and the time from the start of Run to the last message's delete.
type soakResult struct {
	heap []uint64
	took time.Duration
}

// soak runs a worker until total messages were deleted, and samples the heap
// in use as soon as each count of at was.
func soak(tb testing.TB, total int, at []int) soakResult {
	tb.Helper()
	f := sqstest.NewFake()
	url := f.CreateQueue("soak", nil)
	w, err := worker.New(f, worker.Config{
		QueueURL: url, Concurrency: 80, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, stopProducer := context.WithCancel(context.Background())
	var producer sync.WaitGroup
	// Messages go on arriving after the last sample, so that every sample
	// is taken under the same load.
	producer.Go(func() { produce(ctx, f, url, total+10_000, 500) })
	defer func() {
		stopProducer()
		producer.Wait()
	}()

	if b, ok := tb.(*testing.B); ok {
		b.ResetTimer()
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	var r soakResult
	for _, n := range at {
		for w.Stats().Deleted < int64(n) {
			select {
			case err := <-done:
				tb.Fatalf("Run returned %v after %d messages", err, w.Stats().Deleted)
			case <-time.After(time.Millisecond):
			}
		}
		if n == total {
			r.took = time.Since(start)
		}
		r.heap = append(r.heap, heapInUse())
	}
	if b, ok := tb.(*testing.B); ok {
		b.StopTimer()
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		tb.Fatal(err)
	}
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	if s := w.Stats(); s.Deleted+s.Released != s.Received || s.Failed != 0 || s.AckFailures != 0 || s.LeasesLost != 0 {
		tb.Errorf("stats %+v: want every message received deleted or released at shutdown, and no failure", s)
	}
	return r
}

// heapInUse is the heap in use after a garbage collection: the least of
// three, as the worker goes on allocating meanwhile.
func heapInUse() uint64 {
	var least uint64
	for i := range 3 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if i == 0 || ms.HeapInuse < least {
			least = ms.HeapInuse
		}
	}
	return least
}

// produce keeps about level messages visible in the queue at url until total
// were sent or ctx ends.
func produce(ctx context.Context, f *sqstest.Fake, url string, total, level int) {
	for sent := 0; sent < total; {
		if v, _, _ := f.Depth(url); v < level {
			for range min(level-v, total-sent) {
				f.Send(url, "{}")
				sent++
			}
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Millisecond):
		}
	}
}

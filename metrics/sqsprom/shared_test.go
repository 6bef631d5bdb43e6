package sqsprom_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// Recorders sharing a registry combine their gauges: in_flight adds up,
// up and down; breaker_state is the greatest; the queue's depth is the last
// value set. Before, each Recorder set the shared gauge to its own value:
// with 8 + 1 handlers running, in_flight said 1.
func TestSharedRegistryGaugesCombine(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	a := sqsprom.New(reg, sqsprom.Options{})
	b := sqsprom.New(reg, sqsprom.Options{})
	q := metrics.Dims{Queue: "jobs"}
	for i := 1; i <= 8; i++ {
		a.Set(metrics.InFlight, float64(i), q)
	}
	b.Set(metrics.InFlight, 1, q)
	a.Set(metrics.BreakerState, 1, q) // open
	b.Set(metrics.BreakerState, 0, q) // closed
	a.Set(metrics.QueueVisible, 40, q)
	b.Set(metrics.QueueVisible, 42, q)
	b.Set("custom_gauge", 3, q)
	a.Set("custom_gauge", 5, q)
	_, got := gather(t, reg)
	want := map[string]float64{
		`sqsworker_in_flight{queue="jobs"}`:                              9,
		`sqsworker_breaker_state{queue="jobs"}`:                          1,
		`sqsworker_queue_visible{queue="jobs"}`:                          42,
		`sqsworker_custom_gauge{error_class="",handler="",queue="jobs"}`: 5,
	}
	if !mapsEqual(got, want) {
		t.Errorf("samples:\n%s\nwant:\n%s", dump(got), dump(want))
	}

	// Down again: a's handlers end, b's one still runs; a's breaker
	// closes while b's opens.
	for i := 7; i >= 0; i-- {
		a.Set(metrics.InFlight, float64(i), q)
	}
	a.Set(metrics.BreakerState, 0, q)
	b.Set(metrics.BreakerState, 2, q) // half-open
	_, got = gather(t, reg)
	if got[`sqsworker_in_flight{queue="jobs"}`] != 1 || got[`sqsworker_breaker_state{queue="jobs"}`] != 2 {
		t.Errorf("after a's handlers ended: in_flight %v, breaker_state %v; want 1 and 2",
			got[`sqsworker_in_flight{queue="jobs"}`], got[`sqsworker_breaker_state{queue="jobs"}`])
	}
	// Another queue is a series of its own.
	a.Set(metrics.InFlight, 2, metrics.Dims{Queue: "other"})
	_, got = gather(t, reg)
	if got[`sqsworker_in_flight{queue="jobs"}`] != 1 || got[`sqsworker_in_flight{queue="other"}`] != 2 {
		t.Errorf("samples:\n%s", dump(got))
	}
}

// Two workers on one queue, recording into one registry with a Recorder
// each, one with 8 handlers and one with 1, all 9 busy: the scrape says 9
// handlers run. The messages are sent one at a time, each once the handler
// before it runs, so that the workers' own counts reach the Recorders in
// order.
func TestSharedRegistryTwoWorkersInFlight(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	reg := prometheus.NewRegistry()
	started := make(chan struct{}, 9)
	release := make(chan struct{})
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		started <- struct{}{}
		<-release
		return nil
	})
	var wg sync.WaitGroup
	var workers []*worker.Worker
	for _, n := range []int{8, 1} {
		w, err := worker.New(f, worker.Config{
			QueueURL:     url,
			Concurrency:  n,
			MaxMessages:  1,
			WaitTime:     time.Second,
			Metrics:      sqsprom.New(reg, sqsprom.Options{}),
			DisableDepth: true,
			Logger:       slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		workers = append(workers, w)
		wg.Go(func() {
			if err := w.Run(context.Background(), h); err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
		for _, w := range workers {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = w.Shutdown(ctx)
			cancel()
		}
		wg.Wait()
	}()
	for i := range 9 {
		f.Send(url, fmt.Sprintf("job-%d", i))
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatalf("job %d did not start", i)
		}
	}
	_, got := gather(t, reg)
	if v := got[`sqsworker_in_flight{queue="jobs"}`]; v != 9 {
		t.Errorf("in_flight = %v with 8 + 1 handlers running, want 9:\n%s", v, dump(got))
	}
	close(release)
	released = true
}

// Label values are cleaned, and a Recorder exports at most MaxErrorClasses
// error classes: the ones after are counted under "other", the same way in
// every metric. Before, every class was a series of its own, as given.
func TestErrorClassCap(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	r := sqsprom.New(reg, sqsprom.Options{})
	for i := range 40 {
		class := fmt.Sprintf("*pkg.Error%02d", i)
		r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", Handler: "h", ErrorClass: class})
		r.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: "q", ErrorClass: class})
	}
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", Handler: "h", ErrorClass: "*pkg.Error00"}) // admitted: its own series
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", Handler: "h"})                             // no class: not counted in the cap
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", Handler: strings.Repeat("h", 1000) + " x", ErrorClass: "*pkg.Error01"})
	_, got := gather(t, reg)
	classes := map[string]map[string]float64{}
	for k, v := range got {
		name, labels, _ := strings.Cut(k, "{")
		i := strings.Index(labels, `error_class="`)
		if i < 0 {
			continue
		}
		c := labels[i+len(`error_class="`):]
		c = c[:strings.IndexByte(c, '"')]
		if classes[name] == nil {
			classes[name] = map[string]float64{}
		}
		classes[name][c] += v
	}
	for _, name := range []string{"sqsworker_messages_failed_total", "sqsworker_messages_dead_lettered_total"} {
		cs := classes[name]
		if cs[metrics.OtherErrorClass] != 20 || cs["*pkg.Error19"] != 1 || cs["*pkg.Error20"] != 0 {
			t.Errorf("%s by class %v: want *pkg.Error00..19 and other, 20", name, cs)
		}
		n := 0
		for c := range cs {
			if c != "" && c != metrics.OtherErrorClass {
				n++
			}
		}
		if n != metrics.MaxErrorClasses {
			t.Errorf("%s: %d classes besides other, want %d", name, n, metrics.MaxErrorClasses)
		}
	}
	long := `sqsworker_messages_failed_total{error_class="*pkg.Error01",handler="` + strings.Repeat("h", metrics.MaxDimensionLength) + `",queue="q"}`
	if got[long] != 1 {
		t.Errorf("a long handler name is not cut to %d bytes:\n%s", metrics.MaxDimensionLength, dump(got))
	}
	if got[`sqsworker_messages_failed_total{error_class="*pkg.Error00",handler="h",queue="q"}`] != 2 || got[`sqsworker_messages_failed_total{error_class="",handler="h",queue="q"}`] != 1 {
		t.Errorf("samples:\n%s", dump(got))
	}
}

// A worker that stops with its circuit breaker open leaves it closed in a
// registry it shares: a worker made again on that registry (after a fatal
// error, say) shows its own breaker, not the stopped one's. Before, the
// stopped worker's open breaker stayed the greatest for ever.
func TestStoppedWorkerLeavesNoBreakerOpen(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	reg := prometheus.NewRegistry()
	run := func(h sqsworker.Handler, until func() bool) {
		t.Helper()
		w, err := worker.New(f, worker.Config{
			QueueURL: url, WaitTime: time.Second, DisableDepth: true,
			Metrics: sqsprom.New(reg, sqsprom.Options{}),
			Breaker: sqsworker.BreakerConfig{Threshold: 1, ProbeInterval: time.Hour, MaxProbeInterval: time.Hour},
			Logger:  slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(context.Background(), h) }()
		deadline := time.Now().Add(30 * time.Second)
		for !until() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	breaker := func() float64 { _, got := gather(t, reg); return got[`sqsworker_breaker_state{queue="jobs"}`] }
	f.Send(url, "job")
	down := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		return sqsworker.Unavailable(fmt.Errorf("database down"))
	})
	run(down, func() bool { return breaker() == 1 })
	healthy := make(chan struct{}, 1)
	f.Send(url, "job 2")
	run(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		select {
		case healthy <- struct{}{}:
		default:
		}
		return nil
	}), func() bool { return len(healthy) > 0 })
	if v := breaker(); v != 0 {
		t.Errorf("breaker_state %v after the worker with the open breaker stopped, and a healthy one ran; want 0", v)
	}
}

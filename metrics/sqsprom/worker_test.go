package sqsprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// badInput is a handler error with an error class of its own.
type badInput struct{ error }

func (badInput) ErrorClass() string { return "bad-input" }

var errFlaky = errors.New("flaky")

// scrape reads /metrics over HTTP and flattens it as samples does.
func scrape(t *testing.T, base string) map[string]float64 {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v\n%s", err, body)
	}
	mfs := make([]*dto.MetricFamily, 0, len(fams))
	for _, mf := range fams {
		mfs = append(mfs, mf)
	}
	return samples(mfs)
}

// A real worker on a queue of the local SQS emulator, recording into a
// Recorder whose registry an HTTP server serves: a scrape during the run
// shows what happened — messages received, succeeded, failed by error class,
// dead-lettered, retried, handler durations and the depth gauges — and the
// readiness probe turns 503 as soon as the shutdown starts, while a handler
// still runs, the liveness probe and the metrics answering on.
func TestWorkerScrape(t *testing.T) {
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 5})
	name := metrics.QueueName(q.URL)

	reg := prometheus.NewRegistry()
	w, err := worker.New(c, worker.Config{
		QueueURL:        q.URL,
		Metrics:         sqsprom.New(reg, sqsprom.Options{}),
		MetricsInterval: 200 * time.Millisecond,
		HandlerName:     "jobs",
		WaitTime:        time.Second,
		Backoff:         sqsworker.ExponentialBackoff{Jitter: func() float64 { return 0 }},
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + ln.Addr().String()
	srvCtx, stopServer := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sqsprom.ServeListener(srvCtx, ln, sqsprom.Handler(reg, w.Ready)) }()
	t.Cleanup(func() {
		stopServer()
		if err := <-served; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	})

	if code, _ := get(t, base+"/readyz"); code != 503 {
		t.Errorf("/readyz before Run: %d, want 503", code)
	}

	var mu sync.Mutex
	calls := map[string]int{}
	started, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	ran := make(chan error, 1)
	go func() {
		ran <- w.Run(context.Background(), sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			mu.Lock()
			calls[m.Body]++
			n := calls[m.Body]
			mu.Unlock()
			switch {
			case strings.HasPrefix(m.Body, "bad"):
				return sqsworker.Permanent(badInput{errors.New("bad input")})
			case m.Body == "flaky" && n == 1:
				return errFlaky
			case m.Body == "block":
				close(started)
				<-release
			}
			return nil
		}))
	}()
	stopped := false
	t.Cleanup(func() {
		unblock()
		if !stopped {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Shutdown(ctx)
			<-ran
		}
	})

	localtest.Eventually(t, 10*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 }, "/readyz not 200 while running")
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz while running: %d, want 200", code)
	}

	localtest.Send(t, c, q.URL, "", "ok-1", "ok-2", "ok-3", "bad-1", "bad-2", "flaky")
	k := func(metric string, labels ...string) string {
		kv := append([]string{fmt.Sprintf("queue=%q", name)}, labels...)
		slices.Sort(kv)
		return metric + "{" + strings.Join(kv, ",") + "}"
	}
	want := map[string]float64{
		k("sqsworker_messages_received_total"):                                                      7,
		k("sqsworker_messages_succeeded_total", `handler="jobs"`):                                   4,
		k("sqsworker_messages_failed_total", `handler="jobs"`, `error_class="bad-input"`):           2,
		k("sqsworker_messages_failed_total", `handler="jobs"`, `error_class="*errors.errorString"`): 1,
		k("sqsworker_messages_dead_lettered_total", `error_class="bad-input"`):                      2,
		k("sqsworker_messages_retried_total"):                                                       1,
		k("sqsworker_handler_duration_seconds_count", `handler="jobs"`):                             7,
		k("sqsworker_receive_to_done_latency_seconds_count"):                                        7,
		k("sqsworker_enqueue_to_done_latency_seconds_count"):                                        7,
		k("sqsworker_dlq_visible"):                                                                  2,
	}
	var got map[string]float64
	settled := func() bool {
		got = scrape(t, base)
		for key, v := range want {
			if got[key] != v {
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(30 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			var diff []string
			for key, v := range want {
				if got[key] != v {
					diff = append(diff, fmt.Sprintf("  %s = %v, want %v", key, got[key], v))
				}
			}
			slices.Sort(diff)
			t.Fatalf("scrape after 30s:\n%s\nall samples:\n%s", strings.Join(diff, "\n"), dump(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, g := range []string{"sqsworker_queue_visible", "sqsworker_queue_in_flight", "sqsworker_queue_delayed", "sqsworker_in_flight"} {
		if _, ok := got[k(g)]; !ok {
			t.Errorf("gauge %s missing from the scrape:\n%s", k(g), dump(got))
		}
	}

	// A handler holds the shutdown up: the worker is stopping, not stopped.
	localtest.Send(t, c, q.URL, "", "block")
	select {
	case <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("the blocking message was not handled")
	}
	if code, _ := get(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz while handling: %d, want 200", code)
	}
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		shut <- w.Shutdown(ctx)
	}()
	localtest.Eventually(t, 5*time.Second, func() bool { code, _ := get(t, base+"/readyz"); return code == 503 }, "/readyz not 503 once Shutdown started")
	select {
	case err := <-ran:
		t.Fatalf("Run returned %v while a handler was blocked", err)
	default:
	}
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz while shutting down: %d, want 200", code)
	}
	if got := scrape(t, base); got[k("sqsworker_in_flight")] != 1 {
		t.Errorf("in_flight while shutting down = %v, want 1", got[k("sqsworker_in_flight")])
	}

	unblock()
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-ran; err != nil {
		t.Errorf("Run: %v", err)
	}
	stopped = true
	got = scrape(t, base)
	if got[k("sqsworker_messages_succeeded_total", `handler="jobs"`)] != 5 || got[k("sqsworker_in_flight")] != 0 {
		t.Errorf("after the run: succeeded %v, in_flight %v; want 5 and 0",
			got[k("sqsworker_messages_succeeded_total", `handler="jobs"`)], got[k("sqsworker_in_flight")])
	}
	if code, _ := get(t, base+"/readyz"); code != 503 {
		t.Errorf("/readyz after Run returned: %d, want 503", code)
	}
}

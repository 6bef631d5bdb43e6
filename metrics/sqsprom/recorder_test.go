package sqsprom_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/sqsworker/sqsworker/metrics"
	sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
)

// samples flattens gathered metric families into values keyed by
// name{label="value",...}, labels sorted: counters and gauges by their value,
// histograms as <name>_count and <name>_sum.
func samples(mfs []*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var kv []string
			for _, l := range m.GetLabel() {
				kv = append(kv, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			sort.Strings(kv)
			labels := "{" + strings.Join(kv, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[mf.GetName()+labels] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[mf.GetName()+labels] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[mf.GetName()+"_count"+labels] = float64(m.GetHistogram().GetSampleCount())
				out[mf.GetName()+"_sum"+labels] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return out
}

func gather(t *testing.T, g prometheus.Gatherer) ([]*dto.MetricFamily, map[string]float64) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gathering: %v", err)
	}
	return mfs, samples(mfs)
}

var all = metrics.Dims{Queue: "jobs", Handler: "email", ErrorClass: "timeout"}

// Every metric of the vocabulary gets its Prometheus name, type and the
// labels of its row in the table of package metrics; dimensions it does not
// have are dropped.
func TestVocabulary(t *testing.T) {
	want := []struct {
		name   string
		family string
		typ    dto.MetricType
		labels []string
	}{
		{metrics.MessagesReceived, "sqsworker_messages_received_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.MessagesSucceeded, "sqsworker_messages_succeeded_total", dto.MetricType_COUNTER, []string{"handler", "queue"}},
		{metrics.MessagesFailed, "sqsworker_messages_failed_total", dto.MetricType_COUNTER, []string{"error_class", "handler", "queue"}},
		{metrics.MessagesRetried, "sqsworker_messages_retried_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.MessagesPostponed, "sqsworker_messages_postponed_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.RequeueFailures, "sqsworker_requeue_failures_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.MessagesDeadLettered, "sqsworker_messages_dead_lettered_total", dto.MetricType_COUNTER, []string{"error_class", "queue"}},
		{metrics.VisibilityExtensions, "sqsworker_visibility_extensions_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.LeasesLost, "sqsworker_leases_lost_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.IdempotentDuplicates, "sqsworker_idempotent_duplicates_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.HandlerDuration, "sqsworker_handler_duration_seconds", dto.MetricType_HISTOGRAM, []string{"handler", "queue"}},
		{metrics.EnqueueToDoneLatency, "sqsworker_enqueue_to_done_latency_seconds", dto.MetricType_HISTOGRAM, []string{"queue"}},
		{metrics.ReceiveToDoneLatency, "sqsworker_receive_to_done_latency_seconds", dto.MetricType_HISTOGRAM, []string{"queue"}},
		{metrics.InFlight, "sqsworker_in_flight", dto.MetricType_GAUGE, []string{"queue"}},
		{metrics.QueueVisible, "sqsworker_queue_visible", dto.MetricType_GAUGE, []string{"queue"}},
		{metrics.QueueInFlight, "sqsworker_queue_in_flight", dto.MetricType_GAUGE, []string{"queue"}},
		{metrics.QueueDelayed, "sqsworker_queue_delayed", dto.MetricType_GAUGE, []string{"queue"}},
		{metrics.DeadLetterQueueVisible, "sqsworker_dlq_visible", dto.MetricType_GAUGE, []string{"queue"}},
		{metrics.BreakerState, "sqsworker_breaker_state", dto.MetricType_GAUGE, []string{"queue"}},
		{metrics.BreakerOpens, "sqsworker_breaker_opens_total", dto.MetricType_COUNTER, []string{"queue"}},
		{metrics.BreakerProbes, "sqsworker_breaker_probes_total", dto.MetricType_COUNTER, []string{"queue"}},
	}
	reg := prometheus.NewPedanticRegistry()
	r := sqsprom.New(reg, sqsprom.Options{})
	for _, w := range want {
		switch w.typ {
		case dto.MetricType_COUNTER:
			r.Add(w.name, 2, all)
		case dto.MetricType_HISTOGRAM:
			r.Observe(w.name, 0.3, all)
		case dto.MetricType_GAUGE:
			r.Set(w.name, 7, all)
		}
	}
	mfs, _ := gather(t, reg)
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	if len(mfs) != len(want) {
		t.Errorf("%d metric families, want %d", len(mfs), len(want))
	}
	for _, w := range want {
		mf := byName[w.family]
		if mf == nil {
			t.Errorf("%s: no metric family %s", w.name, w.family)
			continue
		}
		if mf.GetType() != w.typ {
			t.Errorf("%s: type %v, want %v", w.family, mf.GetType(), w.typ)
		}
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help", w.family)
		}
		if len(mf.GetMetric()) != 1 {
			t.Fatalf("%s: %d series, want 1", w.family, len(mf.GetMetric()))
		}
		m := mf.GetMetric()[0]
		var names []string
		for _, l := range m.GetLabel() {
			names = append(names, l.GetName())
			want := map[string]string{"queue": "jobs", "handler": "email", "error_class": "timeout"}[l.GetName()]
			if l.GetValue() != want {
				t.Errorf("%s: label %s=%q, want %q", w.family, l.GetName(), l.GetValue(), want)
			}
		}
		if !slices.Equal(names, w.labels) {
			t.Errorf("%s: labels %v, want %v", w.family, names, w.labels)
		}
		switch w.typ {
		case dto.MetricType_COUNTER:
			if v := m.GetCounter().GetValue(); v != 2 {
				t.Errorf("%s = %v, want 2", w.family, v)
			}
		case dto.MetricType_HISTOGRAM:
			if h := m.GetHistogram(); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.3 {
				t.Errorf("%s: count %d sum %v, want 1 and 0.3", w.family, h.GetSampleCount(), h.GetSampleSum())
			}
		case dto.MetricType_GAUGE:
			if v := m.GetGauge().GetValue(); v != 7 {
				t.Errorf("%s = %v, want 7", w.family, v)
			}
		}
	}
}

// Counters add up by their own labels; a negative n is ignored; gauges keep
// the last value; series appear on first use, Add(0) included.
func TestValues(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := sqsprom.New(reg, sqsprom.Options{})
	if _, s := gather(t, reg); len(s) != 0 {
		t.Fatalf("series before any use: %v", s)
	}
	r.Add(metrics.MessagesReceived, 10, metrics.Dims{Queue: "a"})
	r.Add(metrics.MessagesReceived, 5, metrics.Dims{Queue: "a", Handler: "ignored"})
	r.Add(metrics.MessagesReceived, -3, metrics.Dims{Queue: "a"})
	r.Add(metrics.MessagesReceived, 1, metrics.Dims{Queue: "b"})
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "a", Handler: "h", ErrorClass: "x"})
	r.Add(metrics.MessagesFailed, 2, metrics.Dims{Queue: "a", Handler: "h", ErrorClass: "y"})
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "a", Handler: "h"})
	r.Add(metrics.LeasesLost, 0, metrics.Dims{Queue: "a"})
	r.Set(metrics.InFlight, 3, metrics.Dims{Queue: "a"})
	r.Set(metrics.InFlight, 1, metrics.Dims{Queue: "a"})
	r.Observe(metrics.ReceiveToDoneLatency, 1, metrics.Dims{Queue: "a"})
	r.Observe(metrics.ReceiveToDoneLatency, 2.5, metrics.Dims{Queue: "a", ErrorClass: "dropped"})
	_, got := gather(t, reg)
	want := map[string]float64{
		`sqsworker_messages_received_total{queue="a"}`:                           15,
		`sqsworker_messages_received_total{queue="b"}`:                           1,
		`sqsworker_messages_failed_total{error_class="x",handler="h",queue="a"}`: 1,
		`sqsworker_messages_failed_total{error_class="y",handler="h",queue="a"}`: 2,
		`sqsworker_messages_failed_total{error_class="",handler="h",queue="a"}`:  1,
		`sqsworker_leases_lost_total{queue="a"}`:                                 0,
		`sqsworker_in_flight{queue="a"}`:                                         1,
		`sqsworker_receive_to_done_latency_seconds_count{queue="a"}`:             2,
		`sqsworker_receive_to_done_latency_seconds_sum{queue="a"}`:               3.5,
	}
	if !mapsEqual(got, want) {
		t.Errorf("samples:\n%s\nwant:\n%s", dump(got), dump(want))
	}
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func dump(m map[string]float64) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("  %s %v", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// The histograms have the default buckets, 5ms to 15 minutes, or those of the
// options.
func TestBuckets(t *testing.T) {
	bounds := func(opts sqsprom.Options) []float64 {
		reg := prometheus.NewRegistry()
		sqsprom.New(reg, opts).Observe(metrics.HandlerDuration, 0.2, all)
		mfs, _ := gather(t, reg)
		var b []float64
		for _, bk := range mfs[0].GetMetric()[0].GetHistogram().GetBucket() {
			b = append(b, bk.GetUpperBound())
		}
		return b
	}
	if got := bounds(sqsprom.Options{}); !slices.Equal(got, sqsprom.DefaultBuckets) || got[0] != 0.005 || got[len(got)-1] != 900 {
		t.Errorf("default buckets %v, want %v from 0.005 to 900", got, sqsprom.DefaultBuckets)
	}
	if got := bounds(sqsprom.Options{Buckets: []float64{0.1, 1, 10}}); !slices.Equal(got, []float64{0.1, 1, 10}) {
		t.Errorf("buckets %v, want [0.1 1 10]", got)
	}
}

// Namespace and ConstLabels shape every metric.
func TestOptions(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := sqsprom.New(reg, sqsprom.Options{Namespace: "billing", ConstLabels: prometheus.Labels{"env": "prod"}})
	r.Add(metrics.MessagesSucceeded, 1, all)
	r.Set(metrics.QueueVisible, 4, all)
	_, got := gather(t, reg)
	want := map[string]float64{
		`billing_messages_succeeded_total{env="prod",handler="email",queue="jobs"}`: 1,
		`billing_queue_visible{env="prod",queue="jobs"}`:                            4,
	}
	if !mapsEqual(got, want) {
		t.Errorf("samples:\n%s\nwant:\n%s", dump(got), dump(want))
	}
}

// New panics on invalid options and on a name taken by another metric.
func TestNewPanics(t *testing.T) {
	taken := prometheus.NewRegistry()
	taken.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "sqsworker_messages_received_total", Help: "not ours"}))
	for name, f := range map[string]func(){
		"buckets out of order": func() {
			sqsprom.New(prometheus.NewRegistry(), sqsprom.Options{Buckets: []float64{1, 0.5}})
		},
		"duplicate bucket": func() {
			sqsprom.New(prometheus.NewRegistry(), sqsprom.Options{Buckets: []float64{1, 1}})
		},
		"const label queue": func() {
			sqsprom.New(prometheus.NewRegistry(), sqsprom.Options{ConstLabels: prometheus.Labels{"queue": "x"}})
		},
		"const label le": func() {
			sqsprom.New(prometheus.NewRegistry(), sqsprom.Options{ConstLabels: prometheus.Labels{"le": "x"}})
		},
		"name taken": func() { sqsprom.New(taken, sqsprom.Options{}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("New did not panic")
				}
			}()
			f()
		})
	}
}

// Two Recorders on one registry, one per worker, share the metrics.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := sqsprom.New(reg, sqsprom.Options{})
	b := sqsprom.New(reg, sqsprom.Options{})
	a.Add(metrics.MessagesReceived, 2, metrics.Dims{Queue: "q1"})
	b.Add(metrics.MessagesReceived, 3, metrics.Dims{Queue: "q1"})
	b.Add(metrics.MessagesReceived, 1, metrics.Dims{Queue: "q2"})
	a.Add("custom_events", 1, metrics.Dims{Queue: "q1"})
	b.Add("custom_events", 1, metrics.Dims{Queue: "q1"})
	_, got := gather(t, reg)
	want := map[string]float64{
		`sqsworker_messages_received_total{queue="q1"}`:                       5,
		`sqsworker_messages_received_total{queue="q2"}`:                       1,
		`sqsworker_custom_events_total{error_class="",handler="",queue="q1"}`: 2,
	}
	if !mapsEqual(got, want) {
		t.Errorf("samples:\n%s\nwant:\n%s", dump(got), dump(want))
	}
}

// A name the vocabulary does not know gets a metric with all three labels;
// one whose name is taken records nothing visible, and does not panic.
func TestUnknownNames(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "sqsworker_taken"}))
	r := sqsprom.New(reg, sqsprom.Options{})
	r.Add("jobs_scheduled", 4, metrics.Dims{Queue: "q", Handler: "h", ErrorClass: "c"})
	r.Observe("batch_duration", 0.5, metrics.Dims{Queue: "q"})
	r.Set("workers", 2, metrics.Dims{Handler: "h"})
	r.Set("taken", 9, metrics.Dims{Queue: "q"})
	r.Set("taken", 9, metrics.Dims{Queue: "q"})
	_, got := gather(t, reg)
	want := map[string]float64{
		`sqsworker_jobs_scheduled_total{error_class="c",handler="h",queue="q"}`:       4,
		`sqsworker_batch_duration_seconds_count{error_class="",handler="",queue="q"}`: 1,
		`sqsworker_batch_duration_seconds_sum{error_class="",handler="",queue="q"}`:   0.5,
		`sqsworker_workers{error_class="",handler="h",queue=""}`:                      2,
		`sqsworker_taken{}`: 0,
	}
	if !mapsEqual(got, want) {
		t.Errorf("samples:\n%s\nwant:\n%s", dump(got), dump(want))
	}
}

// Label values that are not valid UTF-8, which client_golang refuses with a
// panic, are cleaned as metrics.CleanDimension does.
func TestInvalidUTF8(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := sqsprom.New(reg, sqsprom.Options{})
	r.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: "q", ErrorClass: "bad\xff"})
	r.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: "q", ErrorClass: "bad\xff"})
	_, got := gather(t, reg)
	if v := got[`sqsworker_messages_dead_lettered_total{error_class="bad_",queue="q"}`]; v != 2 || len(got) != 1 {
		t.Errorf("samples:\n%s\nwant the error class cleaned, counted twice", dump(got))
	}
}

// Concurrent calls, creating series and recording into them, add up.
func TestConcurrent(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := sqsprom.New(reg, sqsprom.Options{})
	const goroutines, calls = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				d := metrics.Dims{Queue: fmt.Sprintf("q%d", i%4), Handler: "h", ErrorClass: fmt.Sprintf("c%d", (i+g)%3)}
				r.Add(metrics.MessagesFailed, 1, d)
				r.Observe(metrics.HandlerDuration, 0.01, d)
				r.Set(metrics.InFlight, float64(i), d)
				r.Add(fmt.Sprintf("custom_%d", i%2), 1, d)
			}
		})
	}
	// Scrapes while recording.
	for range 5 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	_, got := gather(t, reg)
	sum := func(prefix string) float64 {
		s := 0.0
		for k, v := range got {
			if strings.HasPrefix(k, prefix+"{") {
				s += v
			}
		}
		return s
	}
	for _, name := range []string{"sqsworker_messages_failed_total", "sqsworker_handler_duration_seconds_count"} {
		if s := sum(name); s != goroutines*calls {
			t.Errorf("%s adds up to %v, want %d", name, s, goroutines*calls)
		}
	}
	if s := sum("sqsworker_custom_0_total") + sum("sqsworker_custom_1_total"); s != goroutines*calls {
		t.Errorf("custom counters add up to %v, want %d", s, goroutines*calls)
	}
	series := 0
	for k := range got {
		if strings.HasPrefix(k, "sqsworker_messages_failed_total{") {
			series++
		}
	}
	if series != 12 {
		t.Errorf("%d failed series, want 4 queues x 3 classes", series)
	}
}

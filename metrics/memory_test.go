package metrics_test

import (
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/metrics"
)

func TestMemoryTotalsAndTable(t *testing.T) {
	m := metrics.NewMemory()
	r := metrics.Multi(m, metrics.Nop{})
	r.Add(metrics.MessagesFailed, 2, metrics.Dims{Queue: "q", ErrorClass: "timeout"})
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", ErrorClass: "panic"})
	r.Observe(metrics.HandlerDuration, 0.5, metrics.Dims{Queue: "q"})
	r.Observe(metrics.HandlerDuration, 1.5, metrics.Dims{Queue: "q"})
	r.Set(metrics.QueueVisible, 7, metrics.Dims{Queue: "q"})
	if n := m.Total(metrics.MessagesFailed, metrics.Dims{Queue: "q"}); n != 3 {
		t.Errorf("total failed = %d", n)
	}
	if n := m.Total(metrics.MessagesFailed, metrics.Dims{ErrorClass: "panic"}); n != 1 {
		t.Errorf("panics = %d", n)
	}
	var b strings.Builder
	if err := m.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 values, mean 1s, max 1.5s", "queue=q,error_class=timeout  2", "queue_visible"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

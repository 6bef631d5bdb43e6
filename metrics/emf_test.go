package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/metrics"
)

// validEMF checks one EMF record against the format's rules and returns it.
func validEMF(t *testing.T, line string) map[string]any {
	t.Helper()
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("not JSON: %v: %s", err, line)
	}
	aws, ok := rec["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("no _aws: %s", line)
	}
	if _, ok := aws["Timestamp"].(float64); !ok {
		t.Errorf("no Timestamp: %s", line)
	}
	cwms, _ := aws["CloudWatchMetrics"].([]any)
	if len(cwms) != 1 {
		t.Fatalf("CloudWatchMetrics: %s", line)
	}
	cwm := cwms[0].(map[string]any)
	if cwm["Namespace"] != "test" {
		t.Errorf("namespace %v", cwm["Namespace"])
	}
	for _, set := range cwm["Dimensions"].([]any) {
		for _, d := range set.([]any) {
			if _, ok := rec[d.(string)].(string); !ok {
				t.Errorf("dimension %v has no string value: %s", d, line)
			}
		}
	}
	for _, m := range cwm["Metrics"].([]any) {
		name := m.(map[string]any)["Name"].(string)
		if _, ok := rec[name]; !ok {
			t.Errorf("metric %s has no value: %s", name, line)
		}
	}
	return rec
}

func TestEMFAggregatesAndFlushes(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "test")
	q := metrics.Dims{Queue: "orders"}
	qh := metrics.Dims{Queue: "orders", Handler: "billing"}
	e.Add(metrics.MessagesReceived, 3, q)
	e.Add(metrics.MessagesReceived, 2, q)
	e.Add(metrics.MessagesSucceeded, 4, qh)
	e.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "orders", Handler: "billing", ErrorClass: "timeout"})
	e.Observe(metrics.HandlerDuration, 0.0123456, qh)
	e.Observe(metrics.HandlerDuration, 0.0123449, qh)
	e.Observe(metrics.HandlerDuration, 2, qh)
	e.Set(metrics.QueueVisible, 42, q)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d records, want 3 (one per set of dimensions):\n%s", len(lines), buf.String())
	}
	r0, r1, r2 := validEMF(t, lines[0]), validEMF(t, lines[1]), validEMF(t, lines[2])
	if r0["queue"] != "orders" || r0[metrics.MessagesReceived] != 5.0 || r0[metrics.QueueVisible] != 42.0 {
		t.Errorf("queue record: %s", lines[0])
	}
	h := r1[metrics.HandlerDuration].(map[string]any)
	if r1[metrics.MessagesSucceeded] != 4.0 || len(h["Values"].([]any)) != 2 || h["Counts"].([]any)[0] != 2.0 {
		t.Errorf("handler record: %s", lines[1])
	}
	if r2["error_class"] != "timeout" || r2[metrics.MessagesFailed] != 1.0 {
		t.Errorf("failure record: %s", lines[2])
	}
	buf.Reset()
	if err := e.Flush(); err != nil || buf.Len() != 0 {
		t.Errorf("second flush wrote %q", buf.String())
	}
}

func TestEMFSplitsLargeHistograms(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "test")
	for i := range 250 {
		e.Observe(metrics.HandlerDuration, float64(i+1), metrics.Dims{Queue: "q"})
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	total := 0
	for _, l := range lines {
		r := validEMF(t, l)
		vals := r[metrics.HandlerDuration].(map[string]any)["Values"].([]any)
		if len(vals) > 100 {
			t.Errorf("%d values in one record", len(vals))
		}
		total += len(vals)
	}
	if len(lines) != 3 || total != 250 {
		t.Errorf("%d records with %d values", len(lines), total)
	}
}

// Records stay under CloudWatch Logs' 256 KB per event however many
// histograms are observed: 100 histograms with long names, of 100
// distinct values each, made one record of 314,828 bytes, which
// CloudWatch drops. Every value is still written.
func TestEMFRecordsStayUnder256KB(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "test")
	long := strings.Repeat("x", 200) // metric names up to 255 characters
	for h := range 100 {
		for v := range 100 {
			// 100 distinct values (3 significant digits), each observed
			// 3 times, with sums of full precision.
			for k := range 3 {
				e.Observe(fmt.Sprintf("custom_duration_%02d_%s", h, long), (1.01+float64(v)*0.01)*1e-5*(1+float64(k)*1e-9), metrics.Dims{Queue: "q"})
			}
		}
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	total, longest := 0, 0
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		longest = max(longest, len(l))
		if len(l) > 256<<10 {
			t.Errorf("a record of %d bytes, over 256 KB", len(l))
		}
		r := validEMF(t, l)
		for k, v := range r {
			if strings.HasPrefix(k, "custom_duration_") {
				total += len(v.(map[string]any)["Values"].([]any))
			}
		}
	}
	if total != 100*100 {
		t.Errorf("%d values written, want %d", total, 100*100)
	}
	t.Logf("longest record: %d bytes", longest)
}

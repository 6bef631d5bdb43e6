package lambda_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/metrics"
)

// Every invocation flushes its EMF records: received, succeeded, failed by
// error class, dead-lettered, retried, with handler durations.
func TestMetricsFlushedPerInvocation(t *testing.T) {
	f := newFake("30")
	var out bytes.Buffer
	fn := newHandler(t, jobs, lambda.Config{Client: f, Metrics: metrics.NewEMF(&out, "test"), HandlerName: "jobs", DisableHeartbeat: true})
	ev := received(t, f, "orders", "ok", "ok", "fail", "permanent", "panic")
	if _, err := fn(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	sums := map[string]float64{}
	durations := 0
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		if rec["queue"] != "orders" {
			t.Errorf("queue dimension %v", rec["queue"])
		}
		class, _ := rec["error_class"].(string)
		for k, v := range rec {
			switch v := v.(type) {
			case float64:
				sums[k+"/"+class] += v
			case map[string]any:
				if k == metrics.HandlerDuration {
					for _, c := range v["Counts"].([]any) {
						durations += int(c.(float64))
					}
				}
			}
		}
	}
	want := map[string]float64{
		metrics.MessagesReceived + "/":                        5,
		metrics.MessagesSucceeded + "/":                       2,
		metrics.MessagesFailed + "/*errors.errorString":       2,
		metrics.MessagesFailed + "/panic":                     1,
		metrics.MessagesDeadLettered + "/*errors.errorString": 1,
		metrics.MessagesRetried + "/":                         2,
	}
	for k, v := range want {
		if sums[k] != v {
			t.Errorf("%s = %v, want %v (all %v)", k, sums[k], v, sums)
		}
	}
	if durations != 5 {
		t.Errorf("%d handler durations, want 5", durations)
	}
	out.Reset()
	if _, err := fn(context.Background(), received(t, f, "orders", "ok")); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"messages_succeeded":1`) {
		t.Errorf("second invocation's flush: %s", out.String())
	}
}

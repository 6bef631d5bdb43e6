package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type classErr struct{ error }

func (classErr) ErrorClass() string { return "bad-input" }

// emfSums adds up the EMF records a run wrote: counters by name and
// error class, the last value of gauges, the number of histogram values.
func emfSums(t *testing.T, out string) (counts map[string]float64, gauges map[string]float64, observed map[string]int) {
	t.Helper()
	counts, gauges, observed = map[string]float64{}, map[string]float64{}, map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not JSON: %s", line)
		}
		aws := rec["_aws"].(map[string]any)
		cwm := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
		for _, m := range cwm["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			key := name
			if c, ok := rec["error_class"].(string); ok {
				key += "/" + c
			}
			switch v := rec[name].(type) {
			case float64:
				if strings.HasPrefix(name, "queue_") || name == metrics.DeadLetterQueueVisible || name == metrics.InFlight {
					gauges[key] = v
				} else {
					counts[key] += v
				}
			case map[string]any:
				for _, c := range v["Counts"].([]any) {
					observed[key] += int(c.(float64))
				}
			default:
				t.Errorf("metric %s without a value in %s", name, line)
			}
		}
	}
	return counts, gauges, observed
}

// After a scripted run the EMF output says what happened: N succeeded, M
// failed by class, K dead-lettered, with latencies and queue depths.
func TestMetricsEMF(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 5})
	var out lockedBuf
	emf := metrics.NewEMF(&out, "test")
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Backoff: noDelay, Metrics: emf, MetricsInterval: 200 * time.Millisecond, HandlerName: "jobs"},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			n := rec.add(m.Body)
			switch {
			case strings.HasPrefix(m.Body, "bad"):
				return sqsworker.Permanent(classErr{errors.New("bad input")})
			case m.Body == "flaky" && n == 1:
				return errTransient
			}
			return nil
		}))
	localtest.Send(t, c, q.URL, "", "ok-1", "ok-2", "ok-3", "bad-1", "bad-2", "flaky")
	localtest.Eventually(t, 30*time.Second, func() bool { s := r.w.Stats(); return s.Succeeded == 4 && s.DeadLettered == 2 && s.Deleted == 6 }, "jobs not settled")
	r.stop(10 * time.Second)
	counts, gauges, observed := emfSums(t, out.String())
	want := map[string]float64{
		metrics.MessagesReceived:                        7,
		metrics.MessagesSucceeded:                       4,
		metrics.MessagesFailed + "/bad-input":           2,
		metrics.MessagesFailed + "/*errors.errorString": 1,
		metrics.MessagesDeadLettered + "/bad-input":     2,
		metrics.MessagesRetried:                         1,
	}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, counts[k], v, counts)
		}
	}
	if observed[metrics.HandlerDuration] != 7 || observed[metrics.ReceiveToDoneLatency] != 7 || observed[metrics.EnqueueToDoneLatency] != 7 {
		t.Errorf("histograms %v, want 7 values each", observed)
	}
	for _, g := range []string{metrics.QueueVisible, metrics.QueueInFlight, metrics.DeadLetterQueueVisible} {
		if _, ok := gauges[g]; !ok {
			t.Errorf("gauge %s missing (gauges %v)", g, gauges)
		}
	}
}

package metrics

import (
	"bufio"
	"encoding/json"
	"io"
	"math"
	"sort"
	"sync"
	"time"
)

// EMF is a Recorder that writes CloudWatch Embedded Metric Format: JSON
// lines, one per set of dimensions, that CloudWatch Logs turns into metrics
// with no API call — from Lambda's log stream, or from ECS with the awslogs
// driver. It aggregates between flushes: counters are summed, histograms are
// kept as up to 100 distinct values with counts, gauges keep their last
// value. The worker flushes it on an interval; the Lambda adapter after every
// invocation.
type EMF struct {
	w         io.Writer
	namespace string
	now       func() time.Time

	mu    sync.Mutex
	sets  map[Dims]*emfSet
	order []Dims
}

type emfSet struct {
	counters map[string]int64
	gauges   map[string]float64
	hists    map[string]map[float64]int
}

// NewEMF returns an EMF sink writing to w (os.Stdout in Lambda and ECS)
// under the CloudWatch namespace (default "sqsworker").
func NewEMF(w io.Writer, namespace string) *EMF {
	if namespace == "" {
		namespace = "sqsworker"
	}
	return &EMF{w: w, namespace: namespace, now: time.Now, sets: map[Dims]*emfSet{}}
}

func (e *EMF) set(d Dims) *emfSet {
	s := e.sets[d]
	if s == nil {
		s = &emfSet{counters: map[string]int64{}, gauges: map[string]float64{}, hists: map[string]map[float64]int{}}
		e.sets[d] = s
		e.order = append(e.order, d)
	}
	return s
}

// Add implements Recorder.
func (e *EMF) Add(name string, n int64, d Dims) {
	e.mu.Lock()
	e.set(d).counters[name] += n
	e.mu.Unlock()
}

// Observe implements Recorder. Values are kept to about three significant
// digits (ten bits of mantissa), so that they aggregate.
func (e *EMF) Observe(name string, v float64, d Dims) {
	v = round3(v)
	e.mu.Lock()
	s := e.set(d)
	h := s.hists[name]
	if h == nil {
		h = map[float64]int{}
		s.hists[name] = h
	}
	h[v]++
	e.mu.Unlock()
}

// Set implements Recorder.
func (e *EMF) Set(name string, v float64, d Dims) {
	e.mu.Lock()
	e.set(d).gauges[name] = v
	e.mu.Unlock()
}

// round3 keeps the ten leading bits of v's mantissa: a relative precision
// of 1/1024, about three significant digits, for the price of a mask.
func round3(v float64) float64 {
	const drop = 52 - 10
	return math.Float64frombits(math.Float64bits(v) &^ (1<<drop - 1))
}

// emfMaxValues is EMF's limit on the values of one metric in one record.
const emfMaxValues = 100

// Flush writes what was recorded since the last flush, one line per set of
// dimensions, and starts afresh. Nothing recorded, nothing written.
func (e *EMF) Flush() error {
	e.mu.Lock()
	sets, order := e.sets, e.order
	e.sets, e.order = map[Dims]*emfSet{}, nil
	e.mu.Unlock()
	ts := e.now().UnixMilli()
	bw := bufio.NewWriter(e.w)
	for _, d := range order {
		for _, rec := range e.records(d, sets[d], ts) {
			b, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			bw.Write(b)
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfValues struct {
	Values []float64 `json:"Values"`
	Counts []int     `json:"Counts"`
}

// records turns one set of dimensions into EMF records: one, unless a
// histogram has more values than one record may carry.
func (e *EMF) records(d Dims, s *emfSet, ts int64) []map[string]any {
	var dimNames []string
	base := map[string]any{}
	for _, kv := range [...]struct{ k, v string }{{"queue", d.Queue}, {"handler", d.Handler}, {"error_class", d.ErrorClass}} {
		if kv.v != "" {
			dimNames = append(dimNames, kv.k)
			base[kv.k] = kv.v
		}
	}
	newRecord := func() (map[string]any, *[]emfMetric) {
		r := make(map[string]any, len(base)+8)
		for k, v := range base {
			r[k] = v
		}
		ms := &[]emfMetric{}
		r["_aws"] = map[string]any{
			"Timestamp": ts,
			"CloudWatchMetrics": []map[string]any{{
				"Namespace": e.namespace, "Dimensions": [][]string{dimNames}, "Metrics": ms,
			}},
		}
		return r, ms
	}
	rec, ms := newRecord()
	out := []map[string]any{rec}
	for _, name := range sortedKeys(s.counters) {
		rec[name] = s.counters[name]
		*ms = append(*ms, emfMetric{name, "Count"})
	}
	for _, name := range sortedKeys(s.gauges) {
		rec[name] = s.gauges[name]
		*ms = append(*ms, emfMetric{name, "Count"})
	}
	for _, name := range sortedKeys(s.hists) {
		h := s.hists[name]
		vals := make([]float64, 0, len(h))
		for v := range h {
			vals = append(vals, v)
		}
		sort.Float64s(vals)
		for start := 0; start < len(vals); start += emfMaxValues {
			if start > 0 { // the rest goes into records of its own
				rec, ms = newRecord()
				out = append(out, rec)
			}
			chunk := vals[start:min(start+emfMaxValues, len(vals))]
			ev := emfValues{Values: chunk, Counts: make([]int, len(chunk))}
			for i, v := range chunk {
				ev.Counts[i] = h[v]
			}
			rec[name] = ev
			*ms = append(*ms, emfMetric{name, "Seconds"})
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

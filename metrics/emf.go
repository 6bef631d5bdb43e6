package metrics

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"sync"
	"time"
)

// EMF is a Recorder that writes CloudWatch Embedded Metric Format: JSON
// lines that CloudWatch Logs turns into metrics with no API call — from
// Lambda's log stream, or from ECS with the awslogs driver. It aggregates
// between flushes: counters are summed, histograms are kept as distinct
// values (to about three significant digits) with counts, gauges keep their
// last value. The worker flushes it on an interval; the Lambda adapter after
// every invocation.
//
// Each flush writes one record per set of dimensions, more when the
// specification's limits call for it:
//
//   - a record has at most 100 metrics ([EMFMaxMetrics]) and a histogram at
//     most 100 distinct values ([EMFMaxValues]); the rest go to records of
//     their own, with the same dimensions and timestamp;
//   - a histogram is written as CloudWatch's values-and-counts shape,
//     {"Values":[…],"Counts":[…],"Max":…,"Min":…,"Count":…,"Sum":…}, the
//     statistics exact (the values are rounded, not the statistics);
//   - a record has one dimension set, of at most 30 keys, "[[]]" when the
//     measurement has no dimension; dimension values are cleaned, and error
//     classes capped per flush, as the package documentation says;
//   - _aws.Timestamp is the flush's time, in milliseconds since the epoch.
//
// Values CloudWatch cannot store — NaN, ±Inf, beyond ±2^360 — are dropped
// when recorded, as are metrics named like a dimension ("queue", "handler",
// "error_class") or "_aws", or empty, or over 255 bytes; [EMF.Dropped]
// counts them.
//
// Each record is marshalled whole and written with one Write call, under a
// lock that every EMF of the process shares: two workers flushing at once
// into the same writer never interleave their records, even when the writer
// is not safe for concurrent use. On an *os.File (os.Stdout) a single Write
// is not interleaved with the other writes of the process either, such as a
// slog handler's; a logger that writes to the same stream through another
// io.Writer should wrap it in [LockedWriter]. (The runtimes log to their
// Logger, by default slog.Default(), which writes to standard error.)
type EMF struct {
	w         io.Writer
	namespace string
	now       func() time.Time

	mu      sync.Mutex
	sets    map[Dims]*emfSet
	order   []Dims
	classes map[string]bool // the error classes of this flush
	dropped int64
}

// CloudWatch's limits on an EMF record.
const (
	// EMFMaxMetrics is the most metrics in one record.
	EMFMaxMetrics = 100
	// EMFMaxValues is the most values of one metric in one record.
	EMFMaxValues = 100
	// EMFMaxRecordBytes is the most bytes of one record's metrics a
	// record takes, below CloudWatch Logs' 256 KB per event (with room
	// for the dimensions and the metadata).
	EMFMaxRecordBytes = 200 << 10
	// EMFMaxDimensions is the most dimension keys in one dimension set.
	EMFMaxDimensions = 30
	// EMFMaxDimensionValue is the longest dimension value, in characters.
	EMFMaxDimensionValue = 1024
	// emfMaxName is the longest metric name.
	emfMaxName = 255
)

// emfLimit is the largest magnitude CloudWatch takes, 2^360.
var emfLimit = math.Ldexp(1, 360)

type emfSet struct {
	counters map[string]int64
	gauges   map[string]float64
	hists    map[string]map[float64]*emfBucket
}

// emfBucket is one distinct (rounded) value of a histogram: how many values
// it stands for, and their exact sum, least and greatest.
type emfBucket struct {
	n             int
	sum, min, max float64
}

// NewEMF returns an EMF sink writing to w (os.Stdout in Lambda and ECS)
// under the CloudWatch namespace (default "sqsworker").
func NewEMF(w io.Writer, namespace string) *EMF {
	if namespace == "" {
		namespace = "sqsworker"
	}
	return &EMF{w: w, namespace: namespace, now: time.Now, sets: map[Dims]*emfSet{}, classes: map[string]bool{}}
}

// Dropped returns the number of values dropped since e was made: values
// CloudWatch cannot store (NaN, ±Inf, beyond ±2^360), and those of metric
// names EMF cannot carry.
func (e *EMF) Dropped() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dropped
}

// set returns the series of d, cleaned and with its error class capped.
// e.mu is held.
func (e *EMF) set(d Dims) *emfSet {
	d.Queue, d.Handler = CleanDimension(d.Queue), CleanDimension(d.Handler)
	if d.ErrorClass != "" {
		d.ErrorClass = CleanDimension(d.ErrorClass)
		if !e.classes[d.ErrorClass] {
			if len(e.classes) >= MaxErrorClasses {
				d.ErrorClass = OtherErrorClass
			} else {
				e.classes[d.ErrorClass] = true
			}
		}
	}
	s := e.sets[d]
	if s == nil {
		s = &emfSet{counters: map[string]int64{}, gauges: map[string]float64{}, hists: map[string]map[float64]*emfBucket{}}
		e.sets[d] = s
		e.order = append(e.order, d)
	}
	return s
}

// validName reports whether a metric name can be a member of a record.
func validName(name string) bool {
	switch name {
	case "", "_aws", "queue", "handler", "error_class":
		return false
	}
	return len(name) <= emfMaxName
}

// validValue reports whether CloudWatch takes v.
func validValue(v float64) bool {
	return !math.IsNaN(v) && math.Abs(v) <= emfLimit
}

// Add implements Recorder.
func (e *EMF) Add(name string, n int64, d Dims) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !validName(name) {
		e.dropped++
		return
	}
	e.set(d).counters[name] += n
}

// Observe implements Recorder. Values are kept to about three significant
// digits (ten bits of mantissa), so that they aggregate; the count, sum,
// minimum and maximum are exact.
func (e *EMF) Observe(name string, v float64, d Dims) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !validName(name) || !validValue(v) {
		e.dropped++
		return
	}
	s := e.set(d)
	h := s.hists[name]
	if h == nil {
		h = map[float64]*emfBucket{}
		s.hists[name] = h
	}
	r := round3(v)
	if b := h[r]; b != nil {
		b.n++
		b.sum += v
		b.min, b.max = min(b.min, v), max(b.max, v)
	} else {
		h[r] = &emfBucket{n: 1, sum: v, min: v, max: v}
	}
}

// Set implements Recorder.
func (e *EMF) Set(name string, v float64, d Dims) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !validName(name) || !validValue(v) {
		e.dropped++
		return
	}
	e.set(d).gauges[name] = v
}

// round3 keeps the ten leading bits of v's mantissa: a relative precision
// of 1/1024, about three significant digits, for the price of a mask.
func round3(v float64) float64 {
	const drop = 52 - 10
	return math.Float64frombits(math.Float64bits(v) &^ (1<<drop - 1))
}

// emfWriteMu serialises the records every EMF of the process writes, and
// the writes of LockedWriter.
var emfWriteMu sync.Mutex

// LockedWriter returns a writer that passes each Write to w under the lock
// the EMF sinks write their records under. Give it to a logger that writes
// to the same stream as an EMF sink, through an io.Writer that is not an
// *os.File, so that its lines and the records never interleave:
//
//	out := metrics.LockedWriter(w)
//	logger := slog.New(slog.NewJSONHandler(out, nil))
//	rec := metrics.NewEMF(out, "orders")
func LockedWriter(w io.Writer) io.Writer {
	if lw, ok := w.(lockedWriter); ok {
		return lw
	}
	return lockedWriter{w}
}

type lockedWriter struct{ w io.Writer }

func (l lockedWriter) Write(p []byte) (int, error) {
	emfWriteMu.Lock()
	defer emfWriteMu.Unlock()
	return l.w.Write(p)
}

// writeRecord writes one record, whole, with one Write call.
func (e *EMF) writeRecord(b []byte) error {
	w := e.w
	if lw, ok := w.(lockedWriter); ok {
		w = lw.w
	}
	emfWriteMu.Lock()
	defer emfWriteMu.Unlock()
	n, err := w.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// Flush writes what was recorded since the last flush, a record per set of
// dimensions at least, and starts afresh, error classes included. Nothing
// recorded, nothing written. A record that cannot be marshalled is skipped,
// the others written; Flush returns the errors joined. It stops at the first
// write that fails.
func (e *EMF) Flush() error {
	e.mu.Lock()
	sets, order := e.sets, e.order
	e.sets, e.order, e.classes = map[Dims]*emfSet{}, nil, map[string]bool{}
	e.mu.Unlock()
	ts := e.now().UnixMilli()
	var errs []error
	for _, d := range order {
		for _, rec := range e.records(d, sets[d], ts) {
			b, err := json.Marshal(rec)
			if err != nil {
				errs = append(errs, fmt.Errorf("metrics: an EMF record of %+v: %w", d, err))
				continue
			}
			if err := e.writeRecord(append(b, '\n')); err != nil {
				errs = append(errs, fmt.Errorf("metrics: writing EMF records: %w", err))
				return errors.Join(errs...)
			}
		}
	}
	return errors.Join(errs...)
}

// emfMetric is a MetricDefinition.
type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

// emfDirective is a MetricDirective.
type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMetadata struct {
	Timestamp         int64          `json:"Timestamp"`
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// emfHistogram is a histogram's value: distinct values with their counts,
// and the statistics of all the values.
type emfHistogram struct {
	Values []float64 `json:"Values"`
	Counts []int     `json:"Counts"`
	Max    float64   `json:"Max"`
	Min    float64   `json:"Min"`
	Count  int       `json:"Count"`
	Sum    float64   `json:"Sum"`
}

// emfEntry is one metric of a record: its definition and value.
type emfEntry struct {
	def   emfMetric
	value any
	// part is the index of a histogram's chunk: chunk k goes to record k
	// or later, as a record has one member per name.
	part int
}

// records turns one set of dimensions into EMF records, as few as the
// limits on metrics per record, values per metric and bytes per record
// allow.
func (e *EMF) records(d Dims, s *emfSet, ts int64) []map[string]any {
	dimNames := []string{} // "[[]]" without dimensions, never "[null]"
	base := map[string]any{}
	for _, kv := range [...]struct{ k, v string }{{"queue", d.Queue}, {"handler", d.Handler}, {"error_class", d.ErrorClass}} {
		if kv.v != "" {
			dimNames = append(dimNames, kv.k)
			base[kv.k] = kv.v
		}
	}
	var entries []emfEntry
	for _, name := range sortedKeys(s.counters) {
		entries = append(entries, emfEntry{def: emfMetric{name, "Count"}, value: s.counters[name]})
	}
	for _, name := range sortedKeys(s.gauges) {
		unit := "Count"
		if name == BreakerState {
			unit = "None"
		}
		entries = append(entries, emfEntry{def: emfMetric{name, unit}, value: s.gauges[name]})
	}
	for _, name := range sortedKeys(s.hists) {
		h := s.hists[name]
		vals := make([]float64, 0, len(h))
		for v := range h {
			vals = append(vals, v)
		}
		sort.Float64s(vals)
		for part, start := 0, 0; start < len(vals); part, start = part+1, start+EMFMaxValues {
			chunk := vals[start:min(start+EMFMaxValues, len(vals))]
			hv := emfHistogram{Values: chunk, Counts: make([]int, len(chunk)), Min: math.Inf(1), Max: math.Inf(-1)}
			for i, v := range chunk {
				b := h[v]
				hv.Counts[i] = b.n
				hv.Count += b.n
				hv.Sum += b.sum
				hv.Min, hv.Max = min(hv.Min, b.min), max(hv.Max, b.max)
			}
			entries = append(entries, emfEntry{def: emfMetric{name, "Seconds"}, value: hv, part: part})
		}
	}

	type record struct {
		members map[string]any
		metrics []emfMetric
		size    int // bytes of the members' names and values, and of metrics
	}
	var recs []*record
	for _, en := range entries {
		size := 48
		if b, err := json.Marshal(en.def.Name); err == nil {
			size += 2 * len(b) // as a member and in the metrics, escaped
		}
		if b, err := json.Marshal(en.value); err == nil {
			size += len(b)
		}
		var r *record
		for k := en.part; k < len(recs); k++ {
			if _, taken := recs[k].members[en.def.Name]; !taken && len(recs[k].metrics) < EMFMaxMetrics && recs[k].size+size <= EMFMaxRecordBytes {
				r = recs[k]
				break
			}
		}
		if r == nil {
			r = &record{members: make(map[string]any, len(base)+1)}
			for k, v := range base {
				r.members[k] = v
			}
			recs = append(recs, r)
		}
		r.members[en.def.Name] = en.value
		r.metrics = append(r.metrics, en.def)
		r.size += size
	}
	out := make([]map[string]any, 0, len(recs))
	for _, r := range recs {
		r.members["_aws"] = emfMetadata{
			Timestamp: ts,
			CloudWatchMetrics: []emfDirective{{
				Namespace: e.namespace, Dimensions: [][]string{slices.Clone(dimNames)}, Metrics: r.metrics,
			}},
		}
		out = append(out, r.members)
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

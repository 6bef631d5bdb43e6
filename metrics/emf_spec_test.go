package metrics_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/metrics"
)

// writeLog records each Write call it gets, and whether two were ever under
// way at once. It is not safe for concurrent use on purpose: the race
// detector, and its own count, catch writers that do not serialise.
type writeLog struct {
	writes     [][]byte
	inFlight   atomic.Int32
	overlapped atomic.Bool
}

func (w *writeLog) Write(p []byte) (int, error) {
	if w.inFlight.Add(1) > 1 {
		w.overlapped.Store(true)
	}
	defer w.inFlight.Add(-1)
	time.Sleep(10 * time.Microsecond) // widen the window two writers would share
	w.writes = append(w.writes, slices.Clone(p))
	return len(p), nil
}

// busyEMF records enough into e for records of several KiB: histograms of
// many values, on many queues.
func busyEMF(e *metrics.EMF, queues int) {
	for q := range queues {
		d := metrics.Dims{Queue: fmt.Sprintf("queue-%02d", q), Handler: "jobs"}
		e.Add(metrics.MessagesSucceeded, 3, d)
		for i := range 150 {
			e.Observe(metrics.HandlerDuration, float64(i+1)/7, d)
		}
	}
}

// Each record is one whole line, written with one Write call. Before, a 4
// KiB buffer handed the writer chunks that ended inside records.
func TestEMFWritesWholeRecords(t *testing.T) {
	var w writeLog
	e := metrics.NewEMF(&w, "test")
	busyEMF(e, 20)
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) == 0 {
		t.Fatal("nothing written")
	}
	for i, b := range w.writes {
		if bytes.Count(b, []byte("\n")) != 1 || b[len(b)-1] != '\n' {
			t.Fatalf("write %d of %d is not one whole line (%d bytes, %d newlines, ends %q)", i, len(w.writes), len(b), bytes.Count(b, []byte("\n")), b[max(0, len(b)-20):])
		}
		if !json.Valid(b) {
			t.Fatalf("write %d is not a JSON record: %.200s", i, b)
		}
	}
}

// Two sinks flushing at once into one writer (two workers on stdout), and
// a logger writing to it through LockedWriter, never overlap their writes:
// every line is a whole record or a whole log line. Before, their chunks
// interleaved, and lines were not JSON.
func TestEMFConcurrentFlushesDoNotInterleave(t *testing.T) {
	var w writeLog
	out := metrics.LockedWriter(&w)
	a, b := metrics.NewEMF(&w, "test"), metrics.NewEMF(out, "test")
	logger := slog.New(slog.NewJSONHandler(out, nil))
	var wg sync.WaitGroup
	for _, e := range []*metrics.EMF{a, b} {
		wg.Go(func() {
			for range 5 {
				busyEMF(e, 6)
				if err := e.Flush(); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 200 {
			logger.Info("handled", "message", i, "note", strings.Repeat("x", 100))
		}
	})
	wg.Wait()
	if w.overlapped.Load() {
		t.Error("two writes were under way at once")
	}
	records, logs := 0, 0
	for _, line := range bytes.SplitAfter(bytes.Join(w.writes, nil), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal(line, &v); err != nil {
			t.Fatalf("a line is not JSON: %v: %.200s", err, line)
		}
		if _, ok := v["_aws"]; ok {
			records++
		} else {
			logs++
		}
	}
	// Per flush, six queues of two records each: 150 distinct values take
	// two.
	if records != 2*5*6*2 || logs != 200 {
		t.Errorf("%d records and %d log lines, want %d and 200", records, logs, 2*5*6*2)
	}
}

// NaN and infinite values are dropped when recorded, and counted; the rest
// of the flush is written. Before, one NaN lost the whole flush.
func TestEMFDropsNonFiniteValues(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "test")
	q := metrics.Dims{Queue: "orders"}
	e.Observe(metrics.HandlerDuration, math.NaN(), q)
	e.Observe(metrics.HandlerDuration, math.Inf(1), q)
	e.Observe(metrics.HandlerDuration, 0.5, q)
	e.Set(metrics.QueueVisible, math.Inf(-1), q)
	e.Set(metrics.QueueDelayed, math.Ldexp(1, 361), q) // beyond CloudWatch's 2^360
	e.Add(metrics.MessagesReceived, 4, q)
	e.Add(metrics.MessagesReceived, 1, metrics.Dims{Queue: "other"})
	e.Add("queue", 1, q) // a metric named like a dimension
	if err := e.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if n := e.Dropped(); n != 5 {
		t.Errorf("Dropped = %d, want 5", n)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d records, want 2:\n%s", len(lines), buf.String())
	}
	r := checkSpec(t, lines[0])
	if r["queue"] != "orders" || r[metrics.MessagesReceived] != json.Number("4") || r[metrics.QueueVisible] != nil || r[metrics.QueueDelayed] != nil {
		t.Errorf("record: %s", lines[0])
	}
	if h, _ := r[metrics.HandlerDuration].(map[string]any); h == nil || h["Count"] != json.Number("1") || h["Sum"] != json.Number("0.5") {
		t.Errorf("histogram: %s", lines[0])
	}
}

// checkSpec checks one line against the CloudWatch embedded metric format
// specification, and returns the record:
//
//   - one JSON object, with _aws.Timestamp an integer of milliseconds and
//     _aws.CloudWatchMetrics an array of directives;
//   - each directive a Namespace of 1 to 255 characters, Dimensions an
//     array of dimension sets (arrays, never null) of at most 30 keys, each
//     key a member of the record with a string value of 1 to 1024 ASCII
//     characters, and at most 100 Metrics;
//   - each metric a Name, a member of the record, a valid unit, and a value
//     that is a number, an array of at most 100 numbers, or a histogram
//     {Values, Counts, Max, Min, Count, Sum} of at most 100 values, whose
//     Count is the sum of its Counts and whose values lie within Min and
//     Max (to their rounding).
func checkSpec(t *testing.T, line string) map[string]any {
	t.Helper()
	var rec map[string]any
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("not a JSON object: %v: %.300s", err, line)
	}
	aws, ok := rec["_aws"].(map[string]any)
	if !ok {
		t.Fatalf("no _aws object: %.300s", line)
	}
	if ts, ok := aws["Timestamp"].(json.Number); !ok {
		t.Errorf("_aws.Timestamp %v is not a number", aws["Timestamp"])
	} else if ms, err := ts.Int64(); err != nil || ms < 1e12 || ms > 1e13 {
		t.Errorf("_aws.Timestamp %v is not milliseconds since the epoch", ts)
	}
	dirs, ok := aws["CloudWatchMetrics"].([]any)
	if !ok || len(dirs) == 0 {
		t.Fatalf("_aws.CloudWatchMetrics: %v", aws["CloudWatchMetrics"])
	}
	units := "Seconds Microseconds Milliseconds Bytes Kilobytes Megabytes Gigabytes Terabytes Bits Kilobits Megabits Gigabits Terabits Percent Count None"
	for _, d := range dirs {
		dir := d.(map[string]any)
		if ns, _ := dir["Namespace"].(string); ns == "" || len(ns) > 255 {
			t.Errorf("Namespace %v", dir["Namespace"])
		}
		sets, ok := dir["Dimensions"].([]any)
		if !ok || len(sets) == 0 {
			t.Errorf("Dimensions %v: want an array of dimension sets", dir["Dimensions"])
		}
		for _, s := range sets {
			set, ok := s.([]any)
			if !ok {
				t.Errorf("a dimension set is %v, want an array: %.300s", s, line)
				continue
			}
			if len(set) > metrics.EMFMaxDimensions {
				t.Errorf("%d dimensions in a set, over 30", len(set))
			}
			for _, k := range set {
				v, ok := rec[k.(string)].(string)
				if !ok || v == "" || len(v) > metrics.EMFMaxDimensionValue || strings.IndexFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
					t.Errorf("dimension %v = %.80q: want 1 to 1024 printable ASCII characters", k, rec[k.(string)])
				}
			}
		}
		ms, _ := dir["Metrics"].([]any)
		if len(ms) == 0 || len(ms) > metrics.EMFMaxMetrics {
			t.Errorf("%d metrics in a directive, want 1 to 100", len(ms))
		}
		for _, m := range ms {
			def := m.(map[string]any)
			name, _ := def["Name"].(string)
			if u, _ := def["Unit"].(string); !slices.Contains(strings.Fields(units), u) {
				t.Errorf("metric %s: unit %q", name, u)
			}
			checkValue(t, name, rec[name])
		}
	}
	return rec
}

func checkValue(t *testing.T, name string, v any) {
	t.Helper()
	num := func(x any) (float64, bool) {
		n, ok := x.(json.Number)
		if !ok {
			return 0, false
		}
		f, err := n.Float64()
		return f, err == nil
	}
	switch v := v.(type) {
	case json.Number:
	case []any:
		if len(v) == 0 || len(v) > metrics.EMFMaxValues {
			t.Errorf("metric %s: %d values", name, len(v))
		}
	case map[string]any:
		if len(v) != 6 {
			t.Errorf("metric %s: histogram members %v, want Values, Counts, Max, Min, Count and Sum", name, v)
		}
		vals, _ := v["Values"].([]any)
		counts, _ := v["Counts"].([]any)
		if len(vals) == 0 || len(vals) > metrics.EMFMaxValues || len(counts) != len(vals) {
			t.Errorf("metric %s: %d values and %d counts", name, len(vals), len(counts))
		}
		lo, ok1 := num(v["Min"])
		hi, ok2 := num(v["Max"])
		count, ok3 := num(v["Count"])
		if _, ok := num(v["Sum"]); !ok || !ok1 || !ok2 || !ok3 {
			t.Errorf("metric %s: statistics %v", name, v)
		}
		total := 0.0
		for i := range vals {
			x, _ := num(vals[i])
			c, _ := num(counts[i])
			total += c
			if x < lo*(1-1.0/512) || x > hi {
				t.Errorf("metric %s: value %v outside [%v, %v]", name, x, lo, hi)
			}
		}
		if total != count {
			t.Errorf("metric %s: Count %v, the counts add up to %v", name, count, total)
		}
	default:
		t.Errorf("metric %s has the value %v (%T), want a number, an array or a histogram", name, v, v)
	}
}

// What EMF writes follows the specification (see checkSpec): histograms in
// the values-and-counts shape with their statistics, at most 100 metrics a
// record and 100 values a metric, "[[]]" without dimensions, dimension
// values of printable ASCII. Before, histograms lacked Max, Min, Count and
// Sum, 150 metrics shared one record, and no dimension gave "[null]".
func TestEMFFollowsSpecification(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "test")
	h := metrics.Dims{Queue: "orders", Handler: "billing"}
	var want struct {
		count   int
		sum     float64
		lo, hi  float64
		custom  int
		records int
	}
	want.lo, want.hi = math.Inf(1), math.Inf(-1)
	for i := range 250 { // 250 distinct values: three chunks
		v := 0.001 * float64(i+1) * 1.37
		for range i%3 + 1 {
			e.Observe(metrics.HandlerDuration, v, h)
			want.count++
			want.sum += v
			want.lo, want.hi = min(want.lo, v), max(want.hi, v)
		}
	}
	for i := range 150 { // more metrics than one record takes
		e.Add(fmt.Sprintf("custom_%03d", i), int64(i), h)
		want.custom += i
	}
	e.Add(metrics.MessagesReceived, 2, metrics.Dims{})                                     // no dimension at all
	e.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", ErrorClass: "bad\tclass ü"}) // cleaned
	before := time.Now().UnixMilli()
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	after := time.Now().UnixMilli()

	var gotCount int
	var gotSum float64
	gotLo, gotHi := math.Inf(1), math.Inf(-1)
	gotCustom, noDims, classed := 0, 0, 0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		rec := checkSpec(t, line)
		aws := rec["_aws"].(map[string]any)
		if ts, _ := aws["Timestamp"].(json.Number).Int64(); ts < before || ts > after {
			t.Errorf("Timestamp %d not the flush's time, in [%d, %d]", ts, before, after)
		}
		dir := aws["CloudWatchMetrics"].([]any)[0].(map[string]any)
		dims := dir["Dimensions"].([]any)
		if len(dims) != 1 {
			t.Errorf("%d dimension sets, want 1", len(dims))
		}
		if set := dims[0].([]any); len(set) == 0 {
			noDims++
			if !strings.Contains(line, `"Dimensions":[[]]`) {
				t.Errorf("a record without dimensions: %s", line)
			}
		}
		if hv, ok := rec[metrics.HandlerDuration].(map[string]any); ok {
			c, _ := hv["Count"].(json.Number).Int64()
			s, _ := hv["Sum"].(json.Number).Float64()
			lo, _ := hv["Min"].(json.Number).Float64()
			hi, _ := hv["Max"].(json.Number).Float64()
			gotCount += int(c)
			gotSum += s
			gotLo, gotHi = min(gotLo, lo), max(gotHi, hi)
		}
		for k, v := range rec {
			if strings.HasPrefix(k, "custom_") {
				n, _ := v.(json.Number).Int64()
				gotCustom += int(n)
			}
		}
		if rec["error_class"] == "bad_class__" {
			classed++
		}
	}
	if gotCount != want.count || math.Abs(gotSum-want.sum) > 1e-9 || gotLo != want.lo || gotHi != want.hi {
		t.Errorf("histogram statistics: count %d sum %v min %v max %v; want %d %v %v %v", gotCount, gotSum, gotLo, gotHi, want.count, want.sum, want.lo, want.hi)
	}
	if gotCustom != want.custom {
		t.Errorf("custom counters add up to %d, want %d", gotCustom, want.custom)
	}
	if noDims != 1 || classed != 1 {
		t.Errorf("%d records without dimensions and %d with the cleaned class, want 1 and 1:\n%s", noDims, classed, buf.String())
	}
}

// Dimension values are cleaned and cut, and a flush exports at most
// MaxErrorClasses error classes: the others are counted under "other", and
// the next flush starts afresh. Before, every distinct value went to
// CloudWatch as given, each a new custom metric.
func TestEMFBoundsDimensionValues(t *testing.T) {
	var buf bytes.Buffer
	e := metrics.NewEMF(&buf, "test")
	long := strings.Repeat("h", 2000)
	for i := range 30 {
		d := metrics.Dims{Queue: "q", Handler: long, ErrorClass: fmt.Sprintf("*pkg.Error%02d", i)}
		e.Add(metrics.MessagesFailed, 2, d)
		e.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: "q", ErrorClass: d.ErrorClass})
	}
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	classes := map[string]bool{}
	failed, dead := 0.0, 0.0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		rec := checkSpec(t, line)
		c, _ := rec["error_class"].(string)
		classes[c] = true
		if h, ok := rec["handler"].(string); ok && h != long[:metrics.MaxDimensionLength] {
			t.Errorf("handler of %d bytes, want it cut to %d", len(h), metrics.MaxDimensionLength)
		}
		if v, ok := rec[metrics.MessagesFailed].(json.Number); ok {
			f, _ := v.Float64()
			failed += f
		}
		if v, ok := rec[metrics.MessagesDeadLettered].(json.Number); ok {
			f, _ := v.Float64()
			dead += f
		}
	}
	if len(classes) != metrics.MaxErrorClasses+1 || !classes[metrics.OtherErrorClass] || !classes["*pkg.Error00"] || classes["*pkg.Error29"] {
		t.Errorf("error classes %v: want the first %d and %q", classes, metrics.MaxErrorClasses, metrics.OtherErrorClass)
	}
	if failed != 60 || dead != 30 {
		t.Errorf("failed %v, dead-lettered %v; want every count kept: 60 and 30", failed, dead)
	}

	buf.Reset()
	e.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: "q", ErrorClass: "*pkg.Error29"})
	if err := e.Flush(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"error_class":"*pkg.Error29"`) {
		t.Errorf("the next flush does not start afresh: %s", buf.String())
	}
	for in, want := range map[string]string{
		"plain":        "plain",
		"with space":   "with_space",
		"tab\tand\nnl": "tab_and_nl",
		"ünïcode":      "_n_code",
		"bad\xffbyte":  "bad_byte",
		"":             "",
		long:           long[:metrics.MaxDimensionLength],
	} {
		if got := metrics.CleanDimension(in); got != want {
			t.Errorf("CleanDimension(%.20q) = %.20q, want %.20q", in, got, want)
		}
	}
}

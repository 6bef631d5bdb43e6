package metrics

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Memory is a Recorder that keeps totals in memory: counters summed,
// histograms as count, sum and maximum, gauges' last values. It serves tests
// and end-of-run summaries.
type Memory struct {
	mu sync.Mutex
	m  map[Key]*Value
}

// Key names one series.
type Key struct {
	Name string
	Dims Dims
}

// Value is one series' total.
type Value struct {
	Count int64   // counters: the total; histograms: the number of values
	Sum   float64 // histograms: the sum; gauges: the last value
	Max   float64 // histograms: the largest value
}

// NewMemory returns an empty Memory.
func NewMemory() *Memory { return &Memory{m: map[Key]*Value{}} }

func (r *Memory) get(name string, d Dims) *Value {
	k := Key{name, d}
	v := r.m[k]
	if v == nil {
		v = &Value{}
		r.m[k] = v
	}
	return v
}

// Add implements Recorder.
func (r *Memory) Add(name string, n int64, d Dims) {
	r.mu.Lock()
	r.get(name, d).Count += n
	r.mu.Unlock()
}

// Observe implements Recorder.
func (r *Memory) Observe(name string, x float64, d Dims) {
	r.mu.Lock()
	v := r.get(name, d)
	v.Count++
	v.Sum += x
	v.Max = max(v.Max, x)
	r.mu.Unlock()
}

// Set implements Recorder.
func (r *Memory) Set(name string, x float64, d Dims) {
	r.mu.Lock()
	r.get(name, d).Sum = x
	r.mu.Unlock()
}

// Snapshot returns a copy of every series.
func (r *Memory) Snapshot() map[Key]Value {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[Key]Value, len(r.m))
	for k, v := range r.m {
		out[k] = *v
	}
	return out
}

// Total returns the sum of a counter's series whose dimensions match every
// non-empty field of d.
func (r *Memory) Total(name string, d Dims) int64 {
	var n int64
	for k, v := range r.Snapshot() {
		if k.Name == name && matches(k.Dims, d) {
			n += v.Count
		}
	}
	return n
}

func matches(have, want Dims) bool {
	return (want.Queue == "" || want.Queue == have.Queue) &&
		(want.Handler == "" || want.Handler == have.Handler) &&
		(want.ErrorClass == "" || want.ErrorClass == have.ErrorClass)
}

// WriteTable writes every series as an aligned table, sorted by name and
// dimensions: counters' totals, histograms' count, mean and maximum,
// gauges' values.
func (r *Memory) WriteTable(w io.Writer) error {
	snap := r.Snapshot()
	keys := make([]Key, 0, len(snap))
	for k := range snap {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "METRIC\tDIMENSIONS\tVALUE")
	for _, k := range keys {
		v := snap[k]
		var dims []string
		for _, kv := range [...][2]string{{"queue", k.Dims.Queue}, {"handler", k.Dims.Handler}, {"error_class", k.Dims.ErrorClass}} {
			if kv[1] != "" {
				dims = append(dims, kv[0]+"="+kv[1])
			}
		}
		var val string
		switch {
		case v.Count > 0 && (v.Sum != 0 || v.Max != 0): // histogram
			val = fmt.Sprintf("%d values, mean %s, max %s", v.Count, seconds(v.Sum/float64(v.Count)), seconds(v.Max))
		case v.Count > 0:
			val = fmt.Sprint(v.Count)
		default:
			val = fmt.Sprint(v.Sum)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Name, strings.Join(dims, ","), val)
	}
	return tw.Flush()
}

// seconds formats a number of seconds as a duration, rounded to what reads.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

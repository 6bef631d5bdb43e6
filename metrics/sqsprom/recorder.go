package sqsprom

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsworker/sqsworker/metrics"
)

// DefaultNamespace prefixes the names of the metrics unless
// Options.Namespace says otherwise.
const DefaultNamespace = "sqsworker"

// DefaultBuckets are the upper bounds, in seconds, of the histograms' buckets
// unless Options.Buckets says otherwise: from 5ms to 15 minutes, the range of
// job durations and of a message's time in the queue under backoff.
var DefaultBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900,
}

// Options configures a Recorder. The zero value is ready to use.
type Options struct {
	// Namespace is the prefix of every metric's name, followed by an
	// underscore. Default DefaultNamespace, "sqsworker".
	Namespace string

	// ConstLabels are added to every metric, such as the service or the
	// environment. They must not be named queue, handler, error_class or
	// le.
	ConstLabels prometheus.Labels

	// Buckets are the upper bounds of the histograms' buckets, in seconds,
	// in increasing order. Default DefaultBuckets.
	Buckets []float64
}

// Recorder is a metrics.Recorder that exports the measurements of the
// runtimes as Prometheus metrics:
//
//   - counters as counters named <namespace>_<name>_total,
//   - histograms as histograms named <namespace>_<name>_seconds,
//   - gauges as gauges named <namespace>_<name>,
//
// with the labels queue, handler and error_class that the metric has in the
// table of package metrics. A dimension a metric does not have is ignored;
// one it has but that is empty is exported as an empty label value. A name
// the vocabulary does not know gets a metric with all three labels on first
// use; if that metric's name is taken in the registry, its values are
// dropped.
//
// Label values are bounded as the package metrics documents: cleaned by
// metrics.CleanDimension (printable ASCII, at most 256 bytes), and at most
// metrics.MaxErrorClasses (20) distinct error classes per Recorder, for its
// whole life, since a series once exported stays in the registry; the
// classes that come after are counted under "other".
//
// Recorders that share a registry share its metrics, and combine their
// gauges instead of overwriting each other's:
//
//   - in_flight is the sum of the Recorders' values: the handlers running
//     in all the workers of a queue;
//   - breaker_state is the greatest: non-zero while any of the queue's
//     breakers is not closed;
//   - the depth gauges (queue_visible, queue_in_flight, queue_delayed,
//     dlq_visible), figures of the queue itself, and gauges the vocabulary
//     does not know, are the value last set by any of them.
//
// So give each runtime (each worker.Worker, each Lambda adapter) a Recorder
// of its own: two runtimes that share one Recorder set the same in_flight
// and breaker_state, the last one setting it winning. A Recorder's values
// stay in the metrics after its runtime has stopped: its in_flight is then
// 0, its breaker_state the breaker's last state.
//
// A Recorder is safe for concurrent use. Each call looks its series up in a
// map that is copied only when a new series appears, and takes no lock and
// allocates nothing once the series exists.
type Recorder struct {
	reg      prometheus.Registerer
	ns       string
	constLbl prometheus.Labels
	buckets  []float64
	classes  classCap

	counters   registry[prometheus.Counter]
	histograms registry[prometheus.Observer]
	gauges     registry[*gaugeCell]
}

var _ metrics.Recorder = (*Recorder)(nil)

// labelSet is the set of labels a metric has.
type labelSet uint8

const (
	lQueue labelSet = 1 << iota
	lHandler
	lErrorClass

	lAll = lQueue | lHandler | lErrorClass
)

// Label names of the metrics: the fields of metrics.Dims.
const (
	LabelQueue      = "queue"
	LabelHandler    = "handler"
	LabelErrorClass = "error_class"
)

func (l labelSet) names() []string {
	var n []string
	if l&lQueue != 0 {
		n = append(n, LabelQueue)
	}
	if l&lHandler != 0 {
		n = append(n, LabelHandler)
	}
	if l&lErrorClass != 0 {
		n = append(n, LabelErrorClass)
	}
	return n
}

// mask keeps the dimensions of d that are labels of the set.
func (l labelSet) mask(d metrics.Dims) metrics.Dims {
	if l&lQueue == 0 {
		d.Queue = ""
	}
	if l&lHandler == 0 {
		d.Handler = ""
	}
	if l&lErrorClass == 0 {
		d.ErrorClass = ""
	}
	return d
}

// values returns the label values of d, in the order of names.
func (l labelSet) values(d metrics.Dims) []string {
	v := make([]string, 0, 3)
	if l&lQueue != 0 {
		v = append(v, d.Queue)
	}
	if l&lHandler != 0 {
		v = append(v, d.Handler)
	}
	if l&lErrorClass != 0 {
		v = append(v, d.ErrorClass)
	}
	return v
}

type kind uint8

const (
	counter kind = iota
	histogram
	gauge
)

// vocabulary is the table of package metrics: each metric's kind, labels and
// help text.
var vocabulary = []struct {
	name   string
	kind   kind
	labels labelSet
	help   string
}{
	{metrics.MessagesReceived, counter, lQueue, "Messages received."},
	{metrics.MessagesSucceeded, counter, lQueue | lHandler, "Handlers that returned nil."},
	{metrics.MessagesFailed, counter, lAll, "Handlers that failed, panics included, by error class."},
	{metrics.MessagesRetried, counter, lQueue, "Failures given a backoff or RetryAfter delay."},
	{metrics.MessagesPostponed, counter, lQueue, "Messages put off by RetryAfter with a nil error (not failures)."},
	{metrics.RequeueFailures, counter, lQueue, "Waiting copies (holds, backoffs past 12 hours) that could not be sent; the message waits on itself instead, a receive at a time."},
	{metrics.MessagesDeadLettered, counter, lQueue | lErrorClass, "Messages moved to the dead-letter queue, by error class."},
	{metrics.VisibilityExtensions, counter, lQueue, "Visibility timeout extensions made by the heartbeat."},
	{metrics.LeasesLost, counter, lQueue, "Messages whose visibility lease was lost."},
	{metrics.IdempotentDuplicates, counter, lQueue, "Duplicates acknowledged without running the handler."},
	{metrics.HandlerDuration, histogram, lQueue | lHandler, "Time in the handler, in seconds."},
	{metrics.EnqueueToDoneLatency, histogram, lQueue, "Time from a message's SentTimestamp to the end of its handler, in seconds."},
	{metrics.ReceiveToDoneLatency, histogram, lQueue, "Time from a message's receive to the end of its handler, in seconds."},
	{metrics.InFlight, gauge, lQueue, "Handlers running, in all the workers recording into this registry."},
	{metrics.QueueVisible, gauge, lQueue, "The queue's ApproximateNumberOfMessages."},
	{metrics.QueueInFlight, gauge, lQueue, "The queue's ApproximateNumberOfMessagesNotVisible."},
	{metrics.QueueDelayed, gauge, lQueue, "The queue's ApproximateNumberOfMessagesDelayed."},
	{metrics.DeadLetterQueueVisible, gauge, lQueue, "The dead-letter queue's ApproximateNumberOfMessages; queue is the source queue."},
	{metrics.BreakerState, gauge, lQueue, "The circuit breaker: 0 closed, 1 open, 2 half-open; the greatest of the workers recording into this registry."},
	{metrics.BreakerOpens, counter, lQueue, "Times the circuit breaker opened."},
	{metrics.BreakerProbes, counter, lQueue, "Messages let through an open circuit breaker as probes."},
}

// combined says how the Recorders sharing a registry combine a gauge of the
// vocabulary: the others are the value last set.
var combined = map[string]combine{
	metrics.InFlight:     combineSum,
	metrics.BreakerState: combineMax,
}

// New returns a Recorder whose metrics are registered with reg; nil means
// prometheus.DefaultRegisterer. The metrics of the vocabulary are registered
// at once. Several Recorders with the same Options may share a registry, one
// per worker for instance: they then share the metrics.
//
// New panics, as prometheus.MustRegister does, when the options are invalid
// or a metric cannot be registered, its name being taken by a different
// metric.
func New(reg prometheus.Registerer, opts Options) *Recorder {
	if reg == nil {
		reg = prometheus.DefaultRegisterer
	}
	r := &Recorder{
		reg:      reg,
		ns:       opts.Namespace,
		constLbl: maps.Clone(opts.ConstLabels),
		buckets:  slices.Clone(opts.Buckets),
	}
	if r.ns == "" {
		r.ns = DefaultNamespace
	}
	if len(r.buckets) == 0 {
		r.buckets = slices.Clone(DefaultBuckets)
	}
	for i := 1; i < len(r.buckets); i++ {
		if !(r.buckets[i] > r.buckets[i-1]) {
			panic(fmt.Sprintf("sqsprom: Options.Buckets not in increasing order: %v", r.buckets))
		}
	}
	for _, name := range []string{LabelQueue, LabelHandler, LabelErrorClass, "le"} {
		if _, ok := r.constLbl[name]; ok {
			panic("sqsprom: Options.ConstLabels must not have the label " + name)
		}
	}
	r.classes.init()
	counters := map[string]*family[prometheus.Counter]{}
	histograms := map[string]*family[prometheus.Observer]{}
	gauges := map[string]*family[*gaugeCell]{}
	for _, m := range vocabulary {
		var err error
		switch m.kind {
		case counter:
			counters[m.name], err = r.newCounter(m.name, m.labels, m.help)
		case histogram:
			histograms[m.name], err = r.newHistogram(m.name, m.labels, m.help)
		case gauge:
			gauges[m.name], err = r.newGauge(m.name, m.labels, m.help, combined[m.name])
		}
		if err != nil {
			panic("sqsprom: " + err.Error())
		}
	}
	r.counters.init(counters, r.newCounter)
	r.histograms.init(histograms, r.newHistogram)
	r.gauges.init(gauges, func(name string, l labelSet, help string) (*family[*gaugeCell], error) {
		return r.newGauge(name, l, help, combineLast)
	})
	return r
}

// Add implements metrics.Recorder: it adds n to the counter
// <namespace>_<name>_total. Counters only go up: a negative n is ignored.
func (r *Recorder) Add(name string, n int64, d metrics.Dims) {
	if n < 0 {
		return
	}
	if c, ok := r.counters.child(name, d); ok {
		c.Add(float64(n))
	}
}

// Observe implements metrics.Recorder: it records v, in seconds, in the
// histogram <namespace>_<name>_seconds.
func (r *Recorder) Observe(name string, v float64, d metrics.Dims) {
	if o, ok := r.histograms.child(name, d); ok {
		o.Observe(v)
	}
}

// Set implements metrics.Recorder: it sets this Recorder's value of the
// gauge <namespace>_<name>, which the Recorders sharing the registry
// combine (see Recorder).
func (r *Recorder) Set(name string, v float64, d metrics.Dims) {
	if g, ok := r.gauges.child(name, d); ok {
		g.set(v)
	}
}

func (r *Recorder) newCounter(name string, l labelSet, help string) (*family[prometheus.Counter], error) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: r.ns, Name: name + "_total", Help: help, ConstLabels: r.constLbl,
	}, l.names())
	v, err := register(r.reg, v)
	return newFamily(l, &r.classes, v.GetMetricWithLabelValues), err
}

func (r *Recorder) newHistogram(name string, l labelSet, help string) (*family[prometheus.Observer], error) {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: r.ns, Name: name + "_seconds", Help: help, ConstLabels: r.constLbl, Buckets: r.buckets,
	}, l.names())
	v, err := register(r.reg, v)
	return newFamily(l, &r.classes, v.GetMetricWithLabelValues), err
}

func (r *Recorder) newGauge(name string, l labelSet, help string, c combine) (*family[*gaugeCell], error) {
	v := &gaugeVec{
		desc:    prometheus.NewDesc(prometheus.BuildFQName(r.ns, "", name), help, l.names(), r.constLbl),
		labels:  len(l.names()),
		combine: c,
		series:  map[string]*gaugeSeries{},
	}
	v, err := register(r.reg, v)
	return newFamily(l, &r.classes, v.cell), err
}

// register registers c, or returns the collector of the same kind already
// registered under its name and labels.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// registry maps metric names to the families of one kind. It is copied on
// write: reads take no lock.
type registry[M any] struct {
	m      atomic.Pointer[map[string]*family[M]]
	mu     sync.Mutex // held to add a family
	create func(name string, l labelSet, help string) (*family[M], error)
}

func (g *registry[M]) init(m map[string]*family[M], create func(string, labelSet, string) (*family[M], error)) {
	g.m.Store(&m)
	g.create = create
}

// child returns the series of name with the dimensions d, creating what is
// missing. It reports false when the series cannot be made.
func (g *registry[M]) child(name string, d metrics.Dims) (M, bool) {
	f := (*g.m.Load())[name]
	if f == nil {
		f = g.add(name)
	}
	return f.child(d)
}

// add creates the family of a name the vocabulary does not know, with all
// three labels. When it cannot be registered (its name is taken) it is still
// made, so that it is not tried again, and its values are not exported.
func (g *registry[M]) add(name string) *family[M] {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := *g.m.Load()
	if f := old[name]; f != nil {
		return f
	}
	f, _ := g.create(name, lAll, "sqsworker metric "+name+".")
	m := maps.Clone(old)
	m[name] = f
	g.m.Store(&m)
	return f
}

// family is one metric vector: its series by dimensions, copied on write.
// Its map is keyed by dimensions as exported (masked, cleaned, error class
// capped), so that it stays as bounded as the series.
type family[M any] struct {
	labels   labelSet
	classes  *classCap
	get      func(lvs ...string) (M, error)
	children atomic.Pointer[map[metrics.Dims]M]
	mu       sync.Mutex // held to add a series
}

func newFamily[M any](l labelSet, classes *classCap, get func(...string) (M, error)) *family[M] {
	f := &family[M]{labels: l, classes: classes, get: get}
	f.children.Store(&map[metrics.Dims]M{})
	return f
}

func (f *family[M]) child(d metrics.Dims) (M, bool) {
	d = f.labels.mask(d)
	if c, ok := (*f.children.Load())[d]; ok { // d is as exported
		return c, true
	}
	d = f.export(d)
	if c, ok := (*f.children.Load())[d]; ok {
		return c, true
	}
	return f.add(d)
}

// export returns the dimensions d is exported under: cleaned, with its
// error class capped.
func (f *family[M]) export(d metrics.Dims) metrics.Dims {
	d.Queue = metrics.CleanDimension(d.Queue)
	d.Handler = metrics.CleanDimension(d.Handler)
	if d.ErrorClass != "" {
		d.ErrorClass = f.classes.admit(metrics.CleanDimension(d.ErrorClass))
	}
	return d
}

func (f *family[M]) add(d metrics.Dims) (M, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := *f.children.Load()
	if c, ok := old[d]; ok {
		return c, true
	}
	c, err := f.get(f.labels.values(d)...)
	if err != nil {
		return c, false
	}
	m := make(map[metrics.Dims]M, len(old)+1)
	maps.Copy(m, old)
	m[d] = c
	f.children.Store(&m)
	return c, true
}

// classCap admits up to metrics.MaxErrorClasses distinct error classes, for
// the life of a Recorder; the set is copied on write.
type classCap struct {
	set atomic.Pointer[map[string]bool]
	mu  sync.Mutex // held to admit a class
}

func (c *classCap) init() { c.set.Store(&map[string]bool{}) }

// admit returns class if it is admitted, or can be, and
// metrics.OtherErrorClass once MaxErrorClasses others are.
func (c *classCap) admit(class string) string {
	if (*c.set.Load())[class] {
		return class
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.set.Load()
	switch {
	case old[class]:
		return class
	case len(old) >= metrics.MaxErrorClasses:
		return metrics.OtherErrorClass
	}
	m := maps.Clone(old)
	m[class] = true
	c.set.Store(&m)
	return class
}

// combine is how a gauge combines the values of the Recorders that share
// it.
type combine uint8

const (
	combineLast combine = iota // the value last set, by any Recorder
	combineSum                 // the sum of the Recorders' values
	combineMax                 // the greatest of the Recorders' values
)

// gaugeVec is a gauge metric that the Recorders sharing a registry set
// together: each series has a cell per Recorder (one for all with
// combineLast), combined when the registry is gathered.
type gaugeVec struct {
	desc    *prometheus.Desc
	labels  int // the number of variable labels
	combine combine

	mu     sync.Mutex
	series map[string]*gaugeSeries // by label values, joined with 0xff
}

type gaugeSeries struct {
	lvs   []string
	cells []*gaugeCell
}

// gaugeCell is one Recorder's value of one series.
type gaugeCell struct{ bits atomic.Uint64 }

func (c *gaugeCell) set(v float64) { c.bits.Store(math.Float64bits(v)) }
func (c *gaugeCell) get() float64  { return math.Float64frombits(c.bits.Load()) }

// cell returns a new cell of the series with the label values lvs, for
// the Recorder that asks (each asks once per series), or with combineLast
// the series' one cell.
func (g *gaugeVec) cell(lvs ...string) (*gaugeCell, error) {
	if len(lvs) != g.labels {
		return nil, fmt.Errorf("sqsprom: %d label values for %d labels", len(lvs), g.labels)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	key := strings.Join(lvs, "\xff")
	s := g.series[key]
	if s == nil {
		s = &gaugeSeries{lvs: slices.Clone(lvs)}
		g.series[key] = s
	}
	if g.combine == combineLast && len(s.cells) > 0 {
		return s.cells[0], nil
	}
	c := &gaugeCell{}
	s.cells = append(s.cells, c)
	return c, nil
}

// Describe implements prometheus.Collector.
func (g *gaugeVec) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *gaugeVec) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.series {
		v := s.cells[0].get()
		for _, c := range s.cells[1:] {
			switch g.combine {
			case combineSum:
				v += c.get()
			case combineMax:
				v = max(v, c.get())
			}
		}
		m, err := prometheus.NewConstMetric(g.desc, prometheus.GaugeValue, v, s.lvs...)
		if err != nil {
			m = prometheus.NewInvalidMetric(g.desc, err)
		}
		ch <- m
	}
}

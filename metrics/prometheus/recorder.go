package sqsprom

import (
	"errors"
	"fmt"
	"maps"
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
// A Recorder is safe for concurrent use. Each call looks its series up in a
// map that is copied only when a new series appears, and takes no lock and
// allocates nothing once the series exists.
type Recorder struct {
	reg      prometheus.Registerer
	ns       string
	constLbl prometheus.Labels
	buckets  []float64

	counters   registry[prometheus.Counter]
	histograms registry[prometheus.Observer]
	gauges     registry[prometheus.Gauge]
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
	{metrics.MessagesDeadLettered, counter, lQueue | lErrorClass, "Messages moved to the dead-letter queue, by error class."},
	{metrics.VisibilityExtensions, counter, lQueue, "Visibility timeout extensions made by the heartbeat."},
	{metrics.LeasesLost, counter, lQueue, "Messages whose visibility lease was lost."},
	{metrics.IdempotentDuplicates, counter, lQueue, "Duplicates acknowledged without running the handler."},
	{metrics.HandlerDuration, histogram, lQueue | lHandler, "Time in the handler, in seconds."},
	{metrics.EnqueueToDoneLatency, histogram, lQueue, "Time from a message's SentTimestamp to the end of its handler, in seconds."},
	{metrics.ReceiveToDoneLatency, histogram, lQueue, "Time from a message's receive to the end of its handler, in seconds."},
	{metrics.InFlight, gauge, lQueue, "Handlers running."},
	{metrics.QueueVisible, gauge, lQueue, "The queue's ApproximateNumberOfMessages."},
	{metrics.QueueInFlight, gauge, lQueue, "The queue's ApproximateNumberOfMessagesNotVisible."},
	{metrics.QueueDelayed, gauge, lQueue, "The queue's ApproximateNumberOfMessagesDelayed."},
	{metrics.DeadLetterQueueVisible, gauge, lQueue, "The dead-letter queue's ApproximateNumberOfMessages; queue is the source queue."},
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
	counters := map[string]*family[prometheus.Counter]{}
	histograms := map[string]*family[prometheus.Observer]{}
	gauges := map[string]*family[prometheus.Gauge]{}
	for _, m := range vocabulary {
		var err error
		switch m.kind {
		case counter:
			counters[m.name], err = r.newCounter(m.name, m.labels, m.help)
		case histogram:
			histograms[m.name], err = r.newHistogram(m.name, m.labels, m.help)
		case gauge:
			gauges[m.name], err = r.newGauge(m.name, m.labels, m.help)
		}
		if err != nil {
			panic("sqsprom: " + err.Error())
		}
	}
	r.counters.init(counters, r.newCounter)
	r.histograms.init(histograms, r.newHistogram)
	r.gauges.init(gauges, r.newGauge)
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

// Set implements metrics.Recorder: it sets the gauge <namespace>_<name>.
func (r *Recorder) Set(name string, v float64, d metrics.Dims) {
	if g, ok := r.gauges.child(name, d); ok {
		g.Set(v)
	}
}

func (r *Recorder) newCounter(name string, l labelSet, help string) (*family[prometheus.Counter], error) {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: r.ns, Name: name + "_total", Help: help, ConstLabels: r.constLbl,
	}, l.names())
	v, err := register(r.reg, v)
	return newFamily(l, v.GetMetricWithLabelValues), err
}

func (r *Recorder) newHistogram(name string, l labelSet, help string) (*family[prometheus.Observer], error) {
	v := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: r.ns, Name: name + "_seconds", Help: help, ConstLabels: r.constLbl, Buckets: r.buckets,
	}, l.names())
	v, err := register(r.reg, v)
	return newFamily(l, v.GetMetricWithLabelValues), err
}

func (r *Recorder) newGauge(name string, l labelSet, help string) (*family[prometheus.Gauge], error) {
	v := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: r.ns, Name: name, Help: help, ConstLabels: r.constLbl,
	}, l.names())
	v, err := register(r.reg, v)
	return newFamily(l, v.GetMetricWithLabelValues), err
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
type family[M any] struct {
	labels   labelSet
	get      func(lvs ...string) (M, error)
	children atomic.Pointer[map[metrics.Dims]M]
	mu       sync.Mutex // held to add a series
}

func newFamily[M any](l labelSet, get func(...string) (M, error)) *family[M] {
	f := &family[M]{labels: l, get: get}
	f.children.Store(&map[metrics.Dims]M{})
	return f
}

func (f *family[M]) child(d metrics.Dims) (M, bool) {
	d = f.labels.mask(d)
	if c, ok := (*f.children.Load())[d]; ok {
		return c, true
	}
	return f.add(d)
}

func (f *family[M]) add(d metrics.Dims) (M, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	old := *f.children.Load()
	if c, ok := old[d]; ok {
		return c, true
	}
	c, err := f.get(f.labels.values(d)...)
	if err != nil { // label values must be valid UTF-8
		c, err = f.get(f.labels.values(validUTF8(d))...)
		if err != nil {
			return c, false
		}
	}
	m := make(map[metrics.Dims]M, len(old)+1)
	maps.Copy(m, old)
	m[d] = c
	f.children.Store(&m)
	return c, true
}

func validUTF8(d metrics.Dims) metrics.Dims {
	d.Queue = strings.ToValidUTF8(d.Queue, "\uFFFD")
	d.Handler = strings.ToValidUTF8(d.Handler, "\uFFFD")
	d.ErrorClass = strings.ToValidUTF8(d.ErrorClass, "\uFFFD")
	return d
}

// Package metrics is the one vocabulary of figures the runtimes emit — queue
// depth, failures by error class, dead-letter volume, latency — and the small
// interface sinks implement. It imports only the standard library: the EMF
// sink is here; Prometheus and OpenTelemetry sinks live in modules of their
// own.
//
// | name                      | kind      | unit    | dimensions                  | meaning |
// |---------------------------|-----------|---------|-----------------------------|---------|
// | messages_received         | counter   | count   | queue                       | messages received |
// | messages_succeeded        | counter   | count   | queue, handler              | handlers that returned nil |
// | messages_failed           | counter   | count   | queue, handler, error_class | handlers that failed (panics included) |
// | messages_retried          | counter   | count   | queue                       | failures given a backoff or RetryAfter delay |
// | messages_postponed        | counter   | count   | queue                       | RetryAfter with a nil error: not failures |
// | requeue_failures          | counter   | count   | queue                       | waiting copies (holds, backoffs past 12 h) not sent: the message waits on itself, a receive at a time |
// | messages_dead_lettered    | counter   | count   | queue, error_class          | messages moved to the dead-letter queue |
// | visibility_extensions     | counter   | count   | queue                       | heartbeat extensions |
// | leases_lost               | counter   | count   | queue                       | messages whose visibility lease was lost |
// | idempotent_duplicates     | counter   | count   | queue                       | duplicates acknowledged without running the handler |
// | handler_duration          | histogram | seconds | queue, handler              | time in the handler |
// | enqueue_to_done_latency   | histogram | seconds | queue                       | from SentTimestamp to the handler's end |
// | receive_to_done_latency   | histogram | seconds | queue                       | from the receive to the handler's end |
// | in_flight                 | gauge     | count   | queue                       | handlers running |
// | queue_visible             | gauge     | count   | queue                       | ApproximateNumberOfMessages (worker only) |
// | queue_in_flight           | gauge     | count   | queue                       | ApproximateNumberOfMessagesNotVisible |
// | queue_delayed             | gauge     | count   | queue                       | ApproximateNumberOfMessagesDelayed |
// | dlq_visible               | gauge     | count   | queue (the source queue)    | the dead-letter queue's ApproximateNumberOfMessages |
// | breaker_state             | gauge     | count   | queue                       | the circuit breaker: 0 closed, 1 open, 2 half-open |
// | breaker_opens             | counter   | count   | queue                       | times the circuit breaker opened |
// | breaker_probes            | counter   | count   | queue                       | messages let through an open breaker as probes |
//
// The age of the oldest message is not part of the SQS API (it is the
// CloudWatch metric ApproximateAgeOfOldestMessage, which the infra alarms
// use), so the worker cannot poll it.
//
// Dimensions stay low-cardinality: the queue's name, the error class
// (sqsworker.ErrorClass) and the handler's name; never message IDs. The
// sinks that export them (EMF here, the Prometheus module) also bound what
// they are given, since every distinct value is a new series — on
// CloudWatch a new custom metric, paid by the month:
//
//   - each value is cleaned by [CleanDimension]: characters outside
//     printable ASCII become '_', and it is cut to [MaxDimensionLength]
//     bytes;
//   - at most [MaxErrorClasses] (20) distinct error classes are exported,
//     per flush for EMF and per Recorder for Prometheus; the classes that
//     come after are counted under [OtherErrorClass], "other".
//
// The Memory sink keeps dimensions as given.
package metrics

// Names of the metrics.
const (
	MessagesReceived       = "messages_received"
	MessagesSucceeded      = "messages_succeeded"
	MessagesFailed         = "messages_failed"
	MessagesRetried        = "messages_retried"
	MessagesPostponed      = "messages_postponed"
	RequeueFailures        = "requeue_failures"
	MessagesDeadLettered   = "messages_dead_lettered"
	VisibilityExtensions   = "visibility_extensions"
	LeasesLost             = "leases_lost"
	IdempotentDuplicates   = "idempotent_duplicates"
	HandlerDuration        = "handler_duration"
	EnqueueToDoneLatency   = "enqueue_to_done_latency"
	ReceiveToDoneLatency   = "receive_to_done_latency"
	InFlight               = "in_flight"
	QueueVisible           = "queue_visible"
	QueueInFlight          = "queue_in_flight"
	QueueDelayed           = "queue_delayed"
	DeadLetterQueueVisible = "dlq_visible"
	BreakerState           = "breaker_state"
	BreakerOpens           = "breaker_opens"
	BreakerProbes          = "breaker_probes"
)

// Limits the sinks put on dimension values; see the package documentation.
const (
	// MaxDimensionLength is the longest dimension value the sinks export,
	// in bytes: longer ones are cut. CloudWatch takes up to 1024; a name
	// longer than this one is not a name.
	MaxDimensionLength = 256
	// MaxErrorClasses is the number of distinct error classes the sinks
	// export: per flush for EMF, for the life of a Recorder for
	// Prometheus. The classes that come after are counted under
	// OtherErrorClass.
	MaxErrorClasses = 20
	// OtherErrorClass is the error class the classes over MaxErrorClasses
	// are counted under.
	OtherErrorClass = "other"
)

// CleanDimension returns a dimension value as the sinks export it: each
// character outside printable ASCII ('!' to '~'; spaces included) replaced
// with '_', and cut to MaxDimensionLength bytes. An empty value stays empty;
// any other stays non-empty. It allocates only when it changes v.
func CleanDimension(v string) string {
	clean := len(v) <= MaxDimensionLength
	for i := 0; clean && i < len(v); i++ {
		clean = v[i] >= '!' && v[i] <= '~'
	}
	if clean {
		return v
	}
	b := make([]byte, 0, min(len(v), MaxDimensionLength))
	for _, r := range v {
		if len(b) == MaxDimensionLength {
			break
		}
		if r >= '!' && r <= '~' {
			b = append(b, byte(r))
		} else {
			b = append(b, '_')
		}
	}
	return string(b)
}

// Dims are the dimensions of one measurement. Empty fields are left out.
type Dims struct {
	Queue      string // the queue's name
	Handler    string // the handler's name
	ErrorClass string
}

// Recorder receives measurements. Implementations must be safe for
// concurrent use and cheap: the runtimes call them on every message.
type Recorder interface {
	// Add adds n to a counter.
	Add(name string, n int64, d Dims)
	// Observe records one value of a histogram; durations in seconds.
	Observe(name string, v float64, d Dims)
	// Set sets a gauge.
	Set(name string, v float64, d Dims)
}

// Multi sends every measurement to each recorder.
func Multi(rs ...Recorder) Recorder { return multi(rs) }

type multi []Recorder

func (m multi) Add(name string, n int64, d Dims) {
	for _, r := range m {
		r.Add(name, n, d)
	}
}

func (m multi) Observe(name string, v float64, d Dims) {
	for _, r := range m {
		r.Observe(name, v, d)
	}
}

func (m multi) Set(name string, v float64, d Dims) {
	for _, r := range m {
		r.Set(name, v, d)
	}
}

// Nop records nothing. The runtimes use it when no Recorder is configured.
type Nop struct{}

func (Nop) Add(string, int64, Dims)       {}
func (Nop) Observe(string, float64, Dims) {}
func (Nop) Set(string, float64, Dims)     {}

// QueueName returns the name of a queue from its URL: its last path element.
func QueueName(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}

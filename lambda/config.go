package lambda

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// Config configures the adapter. The zero value of each field means its
// documented default.
type Config struct {
	// Client is the SQS client used for visibility changes, dead-letter
	// moves and reading the queue's attributes. Default: a client from the
	// SDK's default configuration (environment, AWS_ENDPOINT_URL_SQS, the
	// function's role). An *sqs.Client is called through an HTTP client
	// that sends each request's body from a copy of its own, so that a
	// reply cut by the transport never makes the SDK send a dead-letter
	// move or a delayed copy twice (see the worker package's doc).
	Client API

	// Concurrency is the most records of one invocation handled at once.
	// On FIFO queues it bounds the message groups handled at once. Default
	// 10.
	Concurrency int

	// Backoff spaces the retries of failed records, by receive count.
	// Default sqsworker.ExponentialBackoff{} (full jitter, 1s base, 15m cap).
	Backoff sqsworker.Backoff

	// SafetyMargin is the time kept free at the end of an invocation: no
	// record starts later than SafetyMargin before the deadline,
	// handlers' contexts end SafetyMargin/2 before it, and the function
	// stops waiting for handlers that ignore their context SafetyMargin/4
	// before it, leaving time to report. A margin not shorter than the
	// function's timeout leaves no time to start any record: each
	// invocation logs that error. At least MinSafetyMargin (200ms).
	// Default a tenth of the time left when the invocation starts,
	// between 200ms and 5s.
	SafetyMargin time.Duration

	// DeadLetterQueueURL is where permanent failures and last attempts go.
	// Default: the target of the queue's redrive policy.
	DeadLetterQueueURL string

	// MaxReceiveCount is the attempt after whose failure a record is moved
	// to the dead-letter queue. Default: the redrive policy's
	// maxReceiveCount.
	MaxReceiveCount int

	// Heartbeat configures the visibility heartbeat that keeps records
	// invisible while they wait and run, for records that outlive the
	// queue's visibility timeout. QueueURL and VisibilityTimeout are set by
	// the adapter; the rest default as in visibility.Config, but for
	// MaxInFlight, which defaults to DefaultHeartbeatCalls: an invocation
	// tracks its records from its start, up to 10,000 of them. The event
	// does not say when the event source mapping received the records:
	// the heartbeat counts from the start of the invocation, less
	// BatchingWindow, or from when SQS first handed a record out, if
	// earlier, on its first receive (a batch Lambda retried while it
	// throttled the function); it makes a round at the invocation's start,
	// so that the records due already are extended before they run.
	Heartbeat visibility.Config

	// DisableHeartbeat turns the heartbeat off. A record whose handler
	// then returns after the queue's visibility timeout, counted as the
	// heartbeat counts it (from the invocation's start, less
	// BatchingWindow), no longer holds its message (SQS may have handed
	// it out again): a failure is left to SQS, reported failed with its
	// visibility left alone, neither dead-lettered nor copied; a success
	// is deleted at once.
	DisableHeartbeat bool

	// Breaker configures the circuit breaker, on by default, kept per
	// queue for the life of the execution environment (see
	// sqsworker.BreakerConfig). Lambda's event source mapping cannot be
	// stopped from inside the function: while the breaker is open, the
	// records of an invocation are not run but postponed, reported failed
	// with a visibility timeout that reaches to the next probe, so that
	// each costs one receive per probe interval instead of one per
	// backoff; one record at a time runs as the probe (a probe whose
	// handler ignores its context, still running when the invocation
	// gives up on it, gives its turn back to the next record). A record
	// on the last receive the queue's redrive policy allows is postponed
	// in a fresh copy instead (standard queues), so that SQS does not
	// move it to the dead-letter queue on its next receive.
	Breaker sqsworker.BreakerConfig

	// BatchingWindow is the event source mapping's maximum batching
	// window, which records may have waited before the invocation. Default
	// the SQSWORKER_BATCHING_WINDOW environment variable (a duration, which
	// the infra constructs set from the mapping), else 0.
	BatchingWindow time.Duration

	// QueueURL turns a record's eventSourceARN into its queue's URL. For
	// an ARN it cannot map (an error, or an empty URL), the function asks
	// SQS for the URL of the queue the ARN names (GetQueueUrl, by name and
	// owner account, only in the function's region) and logs a warning.
	// The URL found is kept for the execution environment. SQS's answer
	// that it cannot find the queue (it does not exist, access is denied)
	// is kept for a minute: the invocations of that minute do not ask
	// again, and a queue created, or an access granted, later is found
	// after it. Other failures of the lookup (throttling, server errors,
	// the network, the lookup's time running out) are not kept: the next
	// invocation asks again. At most 100 ARNs' answers are kept. A record
	// whose queue neither Config.QueueURL nor the lookup finds, or whose
	// URL names a queue with another ARN (read with the queue's
	// attributes), still runs, but its queue is unknown: a
	// failure is reported failed with its visibility left alone, never
	// retried with backoff nor dead-lettered by the function (not even to
	// DeadLetterQueueURL: the queue's own redrive policy applies), a
	// record held back for later comes back after the visibility timeout,
	// counted by that policy, and an error naming the ARN is logged.
	// Default QueueURLFromARN.
	QueueURL func(eventSourceARN string) (string, error)

	// Logger receives the adapter's logs, with the Lambda request ID.
	// Message bodies are never logged. Default slog.Default().
	Logger *slog.Logger

	// Metrics receives the adapter's figures (see package metrics), such
	// as a metrics.EMF writing to stdout, which Lambda's log stream turns
	// into CloudWatch metrics with no API call. It is flushed after every
	// invocation when it has a Flush() error method. Queue depth is not
	// polled in Lambda: use SQS's own CloudWatch metrics. Default none.
	Metrics metrics.Recorder

	// QueueRefresh is how long the queue's attributes (visibility timeout,
	// redrive policy) are trusted before they are read again, so that a
	// changed queue is seen without a cold start. A read that fails keeps
	// the attributes read before. Default 5m.
	QueueRefresh time.Duration

	// HandlerName is the handler dimension of the metrics. Default the
	// AWS_LAMBDA_FUNCTION_NAME environment variable, else "handler".
	HandlerName string

	// Host names this function in dead-letter metadata. Default the
	// AWS_LAMBDA_FUNCTION_NAME environment variable, else the host name.
	Host string
}

// BatchingWindowEnv names the environment variable Config.BatchingWindow
// defaults to.
const BatchingWindowEnv = "SQSWORKER_BATCHING_WINDOW"

// Defaults of the Config fields.
const (
	DefaultConcurrency = 10
	// DefaultHeartbeatCalls is the default Heartbeat.MaxInFlight: a
	// round of 10,000 records (1,000 calls) ends within a few seconds.
	DefaultHeartbeatCalls = 25
	// MinSafetyMargin is the shortest Config.SafetyMargin: the time to
	// report failed records after the handlers' deadline.
	MinSafetyMargin     = 200 * time.Millisecond
	DefaultQueueRefresh = 5 * time.Minute
)

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Concurrency < 0 {
		bad("Concurrency %d is negative", c.Concurrency)
	}
	if c.SafetyMargin < 0 {
		bad("SafetyMargin %s is negative", c.SafetyMargin)
	} else if c.SafetyMargin > 0 && c.SafetyMargin < MinSafetyMargin {
		bad("SafetyMargin %s is under %s: the failed records' visibility changes, sent after the handlers' deadline (SafetyMargin/2 before the invocation's), would not land before it; set at least %s, or 0 for a tenth of the time left", c.SafetyMargin, MinSafetyMargin, MinSafetyMargin)
	}
	if c.QueueRefresh < 0 {
		bad("QueueRefresh %s is negative", c.QueueRefresh)
	}
	if err := c.Breaker.Validate(); err != nil {
		errs = append(errs, err)
	}
	if !c.DisableHeartbeat {
		// What holds whatever the queue fails here, at the cold start; a
		// setting that does not fit the queue's visibility timeout runs
		// without the heartbeat, logged (see the adapter's newState).
		if err := c.Heartbeat.CheckFields(); err != nil {
			errs = append(errs, fmt.Errorf("config field Heartbeat (set DisableHeartbeat to run without): %w", err))
		}
	}
	if c.MaxReceiveCount < 0 {
		bad("MaxReceiveCount %d is negative", c.MaxReceiveCount)
	}
	if c.BatchingWindow < 0 || c.BatchingWindow > 5*time.Minute {
		bad("BatchingWindow %s is outside 0..5m", c.BatchingWindow)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("lambda: invalid Config: %w", errors.Join(errs...))
}

package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// Limits SQS sets on ReceiveMessage.
const (
	MaxMessagesPerReceive = 10
	MaxWaitTime           = 20 * time.Second
)

// Config configures a Worker. The zero value of each field means its
// documented default; only QueueURL is required.
type Config struct {
	// QueueURL is the URL of the queue to consume. Required.
	QueueURL string

	// Concurrency is the most handlers running at once, and so the most
	// messages this worker holds: it never receives more messages than it
	// has free handler slots. Default 10.
	Concurrency int

	// Pollers is the number of receive loops. Default enough to fill every
	// handler slot with full receives: ceil(Concurrency / MaxMessages).
	Pollers int

	// MaxMessages is the most messages asked for in one receive, 1 to 10.
	// Default 10.
	MaxMessages int

	// WaitTime is the long-poll wait of each receive, 1s to 20s, in whole
	// seconds. Default 20s.
	WaitTime time.Duration

	// VisibilityTimeout is asked for on every receive, in whole seconds up
	// to 12h. Default: the queue's own visibility timeout. Run refuses one
	// under 1s (the queue's too): a message received would be visible
	// again at once, to be run again beside itself.
	VisibilityTimeout time.Duration

	// HandlerTimeout bounds each handler call through its context, from
	// the handler's start. Default: none with heartbeats on (the
	// Heartbeat's MaxLifetime bounds the lease); with heartbeats off, the
	// message's lease, that is the visibility timeout in effect counted
	// from the receive, less a margin to send the acknowledgement
	// (AckInterval plus a tenth of the visibility timeout, at most 1s):
	// past the lease SQS hands the message to another consumer anyway.
	HandlerTimeout time.Duration

	// Heartbeat configures the visibility heartbeat that keeps received
	// messages invisible while they wait and while their handlers run,
	// however long that takes (up to Heartbeat.MaxLifetime). The worker
	// sets its QueueURL and VisibilityTimeout; the other fields default as
	// documented in visibility.Config, from the visibility timeout in
	// effect, but for MaxInFlight, which defaults to Pollers (at least 4):
	// each receive's messages fall due together. Logger defaults to
	// Config.Logger.
	Heartbeat visibility.Config

	// DisableHeartbeat turns the heartbeat off: messages are then held for
	// one visibility timeout only.
	DisableHeartbeat bool

	// Breaker configures the circuit breaker, on by default: after
	// Breaker.Threshold dependency failures in a row (errors marked with
	// sqsworker.Unavailable, such as the idempotency store's outages, but
	// not sqsworker.PartlyUnavailable, such as one tenant's table missing)
	// the worker stops receiving, releases what it received but has not
	// started, and probes with one message at a time until the dependency
	// is back, so that an outage does not spend receive counts and fill the
	// dead-letter queue. See sqsworker.BreakerConfig for the defaults.
	Breaker sqsworker.BreakerConfig

	// Backoff spaces the retries of failed messages, by receive count.
	// Default sqsworker.ExponentialBackoff{} (full jitter, 1s base, 15m cap).
	Backoff sqsworker.Backoff

	// DeadLetterQueueURL is where permanent failures and last attempts go.
	// Default: the target of the queue's redrive policy. With neither, see
	// the package documentation for what happens to permanent failures.
	DeadLetterQueueURL string

	// MaxReceiveCount is the attempt after whose failure a message is moved
	// to the dead-letter queue. Default: the redrive policy's
	// maxReceiveCount; 0 without a redrive policy, meaning no limit. It must
	// not be above the redrive policy's.
	MaxReceiveCount int

	// AckInterval is the longest a delete or visibility change waits for
	// its batch of ten to fill. Default 100ms. Without the heartbeat, Run
	// refuses one that, with the acknowledgement's margin, leaves handlers
	// less than half the visibility timeout.
	AckInterval time.Duration

	// ShutdownTimeout is how long Run lets in-flight handlers finish after
	// its context is cancelled. (Shutdown takes its deadline from its own
	// context instead.) Default 25s, within ECS's default 30s stop timeout.
	ShutdownTimeout time.Duration

	// Logger receives the worker's logs. Message bodies are never logged.
	// Default slog.Default().
	Logger *slog.Logger

	// Metrics receives the worker's figures (see package metrics for the
	// vocabulary), such as a metrics.EMF writing to stdout. Default none:
	// nothing is measured.
	Metrics metrics.Recorder

	// MetricsInterval is how often the worker polls the depth of the queue
	// and of its dead-letter queue (GetQueueAttributes, two requests) and
	// flushes Metrics when it has a Flush() error method. Default 60s.
	MetricsInterval time.Duration

	// DisableDepth stops the depth polling.
	DisableDepth bool

	// HandlerName is the handler dimension of the metrics. Default
	// "handler".
	HandlerName string

	// Host names this worker in dead-letter metadata. Default os.Hostname().
	Host string

	// RateLimit caps the messages this worker receives, per second, with
	// a token bucket of RateBurst (golang.org/x/time/rate): a receive asks
	// for no more messages than there are tokens, and none is made while
	// there is none, so that no message waits for a token while it is held
	// invisible. Default 0: no limit.
	RateLimit float64

	// RateBurst is the size of the RateLimit's bucket: the most messages
	// received at once after a pause. Default min(MaxMessages,
	// ceil(RateLimit)), at least 1.
	RateBurst int
}

// Defaults of the Config fields.
const (
	DefaultConcurrency     = 10
	DefaultWaitTime        = 20 * time.Second
	DefaultAckInterval     = 100 * time.Millisecond
	DefaultShutdownTimeout = 25 * time.Second
)

// validate returns one error naming every bad field.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.QueueURL == "" {
		bad("QueueURL is required")
	}
	if c.Concurrency < 0 {
		bad("Concurrency %d is negative", c.Concurrency)
	}
	if c.Pollers < 0 {
		bad("Pollers %d is negative", c.Pollers)
	}
	if c.MaxMessages < 0 || c.MaxMessages > MaxMessagesPerReceive {
		bad("MaxMessages %d is outside 1..%d", c.MaxMessages, MaxMessagesPerReceive)
	}
	if c.WaitTime < 0 || c.WaitTime > MaxWaitTime || c.WaitTime%time.Second != 0 {
		bad("WaitTime %s is not a whole number of seconds in 1s..20s", c.WaitTime)
	}
	if c.VisibilityTimeout < 0 || c.VisibilityTimeout > sqsworker.MaxVisibilityTimeout || c.VisibilityTimeout%time.Second != 0 {
		bad("VisibilityTimeout %s is not a whole number of seconds in 0s..12h", c.VisibilityTimeout)
	}
	if c.HandlerTimeout < 0 {
		bad("HandlerTimeout %s is negative", c.HandlerTimeout)
	}
	if c.MaxReceiveCount < 0 {
		bad("MaxReceiveCount %d is negative", c.MaxReceiveCount)
	}
	if c.AckInterval < 0 {
		bad("AckInterval %s is negative", c.AckInterval)
	}
	if c.MetricsInterval < 0 {
		bad("MetricsInterval %s is negative", c.MetricsInterval)
	}
	if c.ShutdownTimeout < 0 {
		bad("ShutdownTimeout %s is negative", c.ShutdownTimeout)
	}
	if c.RateLimit < 0 || math.IsNaN(c.RateLimit) || math.IsInf(c.RateLimit, 0) {
		bad("RateLimit %v is not a number of messages per second, 0 (no limit) or above", c.RateLimit)
	}
	if c.RateBurst < 0 {
		bad("RateBurst %d is negative", c.RateBurst)
	}
	if err := c.Breaker.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("worker: invalid Config: %w", errors.Join(errs...))
}

// withDefaults returns c with its zero fields set to their defaults, except
// those that depend on the queue.
func (c Config) withDefaults() Config {
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = MaxMessagesPerReceive
	}
	if c.Pollers == 0 {
		c.Pollers = (c.Concurrency + c.MaxMessages - 1) / c.MaxMessages
	}
	if c.WaitTime == 0 {
		c.WaitTime = DefaultWaitTime
	}
	if c.Backoff == nil {
		c.Backoff = sqsworker.ExponentialBackoff{}
	}
	if c.AckInterval == 0 {
		c.AckInterval = DefaultAckInterval
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MetricsInterval == 0 {
		c.MetricsInterval = time.Minute
	}
	if c.HandlerName == "" {
		c.HandlerName = "handler"
	}
	if c.RateLimit > 0 && c.RateBurst == 0 {
		c.RateBurst = defaultBurst(c.RateLimit, c.MaxMessages)
	}
	return c
}

// defaultBurst is the bucket of a rate limit: one receive's worth, or a
// second's when that is less, at least 1.
func defaultBurst(limit float64, maxMessages int) int {
	return max(1, min(maxMessages, int(math.Ceil(limit))))
}

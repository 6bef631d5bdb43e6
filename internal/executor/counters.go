package executor

import (
	"sync/atomic"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// Counters counts what happened to a runtime's messages. The executor counts
// outcomes; the runtime counts receives and acknowledgements.
type Counters struct {
	Received     atomic.Int64 // messages received
	Succeeded    atomic.Int64 // handlers that returned nil
	Failed       atomic.Int64 // handlers that failed (panics included)
	Panics       atomic.Int64 // handlers that panicked
	Retried      atomic.Int64 // failures given a delay
	Postponed    atomic.Int64 // RetryAfter with a nil error
	DeadLettered atomic.Int64 // moved to the dead-letter queue
	Released     atomic.Int64 // made visible at once, unhandled (on a last receive, as a copy)
	Deleted      atomic.Int64 // deletes SQS confirmed
	AckFailures  atomic.Int64 // deletes and visibility changes that failed for good
	MoveFailures atomic.Int64 // dead-letter moves that failed
	InFlight     atomic.Int64 // handlers running now
	Extensions   atomic.Int64 // heartbeat extensions
	LeasesLost   atomic.Int64 // leases lost while the handler ran: failures abandoned, successes deleted once all the same
	// Held counts messages held back, without an attempt, until the time
	// in their sqsworker.AttrNotBefore; Requeued the waiting copies sent
	// (holds, backoffs above 12 hours, releases and postponements on a
	// last receive); RequeueFailures the copies that could not be sent.
	Held, Requeued, RequeueFailures atomic.Int64
	// BreakerOpens and BreakerProbes count the circuit breaker's openings
	// and probes.
	BreakerOpens, BreakerProbes atomic.Int64
}

// Received counts n received messages.
func (e *Executor) Received(n int) {
	e.Counters.Received.Add(int64(n))
	e.Metrics.Add(metrics.MessagesReceived, int64(n), e.Queue)
}

// Heartbeat returns the visibility heartbeat for the executor's queue,
// received with the visibility timeout vis: cfg with its queue and
// visibility filled in, counting every extension.
func (e *Executor) Heartbeat(api visibility.API, cfg visibility.Config, url string, vis time.Duration) (*visibility.Extender, error) {
	cfg.QueueURL, cfg.VisibilityTimeout = url, vis
	onExtend := cfg.OnExtend
	cfg.OnExtend = func(m *sqsworker.Message, until time.Time) {
		e.Counters.Extensions.Add(1)
		e.Metrics.Add(metrics.VisibilityExtensions, 1, e.Queue)
		if onExtend != nil {
			onExtend(m, until)
		}
	}
	return visibility.New(api, cfg)
}

// BreakerChanged logs a change of the circuit breaker's state and sets its
// gauge; pass it to breaker.New.
func (e *Executor) BreakerChanged(from, to breaker.State, err error) {
	e.Metrics.Set(metrics.BreakerState, float64(to), e.Queue)
	switch to {
	case breaker.Open:
		e.Counters.BreakerOpens.Add(1)
		e.Metrics.Add(metrics.BreakerOpens, 1, e.Queue)
		e.Log.Warn("circuit breaker open: a dependency is unavailable; taking no message until a probe succeeds",
			"from", from.String(), "error", err)
	case breaker.HalfOpen:
		e.Log.Info("circuit breaker half-open: probing with one message")
	case breaker.Closed:
		e.Log.Info("circuit breaker closed: the dependency is back")
	}
}

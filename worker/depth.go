package worker

import (
	"context"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/metrics"
)

// report polls the depth of the queue and its dead-letter queue and flushes
// the metrics every MetricsInterval, and flushes them once more at the end.
func (c *consumer) report(ctx context.Context) {
	flusher, _ := c.cfg.Metrics.(interface{ Flush() error })
	tick := time.NewTicker(c.cfg.MetricsInterval)
	defer tick.Stop()
	for {
		if !c.cfg.DisableDepth {
			c.pollDepth(ctx)
		}
		// The breaker's state at every flush, not only when it changes, so
		// that an alarm on it sees a value in every period.
		c.recorder.Set(metrics.BreakerState, float64(c.exec.Breaker.State()), c.exec.Queue)
		if flusher != nil {
			if err := flusher.Flush(); err != nil {
				c.log.Warn("flushing metrics failed", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			// A stopped worker's breaker holds nothing back: in a sink
			// that combines the workers recording into it, an open one
			// would stay the greatest after the worker is gone.
			c.recorder.Set(metrics.BreakerState, 0, c.exec.Queue)
			if flusher != nil {
				_ = flusher.Flush()
			}
			return
		case <-tick.C:
		}
	}
}

var depthAttributes = []types.QueueAttributeName{
	types.QueueAttributeNameApproximateNumberOfMessages,
	types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
	types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
}

// pollDepth sets the depth gauges of the queue and of its dead-letter queue.
func (c *consumer) pollDepth(ctx context.Context) {
	read := func(url string) (map[string]string, error) {
		out, err := c.w.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: depthAttributes})
		if err != nil {
			return nil, err
		}
		return out.Attributes, nil
	}
	num := func(a map[string]string, k string) float64 {
		n, _ := strconv.ParseFloat(a[k], 64)
		return n
	}
	dims := c.exec.Queue
	if a, err := read(c.info.URL); err == nil {
		c.recorder.Set(metrics.QueueVisible, num(a, "ApproximateNumberOfMessages"), dims)
		c.recorder.Set(metrics.QueueInFlight, num(a, "ApproximateNumberOfMessagesNotVisible"), dims)
		c.recorder.Set(metrics.QueueDelayed, num(a, "ApproximateNumberOfMessagesDelayed"), dims)
	} else if ctx.Err() == nil {
		c.log.Warn("reading the queue's depth failed", "error", err)
	}
	if c.cfg.DeadLetterQueueURL == "" {
		return
	}
	if a, err := read(c.cfg.DeadLetterQueueURL); err == nil {
		c.recorder.Set(metrics.DeadLetterQueueVisible, num(a, "ApproximateNumberOfMessages"), dims)
	} else if ctx.Err() == nil {
		c.log.Warn("reading the dead-letter queue's depth failed", "error", err)
	}
}

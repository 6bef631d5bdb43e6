package worker

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/logging"

	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/ctxsleep"
)

// Receive-loop backoff after an error, and slot filling.
const (
	receiveBackoffBase = 200 * time.Millisecond
	receiveBackoffCap  = 10 * time.Second
	// fillWait is how long a receive loop waits for more free handler slots
	// before receiving fewer than MaxMessages.
	fillWait = 5 * time.Millisecond
	// receiveGrace is how long past its long-poll wait a receive may take
	// before it is given up: an endpoint that swallows requests would
	// otherwise hold the receive loop for ever. Cutting a receive can hide
	// the messages SQS already handed it for a visibility timeout, so the
	// grace is generous.
	receiveGrace = 20 * time.Second
)

// poll is one receive loop: it receives as many messages as it holds free
// handler slots, and hands them to dispatch.
func (c *consumer) poll() {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:        aws.String(c.info.URL),
		WaitTimeSeconds: int32(c.cfg.WaitTime / time.Second),
		// Always the timeout the heartbeat and the handler deadlines are
		// planned with, whatever the queue's own setting is now.
		VisibilityTimeout:           int32(c.vis / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	failures := 0
	for {
		// While the circuit breaker is open no receive is made: the
		// messages stay in the queue with their receive counts unspent.
		// Once it lets a probe through, one message is received.
		probe, err := c.exec.Breaker.Wait(c.pollCtx)
		if err != nil {
			return
		}
		want := c.cfg.MaxMessages
		if probe {
			want = 1
		}
		n := c.acquire(want)
		if n == 0 {
			if probe {
				c.exec.Breaker.Abort()
			}
			return
		}
		if c.pollCtx.Err() != nil {
			c.releaseSlots(n)
			if probe {
				c.exec.Breaker.Abort()
			}
			return
		}
		in.MaxNumberOfMessages = int32(n)
		// Not pollCtx nor handlerCtx: a receive under way at shutdown goes
		// on, even past the deadline. Cut short, SQS would keep its long
		// poll open and hide what it hands it, including the messages of
		// the handlers cut at the deadline, released meanwhile, for a whole
		// visibility timeout. What it brings is released once it ends.
		rctx, cancel := context.WithTimeout(c.receiveCtx, c.cfg.WaitTime+receiveGrace)
		out, err := c.w.api.ReceiveMessage(rctx, in, quietReceive)
		cancel()
		if probe && (err != nil || len(out.Messages) == 0) {
			c.exec.Breaker.Abort()
		}
		if err != nil {
			c.releaseSlots(n)
			if c.pollCtx.Err() != nil {
				return
			}
			if awserr.IsFatal(err) {
				c.fatal <- fmt.Errorf("worker: receiving from %s: %w", c.info.URL, err)
				return
			}
			failures++
			d := jittered(failures)
			c.log.Warn("receive failed, retrying", "error", err, "retry_in", d, "failures", failures)
			if !sleep(c.pollCtx, d) {
				return
			}
			continue
		}
		if failures > 0 {
			c.log.Info("receiving again", "after_failures", failures)
			failures = 0
		}
		c.releaseSlots(n - len(out.Messages))
		if len(out.Messages) > 0 {
			c.dispatch(out.Messages, probe)
		}
	}
}

// acquire waits for one free handler slot, then takes up to want-1 more,
// waiting at most fillWait for them: under load, a few milliseconds turn many
// small receives into few full ones. It returns 0 when receiving stops.
func (c *consumer) acquire(want int) int {
	select {
	case <-c.slots:
	case <-c.pollCtx.Done():
		return 0
	}
	n := 1
	t := time.NewTimer(fillWait)
	defer t.Stop()
	for n < want {
		select {
		case <-c.slots:
			n++
		case <-t.C:
			return n
		case <-c.pollCtx.Done():
			return n
		}
	}
	return n
}

func (c *consumer) releaseSlots(n int) {
	for range n {
		c.slots <- struct{}{}
	}
}

// quietReceive silences the SDK's own logger for receives: receive errors
// are logged by the worker itself.
func quietReceive(o *sqs.Options) { o.Logger = logging.Nop{} }

// jittered is the receive-loop backoff after the given number of failures.
func jittered(failures int) time.Duration {
	d := receiveBackoffBase
	for i := 1; i < failures && d < receiveBackoffCap; i++ {
		d *= 2
	}
	d = min(d, receiveBackoffCap)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	return ctxsleep.Sleep(ctx, d)
}

package worker

import (
	"context"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/logging"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/ctxsleep"
	"github.com/sqsworker/sqsworker/internal/fifoattempt"
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
// handler slots (and rate-limit tokens), and hands them to dispatch, whose
// handlers run with contexts derived from hctx. consume counts it active in
// the pool before it starts it; poll counts it out when it returns.
func (c *consumer) poll(hctx context.Context) {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:        aws.String(c.info.URL),
		WaitTimeSeconds: int32(c.cfg.WaitTime / time.Second),
		// Always the timeout the heartbeat and the handler deadlines are
		// planned with, whatever the queue's own setting is now.
		VisibilityTimeout:           int32(c.vis / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	pool, qi := c.w.pool, c.w.qi
	// An active loop (receiving, or waiting for slots) holds lower-priority
	// queues of a shared pool back while its queue has messages; a loop
	// paused by the breaker, a rate limit or an error does not.
	defer pool.setActive(qi, -1)
	paused := func(wait func() bool) bool {
		pool.setActive(qi, -1)
		defer pool.setActive(qi, 1)
		return wait()
	}
	failures := 0
	var attempt fifoattempt.Retry // FIFO: the attempt ID of a failed receive, for its retry
	for {
		// While the circuit breaker is open no receive is made: the
		// messages stay in the queue with their receive counts unspent.
		// Once it lets a probe through, one message is received.
		// Allow, not State then Wait: a breaker that opens between the two
		// would have the loop wait out the open breaker counted active,
		// holding lower queues back meanwhile.
		ok, probe, _ := c.exec.Breaker.Allow()
		if c.w.breakerAsked != nil {
			c.w.breakerAsked()
		}
		if !ok {
			var err error
			paused(func() bool { probe, err = c.exec.Breaker.Wait(c.pollCtx); return true })
			if err != nil {
				return
			}
		}
		want := c.cfg.MaxMessages
		if probe != 0 {
			want = 1
		}
		// A rate-limited queue receives no more than it holds tokens for,
		// and waits for a token without holding slots.
		if c.w.limits != nil {
			if c.w.limits.tokens() < 1 && !c.waitForToken(paused) {
				c.exec.Breaker.Abort(probe)
				return
			}
			want = max(1, min(want, c.w.limits.tokens()))
		}
		// A failed receive is sent again with its attempt ID, which needs
		// as many slots as it asked for: SQS answers it with what it
		// handed the failed one. With fewer (a breaker probe, a rate limit,
		// slots another loop took meanwhile), fifoattempt gives the ID up
		// and the receive is a new one, for as many as it holds slots: its
		// messages would come back after a visibility timeout, as they
		// would without the ID. Waiting for the missing slots instead,
		// holding some, could deadlock with another loop doing the same.
		if c.info.FIFO {
			if p := attempt.Pending(time.Now()); p > 0 {
				want = min(want, p)
			}
		}
		n := pool.acquire(c.pollCtx, qi, want)
		if n == 0 {
			c.exec.Breaker.Abort(probe)
			return
		}
		if c.w.limits != nil { // another queue may have spent the tokens meanwhile
			if k := min(n, c.w.limits.tokens()); k < n {
				pool.release(qi, n-max(k, 0))
				n = max(k, 0)
			}
		}
		if c.pollCtx.Err() != nil || n == 0 {
			pool.release(qi, n)
			c.exec.Breaker.Abort(probe)
			if c.pollCtx.Err() != nil {
				return
			}
			continue
		}
		in.MaxNumberOfMessages = int32(n)
		if c.info.FIFO {
			// A receive sent again after a lost reply, by the SDK or after
			// it failed for good, gets the messages SQS handed the first,
			// rather than leaving them, and their groups, hidden for a
			// visibility timeout. Any other receive has an ID of its own:
			// the same ID again would get the same messages.
			in.ReceiveRequestAttemptId = aws.String(attempt.For(n, time.Now()))
		}
		// Not pollCtx nor handlerCtx: a receive under way at shutdown goes
		// on, even past the deadline. Cut short, SQS would keep its long
		// poll open and hide what it hands it, including the messages of
		// the handlers cut at the deadline, released meanwhile, for a whole
		// visibility timeout. What it brings is released once it ends.
		rctx, cancel := context.WithTimeout(c.receiveCtx, c.cfg.WaitTime+receiveGrace)
		stopGrace := pool.receiving(qi)
		out, err := c.w.api.ReceiveMessage(rctx, in, quietReceive)
		stopGrace()
		cancel()
		if err != nil || len(out.Messages) == 0 {
			c.exec.Breaker.Abort(probe)
		}
		if err != nil {
			pool.release(qi, n)
			if awserr.MayHaveReceived(err) {
				c.mayBeOpen()
			}
			if c.pollCtx.Err() != nil {
				return
			}
			if awserr.IsFatal(err) {
				select {
				case c.fatal <- fmt.Errorf("worker: receiving from %s: %w", c.info.URL, err):
				case <-c.pollCtx.Done(): // stopping for another fatal error (an acknowledgement's): it is told
				}
				return
			}
			failures++
			d := jittered(failures)
			c.log.Warn("receive failed, retrying", "error", err, "retry_in", d, "failures", failures)
			if !paused(func() bool { return sleep(c.pollCtx, d) }) {
				return
			}
			continue
		}
		if failures > 0 {
			c.log.Info("receiving again", "after_failures", failures)
			failures = 0
		}
		attempt.Done()
		c.w.limits.take(len(out.Messages))
		var age time.Duration
		if pool.watchesAge(qi) {
			age = oldest(out.Messages)
		}
		pool.received(qi, len(out.Messages), n, age)
		pool.release(qi, n-len(out.Messages))
		if len(out.Messages) > 0 {
			c.dispatch(hctx, out.Messages, probe)
		}
	}
}

// waitForToken waits for a whole token (see waitToken). Held back by its
// own rate limit, the loop waits paused, not holding the lower queues back;
// by the limit a MultiWorker's queues share, it stays counted active, as a
// loop with messages is: paused, the lower queues would take the shared
// tokens as they come, whatever their priority.
func (c *consumer) waitForToken(paused func(func() bool) bool) bool {
	if len(c.w.limits) > len(c.w.own) && c.w.own.tokens() >= 1 {
		return c.waitToken()
	}
	return paused(c.waitToken)
}

// waitToken waits until the rate limits hold a whole token. It returns
// false when receiving stops first.
func (c *consumer) waitToken() bool {
	for c.w.limits.tokens() < 1 {
		if !sleep(c.pollCtx, c.w.limits.untilOne()) {
			return false
		}
	}
	return true
}

// oldest is the age of the oldest of msgs, from their SentTimestamp, among
// those that waited in the queue since they were sent: on their first
// receive, and not copies the runtime sent to wait (a job held for its
// time, one released or put off on its last receive). A retry, or such a
// copy, is as old as the wait the runtime chose for it, not a sign that
// the queue waits for slots: counted, a trickle of retries would keep its
// queue starved, and take slots from the higher queues. (A message sent
// with a DelaySeconds of its own still counts from its send.)
func oldest(msgs []types.Message) time.Duration {
	var first int64 = math.MaxInt64
	for i := range msgs {
		m := &msgs[i]
		if m.Attributes[sqsworker.AttrReceiveCount] != "1" || waitingCopy(m.MessageAttributes) {
			continue
		}
		if ms, err := strconv.ParseInt(m.Attributes[sqsworker.AttrSentTimestamp], 10, 64); err == nil {
			first = min(first, ms)
		}
	}
	if first == math.MaxInt64 {
		return 0
	}
	return time.Since(time.UnixMilli(first))
}

// waitingCopy reports whether attrs are those of a copy the runtime sent
// for its message to wait in.
func waitingCopy(attrs map[string]types.MessageAttributeValue) bool {
	for _, name := range []string{sqsworker.AttrNotBefore, sqsworker.AttrPriorAttempts, sqsworker.AttrPackedAttributes} {
		if _, ok := attrs[name]; ok {
			return true
		}
	}
	return false
}

// releaseSlots gives n handler slots back to the pool.
func (c *consumer) releaseSlots(n int) { c.w.pool.release(c.w.qi, n) }

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
	return d/2 + mrand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	return ctxsleep.Sleep(ctx, d)
}

// mayBeOpen notes a receive that failed in a way that may have reached SQS
// (a network error, a server fault, or a receive given up on after
// WaitTime and receiveGrace): its long poll may still be open there, and
// take a message made visible, for up to WaitTime and lastPollSlack. A
// message released while stopping stays hidden until then (see Retry).
func (c *consumer) mayBeOpen() {
	until := time.Now().Add(c.cfg.WaitTime + lastPollSlack).UnixNano()
	for {
		old := c.openUntil.Load()
		if old >= until || c.openUntil.CompareAndSwap(old, until) {
			return
		}
	}
}

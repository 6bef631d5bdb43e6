package executor

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/jobkey"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/metrics"
)

// Delays of any length.
//
// A message whose sqsworker.AttrNotBefore lies ahead is held back without
// running the handler and without counting an attempt, in one of two ways:
//
//   - a visibility step: the message is made invisible again, for up to the
//     12 hours SQS allows from its receive, landing Steps.MessageDelay less
//     Steps.Slack (14 minutes) before its time. One request
//     (ChangeMessageVisibility, batched), and one receive when it comes
//     back. Every such receive counts toward the redrive policy's
//     maxReceiveCount, so a copy takes visibility steps only while its
//     receive count leaves a spare receive after the next (count+2 <=
//     maxReceiveCount; without a redrive policy, always; never when the
//     queue's attributes could not be read, as the Lambda adapter goes on
//     without them: Policy.RedriveUnknown);
//   - a message step (requeue): a copy of the message — same body, same
//     message attributes, same X-Ray trace header, on FIFO queues the same
//     group with the original's message ID as deduplication ID — is sent
//     with a delay of up to 15 minutes, and the original is deleted once
//     the send succeeded. Two requests (SendMessage, DeleteMessage) and one
//     receive of the copy. The copy starts with a receive count of 0.
//
// For a wait of more than 15 minutes, a visibility step costs 2 requests
// and a message step 3 per 15 minutes, so visibility steps are taken
// whenever the receive count allows, message steps otherwise. A copy runs
// its handler only if it was sent no more than 15 minutes (plus Slack, for
// clocks) before its time: then its delay covered the whole wait, and its
// receive count counts real attempts only. A copy that waited by visibility
// steps is requeued once more when its time has come (with a delay up to 15
// minutes, or none when late), so that the job's attempts start from a
// fresh receive count: waiting is never what sends a job to the
// dead-letter queue.
//
// A copy is sent before its original is deleted: a crash, or a delete that
// fails, between the two leaves both, and the job runs twice unless its
// handler is idempotent. Copies keep the idempotency key (a copy of a
// message without one gets "message-id:" and the first message's ID — for a
// replayed job, the ID its failure metadata names — which is what the
// idempotency middleware's DefaultKey would have used, unless the key would
// push the copy over the queue's MaximumMessageSize; ten attributes of the
// job's own are packed into one to make room, see sqsmsg.Pack), so the
// idempotency middleware runs the job once.

// Steps are the limits a hold works within. The zero value of a field means
// SQS's: tests set shorter ones with SetStepsForTest.
type Steps struct {
	// MessageDelay is the longest delay of a sent message. Default
	// sqsworker.MaxMessageDelay (15m).
	MessageDelay time.Duration
	// Visibility is the longest a received message can be kept invisible,
	// counted from its receive. Default sqsworker.MaxVisibilityTimeout
	// (12h).
	Visibility time.Duration
	// Slack is the clock difference tolerated between SQS and the
	// runtimes (see Executor.Run), and what a visibility step keeps in
	// hand. Default 1m.
	Slack time.Duration
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// DefaultSlack is the default Steps.Slack.
const DefaultSlack = time.Minute

var testSteps atomic.Pointer[Steps]

// SetStepsForTest makes every executor use s (its zero fields SQS's limits)
// until the returned function is called. For tests only: they shorten the
// steps, or stop the clock, so that a delay of hours runs in seconds.
func SetStepsForTest(s Steps) (restore func()) {
	old := testSteps.Swap(&s)
	return func() { testSteps.Store(old) }
}

func steps() Steps {
	s := Steps{}
	if t := testSteps.Load(); t != nil {
		s = *t
	}
	if s.MessageDelay <= 0 {
		s.MessageDelay = sqsworker.MaxMessageDelay
	}
	if s.Visibility <= 0 {
		s.Visibility = sqsworker.MaxVisibilityTimeout
	}
	if s.Slack <= 0 {
		s.Slack = DefaultSlack
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s
}

// Requeue sends the copies of messages that wait: the queue the messages
// were received from.
type Requeue struct {
	// API sends the copies: the SQS client. Nil: no copies are sent, and
	// messages wait by visibility steps only.
	API queue.Sender
	// URL is the queue's URL.
	URL string
	// FIFO is true for a FIFO queue.
	FIFO bool
	// Retention is the queue's MessageRetentionPeriod; 0 when not known. A
	// message that waits without an attempt into its last stretch waits
	// in a fresh copy (see waitInCopy): SQS deletes a message at the end
	// of its retention period, whatever its receives.
	Retention time.Duration
}

func (r Requeue) enabled() bool { return r.API != nil && r.URL != "" }

// expiresWhileWaiting reports whether m, back after delay from now, would
// come back within the last stretch of its retention period, or past it: a
// quarter of the period, at most an hour. The stretch leaves room for a
// backlog ahead of it, and for another wait.
func (r Requeue) expiresWhileWaiting(m *sqsworker.Message, now time.Time, delay time.Duration) bool {
	if r.Retention <= 0 || m.SentAt.IsZero() {
		return false
	}
	stretch := min(r.Retention/4, time.Hour)
	return !now.Add(delay + stretch).Before(m.SentAt.Add(r.Retention))
}

// Hold holds back j's message when its time (sqsworker.AttrNotBefore) has
// not come, or sends it again first when it waited on this copy, as Run
// does before running the handler: a runtime calls it before anything else
// that could settle the message without an attempt (the circuit breaker's
// postponement), so that waiting never costs a receive more. It reports
// whether it settled the message, and then whether the message is gone from
// the queue (a copy took its place).
func (e *Executor) Hold(j *Job, ack Acker) (held, gone bool) {
	j.holdChecked = true
	return e.hold(j, ack)
}

func (e *Executor) hold(j *Job, ack Acker) (held, gone bool) {
	// Most messages have no time: their check stays this small, so that a
	// runtime that runs each message on a fresh goroutine (the Lambda
	// adapter) does not grow its stack for holdUntil's large frame.
	nb, ok := j.Msg.NotBefore()
	if !ok {
		return false, false
	}
	return e.holdUntil(j, ack, nb)
}

// holdUntil is hold for a message whose time is nb.
func (e *Executor) holdUntil(j *Job, ack Acker, nb time.Time) (held, gone bool) {
	m := j.Msg
	s := steps()
	if e.Requeue.FIFO {
		s.MessageDelay = 0 // FIFO queues take no per-message delay
	}
	now := s.Now()
	sent := m.SentAt
	if sent.IsZero() {
		sent = now
	}
	if limit := sent.Add(sqsworker.MaxDelay); nb.After(limit.Add(s.Slack)) {
		// Not a time the producer writes (another producer's, or not in
		// milliseconds): held for the longest delay, not for ever.
		j.log(e).Warn("message's not-before is more than the longest delay (365 days) after its send; holding it until then instead",
			"message_id", m.ID, "not_before", nb, "sent_at", sent, "until", limit)
		nb = limit
	}
	wait := nb.Sub(now)
	// Sent more than a message delay before its time: this copy waited by
	// visibility steps, so its receive count counts waits.
	waited := !m.SentAt.IsZero() && nb.Sub(m.SentAt) > s.MessageDelay+s.Slack
	if wait <= 0 && !waited {
		return false, false
	}
	if !j.Held(time.Now()) {
		abandon(j, ack)
		return true, false
	}
	log := j.log(e).With("message_id", m.ID, "not_before", nb, "receive_count", m.ReceiveCount)
	if wait <= 0 {
		// Due, on a copy that waited: a fresh copy starts the attempts
		// from a receive count of 0. Without one, the job runs on this
		// copy rather than wait for ever.
		if e.Requeue.enabled() {
			err := e.requeue(j, ack, nb, m.PriorAttempts(), 0)
			if err == nil {
				j.Copied = true
				ack.Delete(j)
				return true, true
			}
			e.requeueFailed()
			log.Warn("sending a fresh copy of a message whose time has come failed; running it on this copy, whose receive count includes its waits", "error", err)
		}
		return false, false
	}
	if e.Requeue.FIFO && e.fifoVisibilityRoom(m) {
		// No message delay: wait by visibility, and send a fresh copy
		// only when the receive count runs out.
		vis := max(min(wait, visibilityLeft(j, s, now)), time.Second)
		e.Counters.Held.Add(1)
		e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
		log.Debug("message held back until its time", "step", "visibility", "for", vis)
		if e.Policy.RedriveMaxReceiveCount == 1 {
			log.Warn("a FIFO queue whose redrive policy allows one receive cannot hold a message back: SQS moves it to the dead-letter queue when it comes back; raise maxReceiveCount")
		}
		retry(j, ack, vis)
		return true, false
	}
	if wait > s.MessageDelay+s.Slack && e.visibilityRoom(m) {
		if vis := min(wait-max(s.MessageDelay-s.Slack, 0), visibilityLeft(j, s, now)); vis >= time.Second {
			e.Counters.Held.Add(1)
			e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
			log.Debug("message held back until its time", "step", "visibility", "for", vis)
			retry(j, ack, vis)
			return true, false
		}
	}
	if e.Requeue.enabled() {
		delay := min(max(wait, 0), s.MessageDelay)
		// On its last receive, kept by visibility it would be moved to
		// the dead-letter queue when it comes back: its copy is sent
		// again while the message is held.
		err := e.requeueHeld(j, ack, nb, m.PriorAttempts(), delay, e.OnLastReceive(j))
		if err == nil {
			e.Counters.Held.Add(1)
			e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
			log.Debug("message held back until its time", "step", "copy", "delay", delay)
			j.Copied = true
			ack.Delete(j)
			return true, true
		}
		e.requeueFailed()
		if e.OnLastReceive(j) {
			log.Error("sending the waiting copy of a message held back on "+e.lastReceive()+" failed while the message was held; "+
				"SQS moves it to the dead-letter queue when it comes back, though no handler failed: replay it once SQS takes sends again (sqsworker dlq replay)",
				"error", err)
		} else {
			log.Warn("sending the waiting copy of a message failed; keeping the message, to try again when it comes back", "error", err)
		}
	}
	// No copy: wait on this one, until its time or as long as SQS allows.
	vis := max(min(wait, visibilityLeft(j, s, now)), time.Second)
	e.Counters.Held.Add(1)
	e.Metrics.Add(metrics.MessagesPostponed, 1, e.Queue)
	retry(j, ack, vis)
	return true, false
}

// visibilityRoom reports whether the message may take a visibility step: its
// next receive leaves one more before the redrive policy's maxReceiveCount.
func (e *Executor) visibilityRoom(m *sqsworker.Message) bool {
	if e.Policy.RedriveUnknown {
		return false
	}
	mrc := e.Policy.RedriveMaxReceiveCount
	return mrc == 0 || receives(m)+2 <= mrc
}

// fifoVisibilityRoom reports whether a FIFO queue's message may take a
// visibility step. With a maxReceiveCount of 3 or more, as on a standard
// queue, while its next receive leaves a spare one (count+2 <=
// maxReceiveCount): a fresh copy whose send fails, or a crash, then costs
// that receive, not the job. With 2 there is no room for a spare: its
// copies cannot be delayed, so one sent at every receive would come back at
// once, for ever; it waits by visibility while its next receive is allowed
// at all. With 1, always: no wait is possible but this one. A policy that is
// unknown (Policy.RedriveUnknown) is taken for 2, the least that lets a
// message wait: no policy of 2 or more then counts its waits to the
// dead-letter queue.
func (e *Executor) fifoVisibilityRoom(m *sqsworker.Message) bool {
	mrc := e.Policy.RedriveMaxReceiveCount
	if e.Policy.RedriveUnknown {
		mrc = 2
	}
	switch {
	case mrc <= 1:
		return true
	case mrc == 2:
		return receives(m)+1 <= mrc
	default:
		return receives(m)+2 <= mrc
	}
}

// visibilityLeft is the longest visibility j's message may still be given.
func visibilityLeft(j *Job, s Steps, now time.Time) time.Duration {
	return s.Visibility - now.Sub(j.ReceivedAt) - s.Slack
}

// VisibilityOf returns d as the visibility timeout the runtimes' Ackers
// give j's message: rounded up to whole seconds, and kept within SQS's 12
// hours from the receive less Steps.Slack, which covers a ReceivedAt later
// than the receive SQS counts from (the Lambda adapter's is an estimate).
// A message received 12 hours ago gets 0: visible at once.
func VisibilityOf(j *Job, d time.Duration) time.Duration {
	s := steps()
	left := max(visibilityLeft(j, s, s.Now()), 0)
	return (min(max(d, 0), left) + time.Second - 1).Truncate(time.Second)
}

// receives returns the message's own receive count, SQS's
// ApproximateReceiveCount, without the attempts of earlier copies.
func receives(m *sqsworker.Message) int {
	n, err := strconv.Atoi(m.Attributes[sqsworker.AttrReceiveCount])
	if err != nil {
		return m.ReceiveCount
	}
	return n
}

// later makes j's message come back after delay, as the decision for its
// attempt: with a visibility change when the visibility can still hold it,
// else (a backoff above 12 hours) with a waiting copy that carries the
// attempts made so far, prior. FIFO queues keep the visibility change, cut
// to 12 hours: a copy would go behind the rest of its group.
func (e *Executor) later(j *Job, ack Acker, delay time.Duration, prior int) {
	delay = sqsworker.ClampLongDelay(delay) // a custom Backoff's
	s := steps()
	now := s.Now()
	if delay <= visibilityLeft(j, s, now) || !e.Requeue.enabled() || e.Requeue.FIFO {
		retry(j, ack, delay)
		return
	}
	nb := now.Add(delay)
	// A delay the visibility left cannot hold may still be short (the
	// handler ran nearly 12 hours): the copy is delayed by no more.
	if err := e.requeue(j, ack, nb, prior, min(delay, s.MessageDelay)); err != nil {
		e.requeueFailed()
		j.log(e).Warn("sending the waiting copy for a long backoff failed; retrying after the longest visibility timeout instead",
			"message_id", j.Msg.ID, "retry_in", delay, "error", err)
		retry(j, ack, delay)
		return
	}
	j.Copied = true
	ack.Delete(j)
}

// postpone makes j's message come back after delay without counting an
// attempt (RetryAfter with a nil error, the circuit breaker's wait), prior
// being the attempts made before this receive: as later does, unless the
// message is on the last receive the redrive policy allows (see
// waitInCopy).
func (e *Executor) postpone(j *Job, ack Acker, delay time.Duration, prior int) {
	if e.waitInCopy(j, ack, delay, prior, "postponed") {
		return
	}
	e.later(j, ack, delay, prior)
}

// release makes j's message visible again at once without counting an
// attempt (it was not run, or the runtime cut its handler short), prior
// being the attempts made before this receive: by its visibility, unless
// the message is on the last receive the redrive policy allows (see
// waitInCopy).
func (e *Executor) release(j *Job, ack Acker, prior int) {
	if e.waitInCopy(j, ack, 0, prior, "released") {
		return
	}
	retry(j, ack, 0)
}

// CopyLimiter is implemented by an Acker whose runtime bounds the waiting
// copies the executor sends of the messages it postpones or releases (the
// worker, while it stops).
type CopyLimiter interface {
	// CopyLimits returns the least delay a copy of j's message sent now
	// must have, so that the runtime does not receive it again itself (its
	// last receives while it stops), and the latest its send may end (zero
	// for no bound beyond Executor.MoveTimeout and Job.MoveBy).
	CopyLimits(j *Job) (minDelay time.Duration, by time.Time)
	// CopyStopping returns a channel closed once the runtime begins to
	// stop, from when CopyLimits gives a bound: a copy waiting to be sent
	// again wakes on it, to read that bound at once (nil for never).
	CopyStopping() <-chan struct{}
}

// waitInCopy makes j's message, postponed or released without an attempt,
// wait in a fresh copy when it is on the last receive its redrive policy
// allows (any receive, when the policy is unknown: see OnLastReceive): its
// next receive would be SQS's move to the dead-letter queue, though no
// handler failed; and, on any receive, when it would come back within the
// last stretch of the queue's retention period (see
// Requeue.expiresWhileWaiting). The copy is sent with the delay (up to a
// message delay; a longer one is held on the copy, at least what the
// runtime's CopyLimits asks), starts from a receive count of 0 and carries
// prior, so that this receive counts no attempt: its first receive has the
// attempt number this one had. It reports whether the copy was sent and the
// message deleted; if not (not on its last receive, a FIFO queue, no
// requeue, a send that failed), the caller settles the message by its
// visibility. FIFO queues keep the visibility: a copy would go behind the
// rest of its group, so such a message is dead-lettered on its next
// receive, which waitInCopy logs as an error, for the job to be replayed. A
// crash between the copy's send and the original's delete leaves both: the
// original, come back, is moved to the dead-letter queue by SQS (as it
// would have been without the copy), while the copy, keeping the job's key
// (see requeue), runs it.
func (e *Executor) waitInCopy(j *Job, ack Acker, delay time.Duration, prior int, what string) bool {
	// Where it waits, what befalls it on a FIFO queue (not copied), and
	// what befalls it if its copy cannot be sent.
	var where, fifoFate, failFate string
	switch {
	case e.OnLastReceive(j):
		moves := "SQS moves it"
		if e.Policy.RedriveUnknown {
			moves = "SQS may move it"
		}
		where = "on " + e.lastReceive()
		fifoFate = moves + " to the dead-letter queue on its next receive, though its job is not broken: replay it from there (sqsworker dlq replay)"
		failFate = "SQS moves it to the dead-letter queue on its next receive, though no handler failed: replay it once SQS takes sends again (sqsworker dlq replay)"
	case e.Requeue.expiresWhileWaiting(j.Msg, steps().Now(), delay):
		// SQS deletes a message at the end of the queue's retention
		// period, received or not: a job kept waiting longer (a webhook
		// endpoint down for days, its key open) would be lost without a
		// trace. Its copy's period starts anew.
		where = "near the end of the queue's retention period (MessageRetentionPeriod)"
		fifoFate = "SQS deletes it at the end of the period though its job is not done; lengthen the queue's MessageRetentionPeriod"
		failFate = "it waits by its visibility, and SQS deletes it at the end of the period"
	default:
		return false
	}
	if e.Requeue.FIFO {
		j.log(e).Error("FIFO message "+what+" "+where+", left to come back by its visibility (a copy would go behind the rest of its group): "+fifoFate,
			"message_id", j.Msg.ID, "sent_at", j.Msg.SentAt, "retry_in", delay)
		return false
	}
	if !e.Requeue.enabled() {
		return false
	}
	err := e.sendWaitingCopy(j, ack, delay, prior)
	if err == nil {
		return true
	}
	j.log(e).Error("sending the waiting copy of a message "+what+" "+where+" failed while the message was held; "+failFate,
		"message_id", j.Msg.ID, "sent_at", j.Msg.SentAt, "retry_in", delay, "error", err)
	return false
}

// priorOfWait is what the copy of m made by waitInCopy carries as its
// prior attempts, given prior, the receives of m before this one and the
// attempts m carries: at most MaxReceiveCount-2 (and at least 1 of them),
// unless m carries more. SQS does not tell the receives that were attempts
// from those spent waiting (an open key's postponements, releases, a
// dependency down), and a job that waited through an outage on most of its
// receives would otherwise come out of it with one attempt left,
// dead-lettered by its first transient failure: the copy leaves it at
// least two, where MaxReceiveCount allows three or more.
func (e *Executor) priorOfWait(m *sqsworker.Message, prior int) int {
	if e.Policy.MaxReceiveCount <= 0 {
		return prior
	}
	return min(prior, max(e.Policy.MaxReceiveCount-2, m.PriorAttempts(), 1))
}

// sendWaitingCopy sends the copy j's message waits in for delay (see
// waitInCopy), carrying prior as its earlier attempts (see priorOfWait),
// and deletes the message; or counts the copy failed and returns why.
func (e *Executor) sendWaitingCopy(j *Job, ack Acker, delay time.Duration, prior int) error {
	delay = sqsworker.ClampLongDelay(max(delay, 0))
	prior = e.priorOfWait(j.Msg, prior)
	s := steps()
	err := e.sendCopy(j, ack, true, func(ctx context.Context, least time.Duration, by time.Time) error {
		d := max(delay, least)
		// Its time in whole milliseconds, not rounded up to the next one
		// (NotBeforeAttribute): a copy sent without a delay and received
		// within the millisecond would be held back, and sent once more.
		nb := s.Now().Add(d).Truncate(time.Millisecond)
		return e.requeueBy(ctx, j, nb, prior, min(d, s.MessageDelay), by, true)
	})
	if err != nil {
		e.requeueFailed()
		return err
	}
	j.Copied = true
	ack.Delete(j)
	return nil
}

// requeueFailed counts a waiting copy that could not be sent.
func (e *Executor) requeueFailed() {
	e.Counters.RequeueFailures.Add(1)
	e.Metrics.Add(metrics.RequeueFailures, 1, e.Queue)
}

// requeue sends a copy of j's message that waits until nb, with delay as its
// message delay and prior as its earlier attempts, within what ack's
// CopyLimits asks, if it has them (the worker while it stops): delayed by
// at least its least delay (up to a message delay), its send ending by its
// bound.
func (e *Executor) requeue(j *Job, ack Acker, nb time.Time, prior int, delay time.Duration) error {
	return e.requeueHeld(j, ack, nb, prior, delay, false)
}

// requeueHeld is requeue, whose sends, when persist is set (a message on
// its last receive, whose copy no attempt made), are tried again while the
// runtime holds the message (see sendCopy).
func (e *Executor) requeueHeld(j *Job, ack Acker, nb time.Time, prior int, delay time.Duration, persist bool) error {
	return e.sendCopy(j, ack, persist, func(ctx context.Context, least time.Duration, by time.Time) error {
		d := delay
		if !e.Requeue.FIFO {
			d = max(d, min(least, steps().MessageDelay))
		}
		return e.requeueBy(ctx, j, nb, prior, d, by, false)
	})
}

// copyKeeps names the attributes a waiting copy keeps beside the job's own
// when it packs them (sqsmsg.Pack): the runtimes' and the dead-letter
// tools' (their names begin with "sqsworker."), and the job's key.
func copyKeeps(name string) bool {
	return strings.HasPrefix(name, "sqsworker.") || name == jobkey.Attribute
}

// requeueBy is requeue whose send, under ctx, ends by by, when set.
// restart allows a copy without room for its prior attempts to go without
// them: for a message that made no attempt on this receive (see
// waitInCopy).
func (e *Executor) requeueBy(ctx context.Context, j *Job, nb time.Time, prior int, delay time.Duration, by time.Time, restart bool) error {
	return e.requeueWith(ctx, j, nb, prior, delay, by, restart, true)
}

// requeueWith is requeueBy; mayPack lets the copy pack the job's own
// attributes into one when they leave no room for the runtimes'.
func (e *Executor) requeueWith(ctx context.Context, j *Job, nb time.Time, prior int, delay time.Duration, by time.Time, restart, mayPack bool) error {
	octx := ctx
	m := j.Msg
	attrs := maps.Clone(m.MessageAttributes)
	if attrs == nil {
		attrs = map[string]sqsworker.MessageAttribute{}
	}
	for name := range attrs {
		if sqsworker.IsFailureAttribute(name) {
			delete(attrs, name)
		}
	}
	attrs[sqsworker.AttrNotBefore] = sqsworker.NotBeforeAttribute(nb)
	delete(attrs, sqsworker.AttrPriorAttempts)
	if prior > 0 {
		attrs[sqsworker.AttrPriorAttempts] = sqsworker.MessageAttribute{DataType: "Number", StringValue: strconv.Itoa(prior)}
	}
	// A copy that does not fit (ten attributes of the job's own, or a body
	// near SQS's size limit) goes without what it can spare rather than not
	// at all, which would leave the job to the dead-letter queue though no
	// handler failed: its time, when its message delay covers it; then, if
	// restart allows (no attempt was made on this receive), its prior
	// attempts, so that its count of attempts starts again. The job's key
	// comes before them: a copy without it gets its own message ID as its
	// key, and a duplicate (a send retried, an original not deleted)
	// applies the job twice. Ten attributes of the job's own are packed
	// into one first, which leaves room for all of them; only the size
	// limit leaves any out. A failed attempt's copy (restart false) keeps
	// its prior attempts or is not sent: without them, a job failing for
	// good would start again at every copy, never dead-lettered.
	_, hasKey := attrs[jobkey.Attribute]
	key := sqsworker.MessageAttribute{DataType: "String", StringValue: jobkey.Default(m)}
	fits := func(withKey bool) bool {
		n, size := len(attrs), sqsworker.MessageSize(m.Body, attrs)
		if withKey && !hasKey {
			n, size = n+1, size+len(jobkey.Attribute)+len(key.DataType)+len(key.StringValue)
		}
		return n <= sqsworker.MaxMessageAttributes && size <= sqsworker.MaxMessageSize
	}
	packed := false
	if mayPack && !fits(true) {
		// Ten attributes of the job's own leave no room for its key,
		// time and attempts: they go packed into one, which the
		// runtimes unpack before the handler sees the message, and the
		// copy keeps everything.
		if p, ok := sqsmsg.Pack(attrs, copyKeeps); ok {
			all := attrs
			if attrs, packed = p, true; !fits(true) {
				attrs, packed = all, false
			}
		}
	}
	// The copy's time may go when its message delay covers it.
	nbSpare := !e.Requeue.FIFO && !nb.After(steps().Now().Add(delay))
	if !fits(true) {
		if nbSpare {
			delete(attrs, sqsworker.AttrNotBefore)
		}
		if pa, ok := attrs[sqsworker.AttrPriorAttempts]; ok && restart && !fits(true) {
			fitted := fits(false)
			delete(attrs, sqsworker.AttrPriorAttempts)
			if fitted && !fits(true) {
				// No room for the key either way: the attempts stay.
				attrs[sqsworker.AttrPriorAttempts] = pa
			}
		}
		if !fits(false) {
			return fmt.Errorf("%w: it needs %d message attributes and %d bytes, over SQS's limits of %d and %d: leave room for %s and %s",
				errCopyTooLarge, len(attrs), sqsworker.MessageSize(m.Body, attrs), sqsworker.MaxMessageAttributes, sqsworker.MaxMessageSize,
				sqsworker.AttrNotBefore, sqsworker.AttrPriorAttempts)
		}
	}
	addKey := !hasKey && len(attrs) < sqsworker.MaxMessageAttributes
	if addKey {
		// What the idempotency middleware's DefaultKey gives the first
		// message, so that its copies share its key.
		attrs[jobkey.Attribute] = key
		if sqsworker.MessageSize(m.Body, attrs) > sqsworker.MaxMessageSize {
			delete(attrs, jobkey.Attribute)
			addKey = false
		}
	}
	in := &sqs.SendMessageInput{
		QueueUrl:          aws.String(e.Requeue.URL),
		MessageBody:       aws.String(m.Body),
		MessageAttributes: sqsmsg.ToSDKAttributes(attrs),
	}
	if !e.Requeue.FIFO {
		in.DelaySeconds = int32((delay + time.Second - 1) / time.Second)
	}
	sqsmsg.Carry(in, m.GroupID, m.Attributes[sqsworker.AttrAWSTraceHeader], e.Requeue.FIFO)
	if e.Requeue.FIFO {
		in.MessageDeduplicationId = aws.String(m.ID)
	}
	timeout := e.MoveTimeout
	if timeout <= 0 {
		timeout = DefaultMoveTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !j.MoveBy.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, j.MoveBy)
		defer cancelBy()
	}
	if !by.IsZero() {
		var cancelBy context.CancelFunc
		ctx, cancelBy = context.WithDeadline(ctx, by)
		defer cancelBy()
	}
	_, err := e.Requeue.API.SendMessage(ctx, in)
	if err != nil && packed && queue.IsInvalidParameter(err) {
		// Perhaps over the queue's MaximumMessageSize (below SQS's
		// limit), which the message fit without the packing's JSON: the
		// copy goes as it would unpacked.
		cancel()
		return e.requeueWith(octx, j, nb, prior, delay, by, restart, false)
	}
	if err != nil && queue.IsInvalidParameter(err) {
		// Perhaps over the queue's MaximumMessageSize (below SQS's limit),
		// which the message fit without what the copy adds: the copy goes
		// without what it can spare, in the order above (its time when its
		// delay covers it and, if restart allows, its prior attempts; then
		// the key it was given), rather than not at all, which would leave
		// the job waiting on receives that run out.
		var spare [][]string
		if restart {
			spare = append(spare, []string{sqsworker.AttrPriorAttempts})
			if nbSpare {
				spare[0] = append(spare[0], sqsworker.AttrNotBefore)
			}
		}
		if addKey {
			spare = append(spare, []string{jobkey.Attribute})
		}
		for _, names := range spare {
			n := len(in.MessageAttributes)
			for _, name := range names {
				delete(in.MessageAttributes, name)
			}
			if len(in.MessageAttributes) == n {
				continue
			}
			if _, err = e.Requeue.API.SendMessage(ctx, in); err == nil || !queue.IsInvalidParameter(err) {
				break
			}
		}
	}
	// Said once, by the send that went: a send refused and tried again
	// would say it again at each try.
	if _, kept := in.MessageAttributes[sqsworker.AttrPriorAttempts]; err == nil && !kept && prior > 0 {
		j.log(e).Warn("no room in the waiting copy for its prior attempts (the job's body and attributes, or the queue's MaximumMessageSize, take it): its count of attempts starts again",
			"message_id", m.ID, "prior_attempts", prior)
	}
	if err != nil {
		return fmt.Errorf("sending a waiting copy of message %s to %s: %w", m.ID, e.Requeue.URL, err)
	}
	e.Counters.Requeued.Add(1)
	return nil
}

// withoutDelayAttributes returns m, or a copy of it without the attributes
// of a delay, for its dead-letter copy: a replay runs at once, with fresh
// attempts.
func withoutDelayAttributes(m *sqsworker.Message) *sqsworker.Message {
	_, nb := m.MessageAttributes[sqsworker.AttrNotBefore]
	_, pa := m.MessageAttributes[sqsworker.AttrPriorAttempts]
	if !nb && !pa {
		return m
	}
	c := *m
	c.MessageAttributes = maps.Clone(m.MessageAttributes)
	delete(c.MessageAttributes, sqsworker.AttrNotBefore)
	delete(c.MessageAttributes, sqsworker.AttrPriorAttempts)
	return &c
}

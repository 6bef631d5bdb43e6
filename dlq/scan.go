package dlq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/ctxsleep"
	"github.com/sqsworker/sqsworker/internal/fifoattempt"
)

// DefaultVisibility is the visibility timeout with which scans and replays
// receive messages, unless configured otherwise.
const DefaultVisibility = 30 * time.Second

const (
	// receiveWait is the long-poll time of each receive, in seconds: a
	// long poll asks every SQS server, where a short poll samples some.
	receiveWait = 1
	// receiveTimeout bounds one receive, which waits a second for
	// messages. It only ends a receive whose connection has hung; such a
	// receive is counted as lost (see Coverage.LostReceives).
	receiveTimeout = 2 * time.Minute
	// releaseTimeout bounds the release of held messages, which runs even
	// after the operation was interrupted.
	releaseTimeout = 15 * time.Second
	// maxReceiveFailures is how many receives in a row may fail before a
	// scan gives up.
	maxReceiveFailures = 5
	// maxComebacks is how many receives in a row may bring back only
	// messages already held before the scan takes the queue for drained.
	maxComebacks = 3
	// lostMargin is how long after a lost receive's messages become
	// visible again the scan looks for them.
	lostMargin = time.Second
	// holdSlack keeps a hide clear of SQS's 12 hours: they are counted from
	// when the receive was sent, SQS counts from when the change arrives.
	holdSlack = time.Minute
)

// ScanConfig is what [Queue.Scan] reads. The zero value reads every message
// with the default visibility timeout.
type ScanConfig struct {
	// Filter selects the messages the result lists; every message read
	// counts in Scanned. Default: every message.
	Filter Filter
	// Max stops the scan once it has read this many messages. Default 0:
	// no limit.
	Max int
	// Visibility is the visibility timeout of the messages while the scan
	// holds them: whole seconds from 1s to 12h. Default [DefaultVisibility].
	// When the scan ends they are all made visible again at once. A scan
	// that lasts longer hides them again before it runs out (see
	// [Queue.Scan]).
	Visibility time.Duration
	// Until, when set, is called with each matching message; the scan stops
	// after the first for which it returns true (to look one message up).
	Until func(*Message) bool
	// Progress, when set, is called after each receive with the messages
	// read so far and those that matched.
	Progress func(Progress)
}

// ScanResult is what a scan read.
type ScanResult struct {
	// Messages are the messages that matched the filter, ordered by
	// [SortMessages].
	Messages []*Message
	// Scanned is the number of messages read, matching or not.
	Scanned int
	// Duplicates counts the messages listed that are copies of the same
	// job as a message read before them (see [Message.DuplicateOf]).
	Duplicates int
	// Truncated is true when the scan stopped at ScanConfig.Max.
	Truncated bool
	// Coverage says how much of the queue the scan saw.
	Coverage Coverage
}

// Coverage says how much of a queue a scan or a replay saw, next to the
// queue's own approximate count.
type Coverage struct {
	// Seen is the number of distinct messages received.
	Seen int `json:"seen"`
	// Approximate is the queue's ApproximateNumberOfMessages plus
	// ApproximateNumberOfMessagesNotVisible when the scan started: -1 when
	// they could not be read.
	Approximate int `json:"approximate"`
	// Complete is true when the scan read until the queue had no more
	// visible messages: it was not stopped by a limit, a lookup or an
	// interruption.
	Complete bool `json:"complete"`
	// LostReceives counts the receives that failed after SQS may have
	// handed them messages (a connection broken during the response, a
	// receive that hung): those messages stay hidden for the visibility
	// timeout. The scan waits for them to come back before it ends.
	LostReceives int `json:"lostReceives,omitempty"`
	// HiddenUntil is when messages a lost receive hid become visible again,
	// when the scan ended before (it was interrupted or stopped early);
	// zero otherwise.
	HiddenUntil time.Time `json:"hiddenUntil,omitzero"`
	// FIFO is true for a FIFO queue, of which a scan sees only the messages
	// at the head of each message group.
	FIFO bool `json:"-"`
}

// Shortfall says, in a sentence without a capital or a full stop, how the
// scan fell short of the queue's approximate count, or of messages that a
// lost receive hid: "saw 65 of about 75 messages; ...". It is empty when
// the scan saw at least as many messages as the queue had.
func (c Coverage) Shortfall() string {
	lost := ""
	if !c.HiddenUntil.IsZero() {
		lost = fmt.Sprintf("%d receive(s) lost their response on the way, and the messages SQS had handed them stay hidden until %s", c.LostReceives, c.HiddenUntil.Format(time.TimeOnly))
	}
	if !c.Complete || c.Approximate < 0 || c.Seen >= c.Approximate {
		return lost
	}
	s := fmt.Sprintf("saw %d of about %d messages", c.Seen, c.Approximate)
	switch {
	case lost != "":
		return s + ": " + lost + "; run again after that"
	case c.FIFO:
		return s + ": on a FIFO queue only the first messages of each message group can be read while the group's earlier ones are held"
	}
	return s + ": the others were in flight (received by another consumer, or by an earlier read still hiding them) or SQS's count is ahead; run again once they are visible"
}

// validateVisibility checks a visibility timeout.
func validateVisibility(d time.Duration) error {
	if d < time.Second || d > 12*time.Hour || d%time.Second != 0 {
		return fmt.Errorf("visibility timeout %s: want a whole number of seconds from 1s to 12h", d)
	}
	return nil
}

// Scan reads the queue's messages and releases them. SQS has no peek: the
// messages are received with the visibility timeout of cfg.Visibility, up
// to ten at a time, until no more come (or cfg.Max, or cfg.Until); then
// they are all made visible again at once (ChangeMessageVisibilityBatch to
// 0), even when ctx ends. Meanwhile other consumers of the queue do not see
// them, and each read counts as a receive. A scan that outlasts the
// visibility timeout (thousands of messages, a slow endpoint) hides the
// messages it holds again when half of it is left, for the visibility
// timeout or three times as long as the scan has run, whichever is longer:
// should the process die, they stay hidden up to that long.
//
// A receive is never cut short: ctx is looked at between receives. A
// receive that fails after SQS may have handed it messages is not retried
// blindly; its messages come back after the visibility timeout, and the
// scan waits for them before it ends (see [Coverage]).
//
// When ctx ends the scan stops between two receives and returns an error
// that matches [ErrInterrupted] and ctx's error, with what it read.
//
// Each message with failure metadata is checked: see [Message.Unverified].
// A message that is a copy of the same job as one read before it is marked:
// see [Message.DuplicateOf].
func (q *Queue) Scan(ctx context.Context, cfg ScanConfig) (res *ScanResult, err error) {
	if cfg.Visibility == 0 {
		cfg.Visibility = DefaultVisibility
	}
	var errs []error
	if err := validateVisibility(cfg.Visibility); err != nil {
		errs = append(errs, err)
	}
	if cfg.Max < 0 {
		errs = append(errs, fmt.Errorf("max %d: want 0 (no limit) or more", cfg.Max))
	}
	if err := cfg.Filter.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("dlq: Scan: %w", errors.Join(errs...))
	}
	s := q.newScanner(ctx, cfg.Visibility)
	res = &ScanResult{}
	seen := map[string]string{} // jobIdentity: ID of the first copy read
	defer func() {
		if rerr := s.release(ctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
		res.Coverage = s.coverage()
	}()
	for {
		n := 10
		if cfg.Max > 0 {
			if res.Scanned >= cfg.Max {
				res.Truncated = true
				break
			}
			n = min(n, cfg.Max-res.Scanned)
		}
		fresh, drained, err := s.receive(ctx, n)
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %d message(s) read from %s: %w", ErrInterrupted, res.Scanned, q.Name, err)
			}
			return res, err
		}
		if drained {
			s.complete = true
			break
		}
		stop := false
		for _, raw := range fresh {
			m := newMessage(q.URL, raw)
			s.hold(m.ID, m.ReceiptHandle)
			if stop {
				continue
			}
			res.Scanned++
			q.verify(ctx, m)
			dup := markDuplicate(seen, m)
			if cfg.Filter.Match(m) {
				if dup {
					res.Duplicates++
				}
				res.Messages = append(res.Messages, m)
				stop = cfg.Until != nil && cfg.Until(m)
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(Progress{Scanned: res.Scanned, Matched: len(res.Messages)})
		}
		if stop {
			break
		}
	}
	SortMessages(res.Messages)
	return res, nil
}

// verify sets m.Unverified when its failure metadata cannot be trusted.
func (q *Queue) verify(ctx context.Context, m *Message) {
	if !m.HasFailure {
		return
	}
	if m.RedriveSource != "" {
		from := m.RedriveSource
		if a, err := ParseARN(from); err == nil {
			from = a.Name
		}
		m.Unverified = fmt.Sprintf("SQS's redrive moved it here from %s: no sqsworker runtime dead-lettered it, so its failure metadata came with it (from an earlier failure, or from whoever sent it)", from)
		return
	}
	if m.Failure.SourceQueue == "" {
		m.Unverified = "its failure metadata names no source queue"
		return
	}
	_, reason, err := q.source(ctx, m.Failure.SourceQueue)
	switch {
	case err != nil:
		m.Unverified = fmt.Sprintf("its source queue could not be checked: %v", err)
	case reason != "":
		m.Unverified = reason
	}
}

// scanner receives messages from a queue and keeps the ones it does not
// delete until release makes them visible again, all at once. A message
// received a second time (its visibility timeout ran out while held) is
// recognised by its ID; the latest receipt handle is kept.
type scanner struct {
	q          *Queue
	visibility time.Duration
	held       map[string]heldMsg   // by message ID
	seen       map[string]time.Time // message ID -> when its latest receive was sent
	approx     int
	complete   bool
	lost       int
	lostUntil  time.Time         // when the messages of lost receives are visible again; zero when none are pending
	failures   int               // receives failed in a row
	comebacks  int               // receives in a row that brought back held messages only
	attempt    fifoattempt.Retry // FIFO: the ReceiveRequestAttemptId of the receive being retried
	start      time.Time         // when the scan started
	// hiddenUntil is the earliest time a held message may become visible
	// again: keepHidden hides them all again before. Zero when none are
	// held.
	hiddenUntil time.Time
}

func (q *Queue) newScanner(ctx context.Context, visibility time.Duration) *scanner {
	s := &scanner{q: q, visibility: visibility, held: map[string]heldMsg{}, seen: map[string]time.Time{}, approx: -1, start: q.now()}
	if c, err := q.Counts(ctx); err == nil {
		s.approx = c.Visible + c.InFlight
	} else {
		q.log.Warn("dlq: the queue's message counts could not be read: a scan cannot be compared with them", "queue", q.URL, "error", err)
	}
	return s
}

func (s *scanner) coverage() Coverage {
	c := Coverage{Seen: len(s.seen), Approximate: s.approx, Complete: s.complete, LostReceives: s.lost, FIFO: s.q.FIFO}
	if s.lostUntil.After(s.q.now()) {
		c.HiddenUntil = s.lostUntil
	}
	return c
}

// noRetry makes the SDK try a receive once: an SDK retry of a receive
// whose response was lost would hide the messages SQS handed the first
// attempt, silently. The scanner retries itself, and accounts for them.
func noRetry(o *sqs.Options) { o.RetryMaxAttempts = 1 }

// receive receives up to n (1..10) messages and returns those not received
// before. drained is true when the queue has no more visible messages: a
// receive came back empty, or with messages already received only, and no
// lost receive's messages are still to come back. err is a fatal error, a
// receive that kept failing, or ctx's error (looked at between receives).
func (s *scanner) receive(ctx context.Context, n int) (fresh []types.Message, drained bool, err error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		s.keepHidden(ctx)
		sent := s.q.now()
		out, err := s.receiveOnce(ctx, n)
		if err != nil {
			if IsFatal(err) {
				return nil, false, fmt.Errorf("dlq: receiving from %s: %w", s.q.Name, err)
			}
			s.failures++
			if awserr.MayHaveReceived(err) {
				s.lost++
				s.lostUntil = later(s.lostUntil, s.q.now().Add(s.visibility))
				s.q.log.Warn("dlq: a receive failed after SQS may have handed it messages: they stay hidden for the visibility timeout, and the scan waits for them",
					"queue", s.q.URL, "until", s.lostUntil, "error", err)
			}
			if s.failures >= maxReceiveFailures {
				return nil, false, fmt.Errorf("dlq: receiving from %s: %d attempts in a row failed, the last: %w", s.q.Name, s.failures, err)
			}
			if err := sleep(ctx, time.Duration(s.failures)*time.Second); err != nil {
				return nil, false, err
			}
			continue
		}
		s.failures = 0
		s.attempt.Done()
		if len(out.Messages) > 0 && (s.hiddenUntil.IsZero() || sent.Add(s.visibility).Before(s.hiddenUntil)) {
			s.hiddenUntil = sent.Add(s.visibility)
		}
		for _, m := range out.Messages {
			id := aws.ToString(m.MessageId)
			_, again := s.seen[id]
			s.seen[id] = sent
			if again {
				s.held[id] = heldMsg{receipt: aws.ToString(m.ReceiptHandle), at: sent}
				continue
			}
			fresh = append(fresh, m)
		}
		switch {
		case len(fresh) > 0:
			s.comebacks = 0
			return fresh, false, nil
		case len(out.Messages) > 0 && s.comebacks < maxComebacks:
			// Only messages already held came back: their visibility
			// timeout ran out while held (a slow replay, a retried
			// receive), and they may stand before unread ones. Hide them
			// all again and go on.
			s.comebacks++
			if err := s.hideHeld(ctx, s.holdFor()); err != nil {
				s.q.log.Warn("dlq: could not hide held messages again", "queue", s.q.URL, "error", err)
			}
			continue
		case !s.lostUntil.IsZero():
			if err := s.waitForLost(ctx); err != nil {
				return nil, false, err
			}
			continue
		}
		return nil, true, nil
	}
}

// receiveOnce makes one receive, which ctx does not cut short: SQS may hand
// messages to a receive whose caller has gone, and they would stay hidden
// for the visibility timeout.
func (s *scanner) receiveOnce(ctx context.Context, n int) (*sqs.ReceiveMessageOutput, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), receiveTimeout)
	defer cancel()
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(s.q.URL),
		MaxNumberOfMessages:         int32(min(max(n, 1), 10)),
		WaitTimeSeconds:             receiveWait,
		VisibilityTimeout:           int32(s.visibility / time.Second),
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	}
	if s.q.FIFO {
		// SQS answers a FIFO receive retried with the same attempt ID with
		// the messages of the first attempt, when it handed them any.
		in.ReceiveRequestAttemptId = aws.String(s.attempt.For(int(in.MaxNumberOfMessages), s.q.now()))
	}
	return s.q.api.ReceiveMessage(rctx, in, append(s.q.opts, noRetry)...) // opts is full: append copies
}

// waitForLost waits until the messages lost receives hid are visible again,
// keeping the messages held meanwhile hidden, so that the next receives
// find the lost ones and not those.
func (s *scanner) waitForLost(ctx context.Context) error {
	wait := s.lostUntil.Sub(s.q.now()) + lostMargin
	if wait > 0 {
		if err := s.hideHeld(ctx, wait+s.visibility); err != nil {
			s.q.log.Warn("dlq: could not keep held messages hidden while waiting for lost ones: they may be read twice", "queue", s.q.URL, "error", err)
		}
		s.q.log.Info("dlq: waiting for the messages a lost receive hid to become visible again", "queue", s.q.URL, "wait", wait.Round(time.Second))
		if err := sleep(ctx, wait); err != nil {
			return err
		}
	}
	s.lostUntil = time.Time{}
	return nil
}

// keepHidden hides the held messages again, before the first of them could
// become visible: when half the visibility timeout or less is left of it.
// A scan that outlasts the visibility timeout (thousands of messages, a
// slow endpoint) would otherwise receive its held messages again, counting
// a receive of each, and after a few receives of those only take the queue
// for read with messages still unread. They are hidden again for the
// visibility timeout or three times as long as the scan has run, whichever
// is longer, so that a long scan hides them again a few times only; release
// makes them visible at once when the scan ends (should the process die
// first, they come back then).
func (s *scanner) keepHidden(ctx context.Context) {
	now := s.q.now()
	if len(s.held) == 0 || s.hiddenUntil.IsZero() || s.hiddenUntil.Sub(now) > s.visibility/2 {
		return
	}
	if err := s.hideHeld(ctx, s.holdFor()); err != nil {
		s.q.log.Warn("dlq: could not keep held messages hidden: those whose visibility timeout runs out may be read twice", "queue", s.q.URL, "error", err)
	}
}

// holdFor is how long keepHidden hides the held messages again: the
// visibility timeout or three times as long as the scan has run, whichever
// is longer, at most 12 hours.
func (s *scanner) holdFor() time.Duration {
	return min(max(s.visibility, 3*s.q.now().Sub(s.start)), sqsworker.MaxVisibilityTimeout)
}

// hideHeld hides the held messages for d from now, each within SQS's 12
// hours from its receive, and notes when the first of them may become
// visible again (for keepHidden). Messages whose 12 hours leave less than
// the visibility timeout are left as they are: they come back, and are held
// again under a new receive.
func (s *scanner) hideHeld(ctx context.Context, d time.Duration) error {
	until, err := s.change(ctx, s.held, d)
	if err != nil {
		return err
	}
	if len(s.held) > 0 {
		s.hiddenUntil = until
	}
	return nil
}

// heldMsg is a message held until release: the receipt handle of its
// latest receive, and when that receive was sent.
type heldMsg struct {
	receipt string
	at      time.Time
}

// hold keeps a message until release.
func (s *scanner) hold(id, receipt string) {
	at, ok := s.seen[id]
	if !ok { // not received by this scan: the earliest it may have been
		at = s.start
	}
	s.held[id] = heldMsg{receipt: receipt, at: at}
}

// holdUntil is hold for a message hidden until at least until (zero: not
// known, as for hold): keepHidden hides the held messages again before
// then. A replay hides the rest of a receive's batch again as it goes (see
// replayer.secure), later than the receive: a message of it held after a
// keepHidden round would otherwise come back before the next round.
func (s *scanner) holdUntil(id, receipt string, until time.Time) {
	s.hold(id, receipt)
	if !until.IsZero() && (s.hiddenUntil.IsZero() || until.Before(s.hiddenUntil)) {
		s.hiddenUntil = until
	}
}

// forget drops a message that was deleted.
func (s *scanner) forget(id string) {
	delete(s.held, id)
	if len(s.held) == 0 {
		s.hiddenUntil = time.Time{}
	}
}

// release makes every held message visible again at once, ten per
// ChangeMessageVisibilityBatch call. It runs even when ctx is cancelled (an
// interrupted operation must not leave messages invisible).
func (s *scanner) release(ctx context.Context) error {
	if len(s.held) == 0 {
		return nil
	}
	_, err := s.change(ctx, s.held, 0)
	s.held = map[string]heldMsg{}
	s.hiddenUntil = time.Time{}
	if err != nil {
		return fmt.Errorf("dlq: releasing messages of %s (they become visible again after the visibility timeout, %s): %w", s.q.Name, s.visibility, err)
	}
	return nil
}

// change sets the visibility timeout of the held messages given, ten per
// ChangeMessageVisibilityBatch call. A visibility above 0 is kept within
// 12 hours from each message's receive, less holdSlack (SQS refuses more);
// a message that cannot be given the scan's visibility timeout that way is
// left out. until is the earliest a message changed becomes visible again
// (zero when none was). Entries whose message is no longer held by this
// receipt (deleted, or received again by someone else) are not errors.
func (s *scanner) change(ctx context.Context, held map[string]heldMsg, visibility time.Duration) (until time.Time, err error) {
	now := s.q.now()
	secs := make(map[string]int32, len(held))
	for id, h := range held {
		d := visibility
		if d > 0 {
			room := h.at.Add(sqsworker.MaxVisibilityTimeout - holdSlack).Sub(now)
			if room < min(d, s.visibility) {
				continue
			}
			d = min(d, room)
		}
		sec := int32(min((d+time.Second-1)/time.Second, sqsworker.MaxVisibilityTimeout/time.Second))
		secs[id] = sec
		if u := now.Add(time.Duration(sec) * time.Second); until.IsZero() || u.Before(until) {
			until = u
		}
	}
	if len(secs) == 0 {
		return until, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	ids := make([]string, 0, len(secs))
	for id := range secs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var errs []error
	for start := 0; start < len(ids); start += 10 {
		in := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.q.URL)}
		for i, id := range ids[start:min(start+10, len(ids))] {
			in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(held[id].receipt), VisibilityTimeout: secs[id],
			})
		}
		out, err := s.q.api.ChangeMessageVisibilityBatch(ctx, in, s.q.opts...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range out.Failed {
			if !staleReceipt(f) {
				errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
			}
		}
	}
	return until, errors.Join(errs...)
}

// staleReceipt reports whether a visibility change failed because its
// receipt handle no longer holds the message (deleted, visible again, or
// received again since), not for a fault of the request: SQS's
// ReceiptHandleIsInvalid and MessageNotInflight, and its
// InvalidParameterValue that names the ReceiptHandle ("Value … for
// parameter ReceiptHandle is invalid. Reason: Message does not exist or is
// not available for visibility timeout change.").
func staleReceipt(f types.BatchResultErrorEntry) bool {
	return staleCode(aws.ToString(f.Code), aws.ToString(f.Message))
}

// staleCode is staleReceipt of an error's code and message, a batch
// entry's or a call's.
func staleCode(code, message string) bool {
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight":
		return true
	case "InvalidParameterValue":
		return strings.Contains(message, "ReceiptHandle")
	}
	return false
}

// sleep waits for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if !ctxsleep.Sleep(ctx, d) {
		return ctx.Err()
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

package dlq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker/internal/awserr"
)

// ErrPurgeInProgress is matched (with errors.Is) by the error of
// [Queue.Purge] when the queue was purged less than 60 seconds ago: SQS
// allows one purge a minute.
var ErrPurgeInProgress = errors.New("purged less than 60 seconds ago; SQS allows one purge a minute")

// PurgeConfig is how [Queue.Purge] purges.
type PurgeConfig struct {
	// Audit records the purge before it is sent to SQS (and, if SQS
	// refuses it, the refusal). An error of Audit.Record cancels the purge.
	Audit Audit
}

// Purge deletes every message of the dead-letter queue with SQS's
// PurgeQueue: there is no undo. It needs a client that implements
// [Purger]. SQS may take up to 60 seconds to delete the messages.
//
// When the reply to PurgeQueue is lost, SQS has purged the queue and the
// SDK's retry of the request is answered PurgeQueueInProgress: that purge
// is this one, and Purge returns nil (with a warning in the log). A retry
// so answered after attempts that SQS cannot have applied (refused with an
// error response, such as throttling, or a connection never made) meets
// another purge, made within the minute: that is [ErrPurgeInProgress], as
// for a first attempt so answered.
//
// A purge that fails after an attempt SQS may have applied (sent, and its
// answer lost, timed out or cut short by ctx: Ctrl-C during the call)
// returns an error that says the queue may have been purged all the same,
// and its [ActionPurgeFailed] record says so; that record is written even
// when ctx was cancelled.
func (q *Queue) Purge(ctx context.Context, cfg PurgeConfig) error {
	p, ok := q.api.(Purger)
	if !ok {
		return &unsupportedError{op: "PurgeQueue"}
	}
	approx := -1
	if c, err := q.Counts(ctx); err == nil {
		approx = c.Visible + c.InFlight + c.Delayed
	}
	rec := AuditRecord{Action: ActionPurge, DLQ: q.URL, ApproximateMessages: max(approx, 0)}
	if approx < 0 {
		rec.Note = "the message count could not be read"
	}
	if err := cfg.Audit.record(ctx, rec); err != nil {
		return fmt.Errorf("dlq: not purged: the audit record failed: %w", err)
	}
	var attempts atomic.Int32
	var applied atomic.Bool // an attempt failed in a way SQS may have applied
	opts := append(slices.Clip(q.opts), countAttempts(&attempts, &applied))
	if _, err := p.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(q.URL)}, opts...); err != nil {
		if isPurgeInProgress(err) && attempts.Load() > 1 && applied.Load() {
			// An earlier attempt of this request was sent and its reply
			// lost (or failed after SQS applied it): the purge under way is
			// this one.
			q.log.Warn("dlq: a retry of PurgeQueue was told a purge is under way: the reply to an earlier attempt was lost, the queue is being purged",
				"queue", q.Name, "attempts", attempts.Load())
			return nil
		}
		if isPurgeInProgress(err) {
			err = fmt.Errorf("%s: %w", q.Name, ErrPurgeInProgress)
		} else if u := unsupported("PurgeQueue", "", err); u != nil {
			err = u
		} else {
			err = fmt.Errorf("dlq: purging %s: %w", q.Name, err)
		}
		if applied.Load() && !errors.Is(err, ErrPurgeInProgress) {
			// Sent, and not answered (a lost answer, a timeout, Ctrl-C
			// during the call): SQS may have purged the queue.
			err = &maybePurgedError{err}
		}
		rec.Action, rec.Note = ActionPurgeFailed, err.Error()
		// Recorded even when ctx was cancelled during the call (Ctrl-C),
		// within a bound of its own.
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.moveTimeout)
		defer cancel()
		if aerr := cfg.Audit.record(actx, rec); aerr != nil {
			err = errors.Join(err, fmt.Errorf("dlq: the audit record of the failure failed: %w", aerr))
		}
		return err
	}
	return nil
}

// maybePurgedError is the failure of a purge that SQS may have applied all
// the same: an attempt was sent and its answer lost or cut short.
type maybePurgedError struct{ err error }

func (e *maybePurgedError) Error() string {
	return e.err.Error() + "; SQS may have purged the queue all the same (the request was sent and not answered): read its count before purging again"
}

func (e *maybePurgedError) Unwrap() error { return e.err }

// PurgeWarning is what a confirmation of a purge of q says before it asks
// for the queue's name: how many messages go, from the queue's counts read
// now ("every message" when they cannot be read), and, when q is the
// dead-letter queue of several source queues, that the dead letters of
// every one of them go, each named, as in "Purging deletes about 2 visible
// and 0 in-flight message(s) of orders-dlq, the dead letters of all 2 of
// its source queues (orders, payments), for good." The CLI's prompt and
// the web UI's purge panel both show it.
func (q *Queue) PurgeWarning(ctx context.Context) string {
	count := "every message"
	if c, err := q.Counts(ctx); err == nil {
		count = fmt.Sprintf("about %d visible and %d in-flight message(s)", c.Visible, c.InFlight)
	}
	of := q.Name
	if len(q.Sources) > 1 { // a dead-letter queue shared by several sources
		names := q.sourceNames()
		of = fmt.Sprintf("%s, the dead letters of all %d of its source queues (%s),", q.Name, len(names), strings.Join(names, ", "))
	}
	return fmt.Sprintf("Purging deletes %s of %s for good.", count, of)
}

// isPurgeInProgress reports whether err is SQS's PurgeQueueInProgress.
func isPurgeInProgress(err error) bool {
	var inProgress *types.PurgeQueueInProgress
	var api smithy.APIError
	return errors.As(err, &inProgress) || (errors.As(err, &api) && api.ErrorCode() == "AWS.SimpleQueueService.PurgeQueueInProgress")
}

// countAttempts is an option of an SQS call that counts the attempts the
// SDK's retryer sends of it into n, and sets applied when one fails in a
// way SQS may have applied it (see awserr.MayHaveApplied).
func countAttempts(n *atomic.Int32, applied *atomic.Bool) func(*sqs.Options) {
	return func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			// The end of the finalize step is inside the retry loop: once per
			// attempt.
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("dlqCountAttempts",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					n.Add(1)
					out, md, err := next.HandleFinalize(ctx, in)
					if err != nil && awserr.MayHaveApplied(err) {
						applied.Store(true)
					}
					return out, md, err
				}), middleware.After)
		})
	}
}

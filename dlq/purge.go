package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
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
	if _, err := p.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(q.URL)}, q.opts...); err != nil {
		var inProgress *types.PurgeQueueInProgress
		var api smithy.APIError
		if errors.As(err, &inProgress) || (errors.As(err, &api) && api.ErrorCode() == "AWS.SimpleQueueService.PurgeQueueInProgress") {
			err = fmt.Errorf("%s: %w", q.Name, ErrPurgeInProgress)
		} else if u := unsupported("PurgeQueue", "", err); u != nil {
			err = u
		} else {
			err = fmt.Errorf("dlq: purging %s: %w", q.Name, err)
		}
		rec.Action, rec.Note = ActionPurgeFailed, err.Error()
		if aerr := cfg.Audit.record(ctx, rec); aerr != nil {
			err = errors.Join(err, fmt.Errorf("dlq: the audit record of the failure failed: %w", aerr))
		}
		return err
	}
	return nil
}

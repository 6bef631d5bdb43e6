package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/awserr"
)

// ErrNotDeadLetterQueue is matched (with errors.Is) by the error of [Open]
// for a queue that does not look like a dead-letter queue: it has a redrive
// policy of its own, or no queue names it as its dead-letter queue. The
// error is a [*NotDeadLetterError] that says which.
var ErrNotDeadLetterQueue = errors.New("not a dead-letter queue")

// ErrCannotCheck is matched (with errors.Is) by the error of [Open] when
// it cannot tell whether a queue is a dead-letter queue: listing its
// sources failed (access denied, say). [Config.Force] opens it anyway.
var ErrCannotCheck = errors.New("its sources could not be listed")

// ErrUnsupported is matched (with errors.Is) by the errors of operations the
// SQS endpoint, or the client given to the package, does not implement: the
// message move tasks of [Queue.StartRedrive] on emulators, PurgeQueue on a
// client without it. The error says which operation and what the endpoint
// answered.
var ErrUnsupported = errors.New("not supported by this SQS endpoint")

// ErrInterrupted is matched (with errors.Is) by the error of a replay whose
// context ended: it stopped between two messages, moved none half-way, and
// released the messages it held.
var ErrInterrupted = errors.New("interrupted")

// ErrDeadLetterDestination is matched (with errors.Is) by the error of
// [Queue.Target], and so of a replay or redrive, for a destination that is
// itself a dead-letter queue: messages sent there would not run.
// [Config.Force] lets it through.
var ErrDeadLetterDestination = errors.New("the destination is a dead-letter queue")

// ErrSharedDestination is matched (with errors.Is) by the error of
// [Queue.PlanRedrive] and [Queue.StartRedrive] when [RedriveConfig.To] is
// one of several source queues of the dead-letter queue: a message move
// task moves every message, and would move the other sources' dead letters
// to a queue whose handler is not theirs. [Queue.Replay] with that
// destination moves only the messages that failed there.
var ErrSharedDestination = errors.New("the destination is one of several sources of the dead-letter queue")

// ErrPriorAttempts is matched (with errors.Is) by the error of
// [Queue.StartRedrive] when messages of the dead-letter queue carry
// [sqsworker.AttrPriorAttempts], which a message move task would keep: the
// error is a [*PriorAttemptsError].
var ErrPriorAttempts = errors.New("messages carry the attempts of earlier copies")

// PriorAttemptsError is the refusal of [Queue.StartRedrive] to move
// messages that carry [sqsworker.AttrPriorAttempts] (see
// [RedriveConfig.Sample]). It matches [ErrPriorAttempts].
type PriorAttemptsError struct {
	// Queue is the dead-letter queue's name.
	Queue string
	// Sampled is the number of messages the sample read, Carrying the
	// number of those with the attribute.
	Sampled, Carrying int
}

// Error describes the refusal and the ways on.
func (e *PriorAttemptsError) Error() string {
	return fmt.Sprintf("%d of the %d message(s) read from %s carry %s (jobs that waited as copies for a long backoff): "+
		"a message move task keeps it, so they would come back counting their earlier attempts; "+
		"replay them instead, which leaves it out, or start the task with KeepAttempts",
		e.Carrying, e.Sampled, e.Queue, sqsworker.AttrPriorAttempts)
}

// Is makes the error match [ErrPriorAttempts].
func (e *PriorAttemptsError) Is(target error) bool { return target == ErrPriorAttempts }

// NotDeadLetterError is the error of [Open] for a queue that does not look
// like a dead-letter queue. It matches [ErrNotDeadLetterQueue].
type NotDeadLetterError struct {
	// Queue is the queue's URL.
	Queue string
	// Reason says why, in a sentence without a capital or a full stop.
	Reason string
	// DeadLetterQueue is the name of the queue's own dead-letter queue,
	// from its redrive policy: most likely the queue that was meant. Empty
	// when it has none.
	DeadLetterQueue string
}

// Error describes the refusal.
func (e *NotDeadLetterError) Error() string {
	return fmt.Sprintf("%s is not a dead-letter queue: %s; receiving from a live queue would consume its messages, and purging it would lose them",
		queueName(e.Queue), e.Reason)
}

// Is makes the error match [ErrNotDeadLetterQueue].
func (e *NotDeadLetterError) Is(target error) bool { return target == ErrNotDeadLetterQueue }

// QueueMissingError says that a queue does not exist. It wraps the SDK's
// error.
type QueueMissingError struct {
	// Queue is the queue as it was given: a name, a URL or an ARN.
	Queue string
	// Err is the SDK's error.
	Err error
}

// Error says which queue does not exist.
func (e *QueueMissingError) Error() string { return fmt.Sprintf("queue %q does not exist", e.Queue) }

// Unwrap returns the SDK's error.
func (e *QueueMissingError) Unwrap() error { return e.Err }

// IsQueueMissing reports whether err says that a queue does not exist: a
// [*QueueMissingError], or the SDK's modeled error or error code for it.
func IsQueueMissing(err error) bool {
	var qm *QueueMissingError
	return errors.As(err, &qm) || awserr.IsQueueMissing(err)
}

// IsFatal reports whether err is one that no retry will fix: a missing
// queue, denied access, bad credentials, an invalid request. Network
// errors, throttling, server faults and cancelled contexts are not fatal.
// It classifies by modeled error types and error codes, never by message
// text.
func IsFatal(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var qm *QueueMissingError
	return errors.As(err, &qm) || awserr.IsFatal(err)
}

// unsupportedCodes are the error codes with which an endpoint says it does
// not know an operation at all: fauxqs and ElasticMQ answer InvalidAction
// ("Unknown action: StartMessageMoveTask"), other emulators and proxies
// UnknownOperationException or NotImplemented.
var unsupportedCodes = map[string]bool{
	"InvalidAction":             true,
	"UnknownOperationException": true,
	"UnknownOperation":          true,
	"NotImplemented":            true,
}

// IsUnsupportedAction reports whether err is an SQS endpoint's answer to
// an action it lacks (the local emulators lack some).
func IsUnsupportedAction(err error) bool { return unsupported("", "", err) != nil }

// unsupported returns err as an [ErrUnsupported] error when its code says
// the endpoint lacks op, else nil. what names the feature, "" for op alone.
func unsupported(op, what string, err error) error {
	var api smithy.APIError
	if errors.As(err, &api) && unsupportedCodes[api.ErrorCode()] {
		return &unsupportedError{op: op, what: what, code: api.ErrorCode(), msg: api.ErrorMessage(), err: err}
	}
	return nil
}

// unsupportedError is an operation the endpoint or the client lacks.
type unsupportedError struct {
	op, what, code, msg string
	err                 error // nil when the client lacks the method
}

func (e *unsupportedError) Error() string {
	what := e.what
	if what == "" {
		what = e.op
	}
	if e.err == nil {
		return fmt.Sprintf("the SQS client given does not implement %s, so %s is not supported", e.op, what)
	}
	return fmt.Sprintf("this SQS endpoint does not support %s (%s answered %s: %s)", what, e.op, e.code, e.msg)
}

func (e *unsupportedError) Is(target error) bool { return target == ErrUnsupported }
func (e *unsupportedError) Unwrap() error        { return e.err }

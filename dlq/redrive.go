package dlq

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// moveTasks names the feature of an unsupported move task call.
const moveTasks = "message move tasks"

// RedriveConfig is how [Queue.PlanRedrive] and [Queue.StartRedrive] start
// SQS's own redrive.
type RedriveConfig struct {
	// To is the queue (name, URL or ARN) to move every message to. Default
	// "": SQS moves each message back to the queue its redrive moved it
	// from. Messages SQS's redrive did not move (such as the copies the
	// runtimes dead-letter, which carry their source in their failure
	// metadata instead) have no such queue: give To, or use [Queue.Replay].
	To string
	// PerSecond is the task's rate: 1 to 500 messages per second. Default
	// 0: SQS's choice.
	PerSecond int
	// Audit records the task once it is started.
	Audit Audit
	// Sample is how many messages [Queue.PlanRedrive] and
	// [Queue.StartRedrive] read before the task, to count those that
	// carry [sqsworker.AttrPriorAttempts]. Default 0: none are read.
	//
	// SQS documents of a moved message only its new ID and enqueue time,
	// no message attribute a move task drops; taking it that the task
	// keeps them all (as sqstest's Fake does), a job that waited as a copy
	// for a backoff longer than 12 hours carries the attempts of its
	// earlier copies in that attribute, and redriven it comes back
	// counting them (a long backoff, a high attempt number, a retry limit
	// reached at its first failure). [Queue.Replay]
	// leaves the attribute out. The sample is a [Queue.Scan] with a short
	// visibility timeout ([SampleVisibility]), whose messages are all made
	// visible again before the task starts, so that the task moves them:
	// StartRedrive does not start while a receive that lost its reply may
	// still hide some. It counts as a receive of each message read. It is
	// skipped on a queue with a redrive policy of its own (opened with
	// [Config.Force]), whose receives would count against that policy, and
	// while a move task of the queue runs (it would hide messages from
	// that task, and SQS starts no other meanwhile).
	Sample int
	// KeepAttempts makes [Queue.StartRedrive] start the task even though
	// sampled messages carry [sqsworker.AttrPriorAttempts]. Default false:
	// it refuses with an error that matches [ErrPriorAttempts].
	KeepAttempts bool
}

// SampleVisibility is the visibility timeout of the messages a redrive's
// sample reads (see [RedriveConfig.Sample]) until it releases them.
const SampleVisibility = 5 * time.Second

// RedrivePlan is what a redrive does: a dry run's plan, or a started task.
type RedrivePlan struct {
	// DLQ is the dead-letter queue's ARN.
	DLQ string `json:"dlq"`
	// Destination is the --to queue; nil for the source queues.
	Destination *Target `json:"destination,omitempty"`
	// Sources are the URLs of the queues that send their dead letters to
	// the dead-letter queue, as [Open] found them.
	Sources []string `json:"sources,omitempty"`
	// Approximate is the dead-letter queue's approximate number of
	// messages (visible and in flight); -1 when it could not be read.
	Approximate int `json:"approximateMessages"`
	// PerSecond is the rate asked for (0: SQS's choice).
	PerSecond int `json:"perSecond,omitempty"`
	// Running are the move tasks of the queue that are running: SQS runs
	// one at a time per queue.
	Running []MoveTask `json:"running,omitempty"`
	// TaskHandle is the started task's handle; empty in a plan.
	TaskHandle string `json:"taskHandle,omitempty"`
	// Sampled is the number of messages the sample read (see
	// [RedriveConfig.Sample]); PriorAttempts is the number of those that
	// carry [sqsworker.AttrPriorAttempts], which a move task keeps.
	Sampled       int `json:"sampled"`
	PriorAttempts int `json:"priorAttempts"`
	// NoSource is the number of messages the sample read that SQS's own
	// redrive did not move there (no DeadLetterQueueSourceArn: copies the
	// runtimes sent), when no destination is given: a move task without
	// one fails on them.
	NoSource int `json:"noSource"`
	// Duplicates is the number of sampled messages that are copies of a
	// job read before them in the sample (see [Message.DuplicateOf]): a
	// move task moves every copy, where [Queue.Replay] moves one.
	Duplicates int `json:"duplicates,omitempty"`
	// SampleNote says why no sample was read, or how it fell short; empty
	// when it read what it was asked to, or when none was asked for.
	SampleNote string `json:"sampleNote,omitempty"`
}

// MoveTask is an SQS message move task.
type MoveTask struct {
	// TaskHandle identifies a running task (to cancel it); empty once it
	// ended.
	TaskHandle string `json:"taskHandle,omitempty"`
	// Status is RUNNING, COMPLETED, CANCELLING, CANCELLED or FAILED.
	Status string `json:"status"`
	// Started is when the task started.
	Started time.Time `json:"started,omitzero"`
	// Moved is the approximate number of messages moved so far.
	Moved int64 `json:"moved"`
	// ToMove is the approximate number of messages to move, when known.
	ToMove *int64 `json:"toMove,omitempty"`
	// Destination is the ARN of the queue the task moves to; empty for
	// the source queues.
	Destination string `json:"destination,omitempty"`
	// PerSecond is the task's rate, when one was set.
	PerSecond *int32 `json:"ratePerSecond,omitempty"`
	// FailureReason says why a FAILED task failed.
	FailureReason string `json:"failureReason,omitempty"`
}

// PlanRedrive is the dry run of [Queue.StartRedrive]: it checks that the
// endpoint has message move tasks (ListMessageMoveTasks), resolves the
// destination, and returns what the task would move, starting nothing.
// An endpoint without move tasks (such as the fauxqs emulator) is an
// [ErrUnsupported] error.
func (q *Queue) PlanRedrive(ctx context.Context, cfg RedriveConfig) (*RedrivePlan, error) {
	if cfg.PerSecond < 0 || cfg.PerSecond > 500 {
		return nil, fmt.Errorf("dlq: rate %d: SQS accepts 1 to 500 messages per second (0: its own choice)", cfg.PerSecond)
	}
	p := &RedrivePlan{DLQ: q.ARN, Sources: q.Sources, PerSecond: cfg.PerSecond, Approximate: -1}
	if cfg.To != "" {
		t, err := q.Target(ctx, cfg.To)
		if err != nil {
			return nil, fmt.Errorf("dlq: destination: %w", err)
		}
		if err := q.checkShared(ctx, t); err != nil {
			return nil, err
		}
		p.Destination = &t
	}
	tasks, err := q.Redrives(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range tasks {
		if t.Status == "RUNNING" {
			p.Running = append(p.Running, t)
		}
	}
	err = q.sample(ctx, cfg, p)
	if p.Approximate < 0 { // no sample read the counts
		if c, cerr := q.Counts(ctx); cerr == nil {
			p.Approximate = c.Visible + c.InFlight
		}
	}
	return p, err
}

// checkShared refuses a move task to t when t is one of several source
// queues of q: the task moves every message, the other sources' too.
func (q *Queue) checkShared(ctx context.Context, t Target) error {
	if q.SourcesFrom == SourcesUnknown {
		return nil
	}
	if _, reason, err := q.source(ctx, t.URL); err != nil {
		return fmt.Errorf("dlq: destination: %w", err)
	} else if reason != "" {
		return nil // not a source: the operator's own choice
	}
	ta, tn, _ := queueKey(t.URL)
	var names, others []string
	for _, s := range q.Sources {
		names = append(names, queueName(s))
		if a, n, _ := queueKey(s); s != t.URL && (a != ta || n != tn) {
			others = append(others, queueName(s))
		}
	}
	if len(others) == 0 {
		return nil
	}
	sort.Strings(names)
	sort.Strings(others)
	return fmt.Errorf("dlq: destination %s is one of the %d source queues of %s (%s): a message move task moves every message, and would move the dead letters of %s there too (%w); "+
		"redrive without a destination, which sends each message back to the queue SQS moved it from, or replay with this destination, which moves only the messages that failed in %s",
		t.Name, len(names), q.Name, strings.Join(names, ", "), strings.Join(others, ", "), ErrSharedDestination, t.Name)
}

// sample reads cfg.Sample messages and counts those that carry
// sqsworker.AttrPriorAttempts, releasing them all; see RedriveConfig.Sample.
func (q *Queue) sample(ctx context.Context, cfg RedriveConfig, p *RedrivePlan) error {
	switch {
	case cfg.Sample < 0:
		return fmt.Errorf("dlq: sample %d: want 0 (none) or more messages", cfg.Sample)
	case cfg.Sample == 0:
		return nil
	case q.RedrivePolicy != nil:
		p.SampleNote = "no sample read: the queue has a redrive policy of its own, which receives would count against"
		return nil
	case len(p.Running) > 0:
		p.SampleNote = "no sample read: a message move task is running, which the sample would hide messages from; no other starts until it ends"
		return nil
	}
	res, err := q.Scan(ctx, ScanConfig{Max: cfg.Sample, Visibility: SampleVisibility})
	if res != nil {
		p.Sampled, p.Approximate, p.Duplicates = res.Scanned, res.Coverage.Approximate, res.Duplicates
		for _, m := range res.Messages {
			if _, ok := m.MessageAttributes[sqsworker.AttrPriorAttempts]; ok {
				p.PriorAttempts++
			}
			if cfg.To == "" && m.RedriveSource == "" {
				p.NoSource++
			}
		}
		p.SampleNote = res.Coverage.Shortfall()
		if res.Truncated {
			p.SampleNote = ""
		}
	}
	if err != nil {
		return fmt.Errorf("dlq: reading a sample before the redrive: %w", err)
	}
	if !res.Coverage.HiddenUntil.IsZero() {
		return fmt.Errorf("dlq: a receive of the sample lost its reply: the messages SQS handed it stay hidden until %s, and a move task started now would leave them behind; run again after that",
			res.Coverage.HiddenUntil.Format(time.TimeOnly))
	}
	return nil
}

// StartRedrive starts an SQS message move task that moves every message of
// the dead-letter queue back to its source queue (or to cfg.To), after the
// checks of [Queue.PlanRedrive], and records it in cfg.Audit: before the
// call ([ActionRedriveStart]), then once started ([ActionRedrive], with the
// task's handle) or not ([ActionRedriveFailed]; a call whose reply was
// lost may have started the task). It returns at
// once with the task's handle; [Queue.Redrives] follows the task and
// [CancelRedrive] stops it.
func (q *Queue) StartRedrive(ctx context.Context, cfg RedriveConfig) (*RedrivePlan, error) {
	p, err := q.PlanRedrive(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if len(p.Running) > 0 {
		return p, fmt.Errorf("dlq: a message move task of %s is running already (%s): SQS runs one at a time; cancel it or wait", q.Name, p.Running[0].TaskHandle)
	}
	if p.PriorAttempts > 0 && !cfg.KeepAttempts {
		return p, &PriorAttemptsError{Queue: q.Name, Sampled: p.Sampled, Carrying: p.PriorAttempts}
	}
	if p.NoSource > 0 {
		return p, fmt.Errorf("dlq: not started: %d of the %d message(s) read were not moved to %s by SQS (copies the runtimes sent, which name their source queue in their failure metadata instead): a message move task without a destination fails on them; use `sqsworker dlq replay %s`, which sends each to the source queue its metadata names, or give a destination (--to)",
			p.NoSource, p.Sampled, q.Name, q.Name)
	}
	mt := q.api.(MoveTaskAPI) // PlanRedrive checked it
	in := &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(q.ARN)}
	if p.Destination != nil {
		in.DestinationArn = aws.String(p.Destination.ARN)
	}
	if cfg.PerSecond > 0 {
		in.MaxNumberOfMessagesPerSecond = aws.Int32(int32(cfg.PerSecond))
	}
	rec := AuditRecord{
		Action: ActionRedriveStart, DLQ: q.URL, Destination: aws.ToString(in.DestinationArn),
		ApproximateMessages: max(p.Approximate, 0), PerSecond: cfg.PerSecond,
	}
	// Recorded first: a task whose reply is lost, or a crash, leaves its
	// trace.
	if err := cfg.Audit.record(ctx, rec); err != nil {
		return p, fmt.Errorf("dlq: not started: the audit record failed: %w", err)
	}
	called := time.Now()
	out, err := mt.StartMessageMoveTask(ctx, in, q.opts...)
	// The outcome is recorded even if ctx ended meanwhile: the task may
	// run.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.moveTimeout)
	defer cancel()
	if err != nil {
		// An attempt applied whose reply was lost ends in an error too:
		// the reset itself, or SQS's refusal of the SDK's retry, a task
		// running already. The queue's tasks tell.
		if t, ok := q.taskSince(actx, mt, in, called); ok {
			p.TaskHandle = aws.ToString(t.TaskHandle)
			rec.Action, rec.TaskHandle = ActionRedrive, p.TaskHandle
			rec.Note = fmt.Sprintf("started, its reply lost (%v): ListMessageMoveTasks shows it %s", err, aws.ToString(t.Status))
			if err := cfg.Audit.record(actx, rec); err != nil {
				return p, fmt.Errorf("dlq: message move task %s started, but the audit record failed: %w", p.TaskHandle, err)
			}
			return p, nil
		}
		err = moveTaskError("StartMessageMoveTask", err)
		rec.Action, rec.Note = ActionRedriveFailed, "not started: "+err.Error()
		var api smithy.APIError
		if !errors.As(err, &api) {
			// No answer: the task may have started, its reply lost.
			err = fmt.Errorf("%w; the task may have started all the same, its reply lost: ListMessageMoveTasks shows it", err)
			rec.Note = "may have started: " + err.Error()
		}
		if aerr := cfg.Audit.record(actx, rec); aerr != nil {
			err = errors.Join(err, fmt.Errorf("dlq: the audit record of the failure failed: %w", aerr))
		}
		return p, err
	}
	p.TaskHandle = aws.ToString(out.TaskHandle)
	rec.Action, rec.TaskHandle = ActionRedrive, p.TaskHandle
	if err := cfg.Audit.record(actx, rec); err != nil {
		return p, fmt.Errorf("dlq: message move task %s started, but the audit record failed: %w", p.TaskHandle, err)
	}
	return p, nil
}

// taskSince returns the queue's message move task that in started at since
// or later (a few seconds of clocks allowed), by ListMessageMoveTasks:
// the task a call whose reply was lost started. ok is false when there is
// none, or the tasks cannot be listed.
func (q *Queue) taskSince(ctx context.Context, mt MoveTaskAPI, in *sqs.StartMessageMoveTaskInput, since time.Time) (t types.ListMessageMoveTasksResultEntry, ok bool) {
	out, err := mt.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(q.ARN), MaxResults: aws.Int32(10)}, q.opts...)
	if err != nil {
		return t, false
	}
	from := since.Add(-5 * time.Second).UnixMilli()
	for _, r := range out.Results {
		sameRate := in.MaxNumberOfMessagesPerSecond == nil || r.MaxNumberOfMessagesPerSecond == nil ||
			*r.MaxNumberOfMessagesPerSecond == *in.MaxNumberOfMessagesPerSecond
		if r.StartedTimestamp >= from && aws.ToString(r.DestinationArn) == aws.ToString(in.DestinationArn) && sameRate && aws.ToString(r.TaskHandle) != "" {
			return r, true
		}
	}
	return t, false
}

// Redrives lists the most recent message move tasks of the queue (up to
// 10), newest first.
func (q *Queue) Redrives(ctx context.Context) ([]MoveTask, error) {
	mt, ok := q.api.(MoveTaskAPI)
	if !ok {
		return nil, &unsupportedError{op: "ListMessageMoveTasks", what: moveTasks}
	}
	out, err := mt.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(q.ARN), MaxResults: aws.Int32(10)}, q.opts...)
	if err != nil {
		return nil, moveTaskError("ListMessageMoveTasks", err)
	}
	tasks := make([]MoveTask, 0, len(out.Results))
	for _, t := range out.Results {
		mt := MoveTask{
			TaskHandle: aws.ToString(t.TaskHandle), Status: aws.ToString(t.Status),
			Moved: t.ApproximateNumberOfMessagesMoved, ToMove: t.ApproximateNumberOfMessagesToMove,
			Destination: aws.ToString(t.DestinationArn), PerSecond: t.MaxNumberOfMessagesPerSecond,
			FailureReason: aws.ToString(t.FailureReason),
		}
		if t.StartedTimestamp > 0 {
			mt.Started = time.UnixMilli(t.StartedTimestamp).UTC()
		}
		tasks = append(tasks, mt)
	}
	return tasks, nil
}

// CancelRedrive cancels a running message move task, given its handle, and
// records it in audit. The messages already moved stay where they are; it
// returns how many, about.
func CancelRedrive(ctx context.Context, api API, handle string, audit Audit) (moved int64, err error) {
	mt, ok := api.(MoveTaskAPI)
	if !ok {
		return 0, &unsupportedError{op: "CancelMessageMoveTask", what: moveTasks}
	}
	out, err := mt.CancelMessageMoveTask(ctx, &sqs.CancelMessageMoveTaskInput{TaskHandle: aws.String(handle)}, sdkhttp.SQSOptions(api)...)
	if err != nil {
		return 0, moveTaskError("CancelMessageMoveTask", err)
	}
	if err := audit.record(ctx, AuditRecord{Action: ActionRedriveCancel, TaskHandle: handle, Note: fmt.Sprintf("about %d message(s) had been moved", out.ApproximateNumberOfMessagesMoved)}); err != nil {
		return out.ApproximateNumberOfMessagesMoved, fmt.Errorf("dlq: message move task %s cancelled, but the audit record failed: %w", handle, err)
	}
	return out.ApproximateNumberOfMessagesMoved, nil
}

// moveTaskError makes the error of a message move task call clear: a
// missing API says so (matching [ErrUnsupported]). It classifies by error
// code, never by message text.
func moveTaskError(op string, err error) error {
	if u := unsupported(op, moveTasks, err); u != nil {
		return u
	}
	return fmt.Errorf("dlq: %s: %w", op, err)
}

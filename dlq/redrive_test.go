package dlq

import (
	"context"
	"errors"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
)

// receiveJobs receives every visible message of url as the runtimes build
// them, by body.
func receiveJobs(t *testing.T, f *sqstest.Fake, url string) map[string]*sqsworker.Message {
	t.Helper()
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10,
		MessageAttributeNames: []string{"All"}, MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]*sqsworker.Message{}
	for i := range out.Messages {
		m := sqsmsg.FromSDK(url, &out.Messages[i])
		jobs[m.Body] = m
	}
	return jobs
}

// waitedJobs makes SQS's redrive (the fake's) move two jobs from orders to
// orders-dlq: one that waited as a copy for a long backoff, carrying 5
// earlier attempts, and one that did not.
func waitedJobs(t *testing.T, e *fakeEnv) {
	t.Helper()
	redrive(t, e.f, e.orders, "waited", map[string]sqsworker.MessageAttribute{
		sqsworker.AttrPriorAttempts: {DataType: "Number", StringValue: "5"},
	})
	redrive(t, e.f, e.orders, "plain", nil)
}

// A message move task keeps every message attribute (the Fake's does; SQS documents none it drops): a job
// that waited as a copy comes back counting its earlier attempts. The
// redrive's sample finds it, and the redrive refuses to start, starting
// nothing and recording nothing; the sample hides nothing from the task.
// With KeepAttempts the task moves both, the sampled messages included, and
// the job counts its old attempts; a replay instead brings it back fresh.
func TestRedriveRefusesPriorAttempts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	waitedJobs(t, e)
	q := openOrdersDLQ(t, e.f)
	var recs []AuditRecord
	audit := Audit{Record: func(_ context.Context, r AuditRecord) error { recs = append(recs, r); return nil }}

	reads := e.f.Calls(sqstest.OpGetQueueAttributes)
	p, err := q.PlanRedrive(ctx, RedriveConfig{Sample: 100})
	if err != nil || p.Sampled != 2 || p.PriorAttempts != 1 || p.SampleNote != "" || p.Approximate != 2 {
		t.Fatalf("plan: %v, %+v", err, p)
	}
	if n := e.f.Calls(sqstest.OpGetQueueAttributes) - reads; n != 1 {
		t.Errorf("the plan read the queue's attributes %d times, want once", n)
	}
	if p, err := q.PlanRedrive(ctx, RedriveConfig{}); err != nil || p.Sampled != 0 || p.Approximate != 2 {
		t.Fatalf("plan without a sample: %v, %+v", err, p)
	}
	e.wantDLQDepth(t, "after the plan's sample", 2, 0)

	p, err = q.StartRedrive(ctx, RedriveConfig{Sample: 100, Audit: audit})
	var pe *PriorAttemptsError
	if !errors.Is(err, ErrPriorAttempts) || !errors.As(err, &pe) || pe.Carrying != 1 || pe.Sampled != 2 || p == nil || p.TaskHandle != "" ||
		!strings.Contains(err.Error(), "1 of the 2 message(s) read from orders-dlq carry sqsworker.prior-attempts") {
		t.Fatalf("start: %v, %+v", err, p)
	}
	if n := e.f.Calls(sqstest.OpStartMessageMoveTask); n != 0 || len(recs) != 0 {
		t.Fatalf("refused, yet %d task(s) started, %d record(s)", n, len(recs))
	}
	e.wantDLQDepth(t, "after the refusal", 2, 0)

	p, err = q.StartRedrive(ctx, RedriveConfig{Sample: 100, KeepAttempts: true, Audit: audit})
	if err != nil || p.TaskHandle == "" || p.PriorAttempts != 1 || len(recs) != 2 {
		t.Fatalf("start with KeepAttempts: %v, %+v, %d record(s)", err, p, len(recs))
	}
	e.wantDLQDepth(t, "after the move", 0, 0)
	jobs := receiveJobs(t, e.f, e.orders)
	// The runtimes count the attempt as ReceiveCount plus PriorAttempts.
	if w, p := jobs["waited"], jobs["plain"]; w == nil || p == nil || w.ReceiveCount+w.PriorAttempts() != 6 || p.ReceiveCount+p.PriorAttempts() != 1 {
		t.Fatalf("moved back: %+v", jobs)
	}
}

// Replayed instead, the job that waited starts from its first attempt.
func TestReplayInsteadOfRedriveStartsFresh(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	waitedJobs(t, e)
	q := openOrdersDLQ(t, e.f)
	if res, err := q.Replay(context.Background(), ReplayConfig{}); err != nil || res.Moved != 2 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	jobs := receiveJobs(t, e.f, e.orders)
	if w := jobs["waited"]; w == nil || w.ReceiveCount+w.PriorAttempts() != 1 {
		t.Fatalf("replayed: %+v", jobs)
	}
}

// Without a sample the redrive reads nothing and starts the task; a sample
// whose receive lost its reply (its messages hidden for the sample's
// visibility timeout) does not start the task, which would leave them
// behind.
func TestRedriveSampleLostReceive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	e.deadLetterJobs(3)
	q := openOrdersDLQ(t, e.f)
	e.f.LoseReplies(sqstest.OpReceiveMessage, 1)
	p, err := q.StartRedrive(ctx, RedriveConfig{Sample: 1, To: "lonely"})
	if err == nil || !strings.Contains(err.Error(), "lost its reply") || p != nil || e.f.Calls(sqstest.OpStartMessageMoveTask) != 0 {
		t.Fatalf("start after a lost receive: %v, %+v", err, p)
	}
	receives := e.f.Calls(sqstest.OpReceiveMessage)
	if p, err := q.PlanRedrive(ctx, RedriveConfig{To: "lonely"}); err != nil || p.Sampled != 0 || e.f.Calls(sqstest.OpReceiveMessage) != receives {
		t.Fatalf("plan without a sample: %v, %+v", err, p)
	}
	if _, err := q.PlanRedrive(ctx, RedriveConfig{Sample: -1}); err == nil || !strings.Contains(err.Error(), "sample -1") {
		t.Errorf("sample -1: %v", err)
	}
}

// runningTask is the fake whose queue has a message move task running.
type runningTask struct{ *sqstest.Fake }

func (r runningTask) ListMessageMoveTasks(_ context.Context, in *sqs.ListMessageMoveTasksInput, _ ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error) {
	return &sqs.ListMessageMoveTasksOutput{Results: []types.ListMessageMoveTasksResultEntry{
		{TaskHandle: aws.String("running-1"), Status: aws.String("RUNNING"), SourceArn: in.SourceArn},
	}}, nil
}

// While a move task runs, a redrive (its dry run, or a start SQS would
// refuse) reads no sample: it would hide messages from the running task
// and count a receive of each, for nothing.
func TestRedriveNoSampleWhileTaskRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	waitedJobs(t, e)
	q := openOrdersDLQ(t, runningTask{e.f})
	before := e.f.Calls(sqstest.OpReceiveMessage)
	p, err := q.PlanRedrive(ctx, RedriveConfig{Sample: 100})
	if err != nil || len(p.Running) != 1 || p.Sampled != 0 || !strings.Contains(p.SampleNote, "running") {
		t.Fatalf("plan: %v, %+v", err, p)
	}
	p, err = q.StartRedrive(ctx, RedriveConfig{Sample: 100})
	if err == nil || !strings.Contains(err.Error(), "running already") || p == nil || p.Sampled != 0 {
		t.Fatalf("start: %v, %+v", err, p)
	}
	if n := e.f.Calls(sqstest.OpReceiveMessage) - before; n != 0 {
		t.Errorf("%d receive(s) while a move task runs", n)
	}
}

// lostStart is taskFake whose StartMessageMoveTask starts the task but
// loses its reply: the caller gets a reset connection.
type lostStart struct{ *taskFake }

func (l *lostStart) StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, opts ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	if _, err := l.taskFake.StartMessageMoveTask(ctx, in, opts...); err != nil {
		return nil, err
	}
	return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "StartMessageMoveTask",
		Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
}

// A redrive is recorded before its task is started: one whose reply is
// lost (the task started, the caller cannot know) leaves a redrive-start
// record and a redrive-failed one that says it may have started, and its
// error says where to look. Before, the audit log had no record of a task
// that ran.
func TestRedriveRecordedBeforeItStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}, "job")
	api := &lostStart{&taskFake{Fake: e.f}}
	q := openOrdersDLQ(t, api)
	var recs []AuditRecord
	audit := Audit{Record: func(_ context.Context, r AuditRecord) error { recs = append(recs, r); return nil }}
	_, err := q.StartRedrive(ctx, RedriveConfig{To: "lonely", Audit: audit})
	if err == nil || !strings.Contains(err.Error(), "the task may have started all the same, its reply lost: ListMessageMoveTasks shows it") {
		t.Errorf("start: %v", err)
	}
	if len(api.started) != 1 || len(recs) != 2 || recs[0].Action != ActionRedriveStart || recs[0].DLQ != e.ordersDLQ ||
		recs[0].Destination != sqstest.QueueARN("lonely") || recs[1].Action != ActionRedriveFailed ||
		!strings.Contains(recs[1].Note, "may have started") {
		t.Errorf("%d task(s) started; records %+v", len(api.started), recs)
	}
	// A record that fails starts nothing.
	fail := errors.New("disk full")
	_, err = q.StartRedrive(ctx, RedriveConfig{Audit: Audit{Record: func(context.Context, AuditRecord) error { return fail }}})
	if !errors.Is(err, fail) || len(api.started) != 1 {
		t.Errorf("start with a failing record: %v, %d task(s) started", err, len(api.started))
	}
}

// A redrive without a destination of a dead-letter queue holding a copy
// the runtimes sent (no DeadLetterQueueSourceArn: SQS did not move it) is
// refused, starting and recording nothing, and points to dlq replay: a move
// task without a destination fails on such messages. It started, and the
// task failed. With a destination it starts.
func TestRedriveRefusesCopiesWithoutASourceSQSKnows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	redrive(t, e.f, e.orders, "moved by SQS", nil)
	e.f.Send(e.ordersDLQ, "a runtime's copy")
	q := openOrdersDLQ(t, e.f)
	var recs []AuditRecord
	audit := Audit{Record: func(_ context.Context, r AuditRecord) error { recs = append(recs, r); return nil }}
	p, err := q.StartRedrive(ctx, RedriveConfig{Sample: 100, Audit: audit})
	if err == nil || p == nil || p.NoSource != 1 || !strings.Contains(err.Error(), "dlq replay") {
		t.Fatalf("start: %v, %+v; want it refused, counting the copy, naming dlq replay", err, p)
	}
	if n := e.f.Calls(sqstest.OpStartMessageMoveTask); n != 0 || len(recs) != 0 {
		t.Fatalf("refused, yet %d task(s) started, %d record(s)", n, len(recs))
	}
	if p, err := q.StartRedrive(ctx, RedriveConfig{Sample: 100, To: "lonely", Audit: audit}); err != nil || p.NoSource != 0 || p.TaskHandle == "" {
		t.Fatalf("start with a destination: %v, %+v", err, p)
	}
}

// refusedRetry is taskFake whose StartMessageMoveTask starts the task and
// then answers as SQS answers the SDK's retry of a call whose reply was
// lost: refused, a task of the queue running already. Its
// ListMessageMoveTasks shows the task.
type refusedRetry struct {
	*taskFake
	at time.Time
}

func (r *refusedRetry) StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, opts ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	if _, err := r.taskFake.StartMessageMoveTask(ctx, in, opts...); err != nil {
		return nil, err
	}
	r.at = time.Now()
	return nil, &smithy.GenericAPIError{Code: "UnsupportedOperation", Message: "There is already a task running for this source."}
}

func (r *refusedRetry) ListMessageMoveTasks(_ context.Context, in *sqs.ListMessageMoveTasksInput, _ ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error) {
	if r.at.IsZero() {
		return &sqs.ListMessageMoveTasksOutput{}, nil
	}
	last := r.started[len(r.started)-1]
	return &sqs.ListMessageMoveTasksOutput{Results: []types.ListMessageMoveTasksResultEntry{{
		TaskHandle: aws.String("task-1"), Status: aws.String("RUNNING"), SourceArn: in.SourceArn,
		DestinationArn: last.DestinationArn, StartedTimestamp: r.at.UnixMilli(),
	}}}, nil
}

// A redrive whose start was applied but whose reply was lost, the SDK's
// retry refused as a task runs already: it reports the task started, with
// its handle, and records it so, as ListMessageMoveTasks shows it. Before,
// it reported the redrive not started, recorded it failed, and exited 1,
// while the task moved every message.
func TestRedriveStartedThoughItsReplyWasLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newFakeEnv()
	deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}, "job")
	api := &refusedRetry{taskFake: &taskFake{Fake: e.f}}
	q := openOrdersDLQ(t, api)
	var recs []AuditRecord
	audit := Audit{Record: func(_ context.Context, r AuditRecord) error { recs = append(recs, r); return nil }}
	p, err := q.StartRedrive(ctx, RedriveConfig{To: "lonely", Audit: audit})
	if err != nil || p == nil || p.TaskHandle != "task-1" {
		t.Fatalf("start: %v, %+v; want the task started, found by its handle", err, p)
	}
	if len(recs) != 2 || recs[0].Action != ActionRedriveStart || recs[1].Action != ActionRedrive || recs[1].TaskHandle != "task-1" ||
		!strings.Contains(recs[1].Note, "its reply lost") {
		t.Errorf("records %+v", recs)
	}
}

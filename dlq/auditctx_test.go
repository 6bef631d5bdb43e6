package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
)

// cancelOnSend cancels the replay's context when the first copy is sent:
// an operator's Ctrl-C while the send is on its way.
type cancelOnSend struct {
	API
	cancel context.CancelFunc
}

func (c *cancelOnSend) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.cancel()
	return c.API.SendMessage(ctx, in, opts...)
}

// A replay interrupted while a copy is sent finishes that move (the send
// and the delete run to their end) and records it: the audit record of the
// move, as the move itself, does not take the cancelled context, which an
// Audit.Record that honours its context would refuse, leaving a moved
// message with its replay-start only.
func TestReplayInterruptedMidSendRecordsMove(t *testing.T) {
	e := newFakeEnv()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders, MessageID: "orig-1", FailedAt: time.Now()}
	kept := deadLetterKeyed(e, fl, "job 1", "order-1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := openOrdersDLQ(t, &cancelOnSend{API: e.f, cancel: cancel})
	var got []string
	res, err := q.Replay(ctx, ReplayConfig{Audit: Audit{Record: func(ctx context.Context, r AuditRecord) error {
		if err := ctx.Err(); err != nil {
			return err // a remote audit store, say
		}
		if r.DLQMessageID == kept {
			got = append(got, r.Action)
		}
		return nil
	}}})
	if res == nil || res.Moved != 1 {
		t.Fatalf("replay: %v, %+v; want the message moved", err, res)
	}
	if len(got) != 2 || got[0] != ActionReplayStart || got[1] != ActionReplay {
		t.Errorf("records of the moved message: %v (replay: %v); want [%s %s]", got, err, ActionReplayStart, ActionReplay)
	}
	e.wantDLQDepth(t, "after the replay", 0, 0)
}

// cancelOnStart cancels the redrive's context once SQS started its move
// task: an operator's Ctrl-C while the reply is on its way.
type cancelOnStart struct {
	*taskFake
	cancel context.CancelFunc
}

func (c *cancelOnStart) StartMessageMoveTask(ctx context.Context, in *sqs.StartMessageMoveTaskInput, opts ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	out, err := c.taskFake.StartMessageMoveTask(ctx, in, opts...)
	c.cancel()
	return out, err
}

// A redrive whose context ends once its task started records the task all
// the same: before, an Audit.Record that honours its context refused the
// redrive record of a task that runs.
func TestRedriveInterruptedRecordsTask(t *testing.T) {
	e := newFakeEnv()
	deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}, "job")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := openOrdersDLQ(t, &cancelOnStart{taskFake: &taskFake{Fake: e.f}, cancel: cancel})
	var got []string
	p, err := q.StartRedrive(ctx, RedriveConfig{To: "lonely", Audit: Audit{Record: func(ctx context.Context, r AuditRecord) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		got = append(got, r.Action)
		return nil
	}}})
	if err != nil || p == nil || p.TaskHandle == "" {
		t.Errorf("start: %v, %+v; want the task started", err, p)
	}
	if len(got) != 2 || got[0] != ActionRedriveStart || got[1] != ActionRedrive {
		t.Errorf("records: %v; want [%s %s]", got, ActionRedriveStart, ActionRedrive)
	}
}

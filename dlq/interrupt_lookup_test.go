package dlq

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/sqstest"
)

// cancelOnLookup is the fake whose GetQueueAttributes, once armed, is
// where the operator's Ctrl-C lands: it cancels the replay's context and
// fails as the SDK does then.
type cancelOnLookup struct {
	*sqstest.Fake
	cancel context.CancelFunc
	armed  bool
	url    string // the source queue's
}

func (c *cancelOnLookup) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if c.armed && aws.ToString(in.QueueUrl) == c.url {
		c.armed = false
		c.cancel()
		return nil, ctx.Err()
	}
	return c.Fake.GetQueueAttributes(ctx, in, opts...)
}

// A Ctrl-C while the replay checks a message's source queue is reported as
// the interruption it is, not as a failure of the check; nothing moves,
// and every message stays. Before, the replay ended with "checking its
// source queue: context canceled".
func TestReplayInterruptedDuringSourceLookup(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(3)
	ctx, cancel := context.WithCancel(context.Background())
	api := &cancelOnLookup{Fake: e.f, cancel: cancel, url: e.orders}
	q := openOrdersDLQ(t, api)
	api.armed = true
	res, err := q.Replay(ctx, ReplayConfig{})
	if api.armed {
		t.Fatal("the replay looked up no queue's attributes: the test does not reach its point")
	}
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) || res == nil || !res.Interrupted || res.Moved != 0 {
		t.Errorf("err %v, result %+v; want an interruption, nothing moved", err, res)
	}
	e.wantDLQDepth(t, "after the replay", 3, 0)
}

// A Ctrl-C while the replay records that it drops a duplicate copy of a job
// (an audit sink that honours its context) is reported as the
// interruption it is, not as a failed audit record.
func TestReplayInterruptedDuringDropRecord(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	duplicateFixture(e)
	q := openOrdersDLQ(t, e.f)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cut := false
	res, err := q.Replay(ctx, ReplayConfig{Audit: Audit{Record: func(ctx context.Context, r AuditRecord) error {
		if r.Action == ActionReplayStart && strings.HasPrefix(r.Note, "to be deleted") && !cut {
			cut = true
			cancel()
			return ctx.Err()
		}
		return nil
	}}})
	if !cut {
		t.Fatal("no duplicate was dropped: the test does not reach its point")
	}
	if !errors.Is(err, ErrInterrupted) || !errors.Is(err, context.Canceled) || res == nil || !res.Interrupted {
		t.Errorf("err %v; want an interruption", err)
	}
}

// hangingSends is the fake whose SendMessage does not answer until its
// context ends, and then a little later, as a transport takes its time to
// give up: a destination that swallows requests.
type hangingSends struct{ *sqstest.Fake }

func (hangingSends) SendMessage(ctx context.Context, _ *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	<-ctx.Done()
	time.Sleep(50 * time.Millisecond)
	return nil, ctx.Err()
}

// A send that takes the whole move's bound leaves the record that closes
// the move a bound of its own: an audit sink that honours its context
// records the replay-failed, and the replay-start is closed. Before, the
// closing record shared the send's spent context, failed, and the replay
// ended with "the audit record failed", its start left open.
func TestReplayClosesAMoveWhoseSendTookItsBound(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	e.deadLetterJobs(1)
	q := openOrdersDLQ(t, hangingSends{e.f})
	q.moveTimeout = 300 * time.Millisecond
	var actions []string
	res, err := q.Replay(context.Background(), ReplayConfig{Audit: Audit{Record: func(ctx context.Context, r AuditRecord) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		actions = append(actions, r.Action)
		return nil
	}}})
	if err == nil || strings.Contains(err.Error(), "audit record failed") || !strings.Contains(err.Error(), "sending the copy") {
		t.Errorf("err %v; want the send's failure, recorded", err)
	}
	if want := []string{ActionReplayStart, ActionReplayFailed}; !slices.Equal(actions, want) {
		t.Errorf("audit actions %q, want %q", actions, want)
	}
	if res == nil || res.Moved != 0 {
		t.Errorf("result %+v; want nothing moved", res)
	}
	e.wantDLQDepth(t, "after the replay", 1, 0)
}

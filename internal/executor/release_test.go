package executor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// limiting is the sim's acker with CopyLimits: a runtime that wants copies
// delayed by least (the worker while it stops).
type limiting struct {
	*sim
	least time.Duration
}

func (l limiting) CopyLimits(*Job) (time.Duration, time.Time) { return l.least, time.Time{} }
func (limiting) CopyStopping() <-chan struct{}                { return nil }

// receiveOne advances the sim's clock until its message is visible, and
// receives it as a job.
func (s *sim) receiveOne() *Job {
	s.t.Helper()
	for range 3600 {
		out, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(s.url),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"}})
		if err != nil {
			s.t.Fatal(err)
		}
		if len(out.Messages) == 1 {
			s.receives++
			return &Job{Msg: sqsmsg.FromSDK(s.url, &out.Messages[0]), ReceivedAt: s.clock.Now(), Ctx: context.Background()}
		}
		if v, _, _ := s.f.Depth(s.dlq); v > 0 {
			s.t.Fatal("the job was dead-lettered")
		}
		s.clock.Advance(time.Second)
	}
	s.t.Fatal("the job did not come back within an hour")
	return nil
}

// A job released without an attempt on receive after receive (maxReceiveCount
// 2), after a first attempt that failed, is never dead-lettered: each
// release on the last receive sends a fresh copy, delayed as the runtime's
// CopyLimits asks, and the job runs at last once, never moved. Its
// attempt number never counts the releases on a last receive, nor more
// receives than leave it its last attempt (see
// TestWaitingLeavesTwoAttempts). Before, SQS
// moved it to the dead-letter queue on the third receive.
func TestReleaseOnLastReceiveWaitsInACopy(t *testing.T) {
	first := true
	s := newSim(t, 2, func(m *sqsworker.Message) error {
		if first {
			first = false
			return errors.New("the dependency failed")
		}
		return nil
	})
	s.send(0)
	s.ex.Run(s.receiveOne(), s) // fails: back after its backoff
	ack := limiting{sim: s, least: 30 * time.Second}
	for i := range 5 {
		j := s.receiveOne()
		last := receives(j.Msg) == 2
		before := s.ex.Counters.Requeued.Load()
		s.ex.Release(j, ack)
		if !last {
			continue
		}
		if s.ex.Counters.Requeued.Load() != before+1 {
			t.Fatalf("release %d, on the last receive: no copy sent", i)
		}
		if v, fl, d := s.f.Depth(s.url); v != 0 || fl != 0 || d != 1 {
			t.Fatalf("release %d: %d visible, %d in flight, %d delayed; want the copy alone, delayed", i, v, fl, d)
		}
		s.clock.Advance(29 * time.Second)
		if v, _, _ := s.f.Depth(s.url); v != 0 {
			t.Fatalf("release %d: the copy visible before the 30s its runtime asked", i)
		}
	}
	s.runUntilIdle(time.Hour)
	if len(s.runs) != 2 {
		t.Fatalf("%d runs, want 2 (the failed attempt, then the job)", len(s.runs))
	}
	if v, _, _ := s.f.Depth(s.dlq); v != 0 {
		t.Errorf("%d dead-lettered, want none: no handler failed but the first", v)
	}
	// The failed attempt, and no more: a copy made on a last receive
	// carries at most one prior attempt with maxReceiveCount 2 (see
	// priorOfWait).
	if a := s.runs[1].attempt; a != 2 {
		t.Errorf("the job ran as attempt %d, want 2", a)
	}
	if k := s.runs[1].key; k != "order-42" {
		t.Errorf("the job ran under key %q, want its own order-42", k)
	}
	if n := s.ex.Counters.Released.Load(); n != 5 {
		t.Errorf("%d releases counted, want 5", n)
	}
}

// On its first receive with maxReceiveCount 1 (the only one allowed), a job
// released unstarted waits in a copy that carries no prior attempt: it then
// runs as attempt 1.
func TestReleaseOnOnlyReceive(t *testing.T) {
	s := newSim(t, 1, nil)
	s.send(0)
	s.ex.Release(s.receiveOne(), s)
	s.runUntilIdle(time.Hour)
	if len(s.runs) != 1 || s.runs[0].attempt != 1 {
		t.Fatalf("runs %+v, want one, attempt 1", s.runs)
	}
	if v, _, _ := s.f.Depth(s.dlq); v != 0 {
		t.Errorf("%d dead-lettered, want none", v)
	}
}

// A FIFO queue keeps the release by visibility: a copy would go behind the
// rest of its group.
func TestReleaseOnLastReceiveFIFOKeepsTheVisibility(t *testing.T) {
	s, _ := fifoSim(t, 1, 0)
	s.ex.Release(s.receiveOne(), s)
	if n := s.ex.Counters.Requeued.Load(); n != 0 {
		t.Errorf("%d copies sent on a FIFO queue, want none", n)
	}
	if v, _, _ := s.f.Depth(s.url); v != 1 {
		t.Errorf("%d visible, want the released message", v)
	}
}

// A job whose time has not come, released unstarted (a worker stopping, a
// FIFO group's rest behind a failed message) on the only receive its
// redrive policy allows, is held back rather than released: it runs at its
// time, as attempt 1, never dead-lettered. Before, the release's copy was
// timed for the release, and the job ran 25 minutes early.
func TestReleaseOfAHeldJobKeepsItsTime(t *testing.T) {
	s := newSim(t, 1, nil)
	s.runtime = true
	nb := s.send(40 * time.Minute)
	j := s.receiveOne() // after the longest message delay, 15 minutes
	if !s.clock.Now().Before(nb) {
		t.Fatalf("received at %s, not before its time %s", s.clock.Now(), nb)
	}
	s.ex.Release(j, s)
	s.runUntilIdle(time.Hour)
	if len(s.runs) != 1 {
		t.Fatalf("%d runs, want 1", len(s.runs))
	}
	if r := s.runs[0]; r.at.Before(nb) || r.attempt != 1 {
		t.Errorf("ran at %s as attempt %d; want at its time %s or after, attempt 1", r.at, r.attempt, nb)
	}
	if v, _, _ := s.f.Depth(s.dlq); v != 0 {
		t.Errorf("%d dead-lettered, want none", v)
	}
	if n := s.ex.Counters.Released.Load(); n != 0 {
		t.Errorf("%d releases counted, want 0: the job was held", n)
	}
}

// A job that waited on every receive its redrive policy allows
// (maxReceiveCount 3: released unstarted, as an open key or a dependency
// down puts it off) comes out of the wait with two attempts left, not
// one: a transient failure on its first attempt is retried, and the job
// succeeds. Its copy carried the two receives spent waiting as attempts,
// and the failure dead-lettered it.
func TestWaitingLeavesTwoAttempts(t *testing.T) {
	failed := false
	s := newSim(t, 3, func(m *sqsworker.Message) error {
		if !failed {
			failed = true
			return errors.New("a transient failure")
		}
		return nil
	})
	s.send(0)
	for range 3 { // the third on the last receive: a copy
		s.ex.Release(s.receiveOne(), s)
	}
	s.runUntilIdle(time.Hour)
	if v, _, _ := s.f.Depth(s.dlq); v != 0 {
		t.Errorf("%d dead-lettered, want none: one transient failure after the wait", v)
	}
	if len(s.runs) != 2 || s.runs[0].attempt != 2 || s.runs[1].attempt != 3 {
		t.Errorf("runs %+v, want attempts 2 and 3", s.runs)
	}
}

// A job put off without an attempt, time after time (an open key's
// postponements, every 10 minutes), on a queue whose retention period is
// an hour and whose redrive policy allows 100 receives: before the end of
// the period it waits in a fresh copy, whose period starts anew, and runs
// once it is no longer put off, two hours after its send. It waited by its
// visibility to the end of the period, and SQS deleted it, without a trace.
func TestWaitOutlastsTheRetentionPeriod(t *testing.T) {
	s := newSim(t, 100, nil)
	s.f.SetAttribute(s.url, "MessageRetentionPeriod", "3600")
	s.ex.Requeue.Retention = time.Hour
	s.send(0)
	end := s.clock.Now().Add(2 * time.Hour)
	for s.clock.Now().Before(end) {
		s.ex.Postpone(s.receiveOne(), s, 10*time.Minute, errors.New("its key is open"))
	}
	s.runUntilIdle(time.Hour)
	if len(s.runs) != 1 {
		t.Fatalf("%d runs, want the job once", len(s.runs))
	}
	if n := s.ex.Counters.Requeued.Load(); n < 2 {
		t.Errorf("%d copies, want at least one per hour of waiting", n)
	}
}

package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/sqstest"
)

// countedSends counts the executor's sends.
type countedSends struct {
	queue.Sender
	n atomic.Int64
}

func (c *countedSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.n.Add(1)
	return c.Sender.SendMessage(ctx, in, o...)
}

// lastReceive makes s's job fail its first attempt and receives it again,
// on its last receive (maxReceiveCount 2), held for a minute.
func (s *sim) lastReceive() *Job {
	s.t.Helper()
	s.send(0)
	s.ex.Run(s.receiveOne(), s) // fails: back after its backoff
	j := s.receiveOne()
	if receives(j.Msg) != 2 {
		s.t.Fatalf("receive %d, want the last (2)", receives(j.Msg))
	}
	j.LeaseEnd = time.Now().Add(time.Minute)
	return j
}

// A job settled without an attempt on the last receive its redrive policy
// allows — released unstarted, postponed (the circuit breaker's wait), or
// failed with Unavailable — waits in a fresh copy whose send fails three
// times (SQS refusing connections for a moment): the send is tried again
// while the message is held, the copy takes the original's place, and the
// job runs once more and is done, as attempt 2, never dead-lettered.
// Before, the copy was given up after one send, and SQS moved the message
// to the dead-letter queue on its next receive though no handler failed.
func TestLastReceiveCopyRetried(t *testing.T) {
	for _, way := range []string{"release", "postpone", "unavailable"} {
		t.Run(way, func(t *testing.T) {
			calls := 0
			s := newSim(t, 2, func(*sqsworker.Message) error {
				calls++
				switch {
				case calls == 1:
					return errors.New("the first attempt fails")
				case calls == 2 && way == "unavailable":
					return sqsworker.Unavailable(errors.New("the dependency is down"))
				}
				return nil
			})
			sends := &countedSends{Sender: s.api}
			s.ex.Requeue.API = sends
			j := s.lastReceive()
			s.f.FailNext(sqstest.OpSendMessage, errors.New("dial tcp: connection refused"), 3)
			switch way {
			case "release":
				s.ex.Release(j, s)
			case "postpone":
				s.ex.Postpone(j, s, 10*time.Second, errors.New("breaker open"))
			case "unavailable":
				s.ex.Run(j, s)
			}
			if n, f := s.ex.Counters.Requeued.Load(), s.ex.Counters.RequeueFailures.Load(); n != 1 || f != 0 || sends.n.Load() != 4 {
				t.Fatalf("%d copies sent, %d given up, %d sends; want the copy sent on its fourth send", n, f, sends.n.Load())
			}
			s.runUntilIdle(time.Hour)
			s.checkNotDeadLettered()
			last := s.runs[len(s.runs)-1]
			if n := s.ex.Counters.Succeeded.Load(); n != 1 || last.attempt != 2 {
				t.Errorf("the job succeeded %d times, last as attempt %d; want once, as attempt 2", n, last.attempt)
			}
		})
	}
}

// A job held back until its time (40 minutes ahead) on the last receive
// its redrive policy allows (its first one spent, as by a worker that
// died holding it), whose copy's send fails three times, waits in a copy
// sent again while the message is held: it runs once, at its time, never
// dead-lettered. Before, the hold's copy on the last receive was given up
// after one send, and SQS moved the job to the dead-letter queue when it
// came back.
func TestLastReceiveHoldCopyRetried(t *testing.T) {
	s := newSim(t, 2, nil)
	nb := s.send(40 * time.Minute)
	s.Retry(s.receiveOne(), 0) // a receive spent
	s.f.FailNext(sqstest.OpSendMessage, errors.New("dial tcp: connection refused"), 3)
	j := s.receiveOne()
	j.LeaseEnd = time.Now().Add(time.Minute)
	s.ex.Run(j, s)
	s.runUntilIdle(2 * time.Hour)
	s.checkRanOnce(nb)
	s.checkRequeueFailures(0)
}

// The retries of a copy's send end with the message's lease (less the
// time its delete takes): a copy that SQS keeps refusing is given up then,
// and the log says why and what to do. An error no retry mends (access
// denied) is not sent again.
func TestLastReceiveCopyGivenUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		err       error
		lease     time.Duration
		sends     func(n int64) bool
		wantInLog string
	}{
		{"refused until the lease ends", errors.New("dial tcp: connection refused"), 3 * time.Second,
			func(n int64) bool { return n > 1 }, "until the message's lease ends"},
		{"access denied", &smithy.GenericAPIError{Code: "AccessDenied", Message: "not allowed"}, time.Minute,
			func(n int64) bool { return n == 1 }, "no retry mends it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, 2, func(m *sqsworker.Message) error {
				return errors.New("the first attempt fails")
			})
			var logs bytes.Buffer
			s.ex.Log = slog.New(slog.NewTextHandler(&logs, nil))
			sends := &countedSends{Sender: s.api}
			s.ex.Requeue.API = sends
			j := s.lastReceive()
			j.LeaseEnd = time.Now().Add(tc.lease)
			s.f.FailNext(sqstest.OpSendMessage, tc.err, 1000)
			s.ex.Release(j, s)
			if n := sends.n.Load(); !tc.sends(n) {
				t.Errorf("%d sends", n)
			}
			if time.Now().After(j.LeaseEnd.Add(10 * time.Second)) { // not the move timeout's 30s
				t.Errorf("the retries went on past the message's lease")
			}
			s.checkRequeueFailures(1)
			if l := logs.String(); !strings.Contains(l, tc.wantInLog) || !strings.Contains(l, "dlq replay") {
				t.Errorf("log %q: want why the copy was given up (%q), and the fix", l, tc.wantInLog)
			}
		})
	}
}

// A waiting copy with no room for the job's prior attempts (nine message
// attributes of its own besides them, which would pass SQS's size limit
// packed into one: a value near it of characters JSON escapes) says so
// once, when a send goes, not at every send SQS refuses: before, each of
// the four sends logged it.
func TestNoRoomForPriorAttemptsSaidOnce(t *testing.T) {
	s := newSim(t, 1, func(*sqsworker.Message) error { return nil })
	var logs bytes.Buffer
	s.ex.Log = slog.New(slog.NewTextHandler(&logs, nil))
	attrs := map[string]types.MessageAttributeValue{sqsworker.AttrPriorAttempts: {DataType: aws.String("Number"), StringValue: aws.String("2")}}
	for i := range 9 {
		attrs[fmt.Sprint("a", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	attrs["a0"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(strings.Repeat(`"`, sqsworker.MaxMessageSize-1000))}
	s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) { in.MessageAttributes = attrs })
	j := s.receiveOne() // the last receive maxReceiveCount 1 allows
	j.LeaseEnd = time.Now().Add(time.Minute)
	s.f.FailNext(sqstest.OpSendMessage, errors.New("dial tcp: connection refused"), 3)
	s.ex.Postpone(j, s, 10*time.Second, errors.New("breaker open"))
	if n := s.ex.Counters.Requeued.Load(); n != 1 {
		t.Fatalf("%d copies sent, want 1", n)
	}
	if n := strings.Count(logs.String(), "no room in the waiting copy for its prior attempts"); n != 1 {
		t.Errorf("said %d times, want once:\n%s", n, logs.String())
	}
}

package executor

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
)

// sendReplayed sends a job as `sqsworker dlq replay` leaves it: without an
// idempotency key, with the failure metadata of its dead-letter copy (so
// that idempotency.DefaultKey gives the first message's ID), and, when nb
// is not zero, a time to run.
func (s *sim) sendReplayed(firstID string, nb time.Time) {
	s.t.Helper()
	f := sqsworker.Failure{Error: "boom", ErrorClass: "error", Attempts: 3, SourceQueue: s.url, MessageID: firstID}
	attrs, ok := f.AddTo(nil)
	if !ok {
		s.t.Fatal("failure metadata does not fit")
	}
	if !nb.IsZero() {
		attrs[sqsworker.AttrNotBefore] = sqsworker.NotBeforeAttribute(nb)
	}
	s.f.Send(s.url, `{"order":42}`, func(in *sqs.SendMessageInput) {
		in.MessageAttributes = sqsmsg.ToSDKAttributes(attrs)
		if !nb.IsZero() {
			in.DelaySeconds = 900
		}
	})
}

// A replayed job (no idempotency key: its dead-letter copy's failure
// metadata gives it the first message's ID as the idempotency middleware's
// DefaultKey) whose waiting copy is left beside it (the delete of the
// original failed, as after a crash) keeps that key on the copy: both runs
// are under one key, so the middleware applies the effect once. Before,
// the copy dropped the failure metadata and was given the replayed
// message's own ID as its key: two keys, the effect twice.
func TestCopyOfAReplayedJobKeepsItsKey(t *testing.T) {
	for _, path := range []string{"hold", "long backoff"} {
		t.Run(path, func(t *testing.T) {
			var keys []string
			s := newSim(t, 0, nil)
			s.handler = func(m *sqsworker.Message) error {
				keys = append(keys, idempotency.DefaultKey(m))
				if path == "long backoff" && m.ReceiveCount == 1 {
					return sqsworker.RetryAfter(24*time.Hour, errors.New("webhook endpoint down"))
				}
				return nil
			}
			var nb time.Time
			if path == "hold" {
				nb = s.clock.Now().Add(40 * time.Minute)
			}
			s.sendReplayed("first-message-id", nb)
			s.f.FailNext(sqstest.OpDeleteMessage, errors.New("connection reset"), 1)
			s.runUntilIdle(26 * time.Hour)
			if len(keys) < 2 {
				t.Fatalf("the handler ran %d times, want twice (the copy and the original left beside it)", len(keys))
			}
			for i, k := range keys {
				if k != "message-id:first-message-id" {
					t.Errorf("run %d under key %q, want message-id:first-message-id: the effect would apply again", i, k)
				}
			}
			s.checkNotDeadLettered()
		})
	}
}

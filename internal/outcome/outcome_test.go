package outcome

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

func TestDecide(t *testing.T) {
	fixed := sqsworker.BackoffFunc(func(int, error) time.Duration { return 7 * time.Second })
	withDLQ := Policy{Backoff: fixed, MaxReceiveCount: 3, HasDLQ: true, RedriveMaxReceiveCount: 3}
	// A MaxReceiveCount below the redrive policy's, or a dead-letter queue
	// with no redrive policy: SQS will not move the message on the next
	// receive, so a failed copy must back off, not come back at once.
	lower := Policy{Backoff: fixed, MaxReceiveCount: 3, HasDLQ: true, RedriveMaxReceiveCount: 5}
	noRedrive := Policy{Backoff: fixed, MaxReceiveCount: 3, HasDLQ: true}
	noDLQ := Policy{Backoff: fixed}
	boom := errors.New("boom")
	for _, c := range []struct {
		name    string
		p       Policy
		err     error
		attempt int
		want    Decision
	}{
		{"success", withDLQ, nil, 1, Decision{Action: Delete}},
		{"failure", withDLQ, boom, 1, Decision{Action: Retry, Delay: 7 * time.Second}},
		{"last attempt", withDLQ, boom, 3, Decision{Action: DeadLetter, LastAttempt: true}},
		{"permanent", withDLQ, sqsworker.Permanent(boom), 1, Decision{Action: DeadLetter, Delay: 7 * time.Second, Permanent: true}},
		{"permanent, no DLQ", noDLQ, sqsworker.Permanent(boom), 1, Decision{Action: Retry, Delay: 7 * time.Second, Permanent: true}},
		{"retry after", withDLQ, sqsworker.RetryAfter(time.Minute, boom), 1, Decision{Action: Retry, Delay: time.Minute}},
		{"retry after, last attempt", withDLQ, sqsworker.RetryAfter(time.Minute, boom), 3, Decision{Action: DeadLetter, LastAttempt: true}},
		{"last attempt, lower than the redrive policy", lower, boom, 3, Decision{Action: DeadLetter, Delay: 7 * time.Second, LastAttempt: true}},
		{"last attempt, no redrive policy", noRedrive, boom, 4, Decision{Action: DeadLetter, Delay: 7 * time.Second, LastAttempt: true}},
		{"postpone", withDLQ, sqsworker.RetryAfter(time.Minute, nil), 3, Decision{Action: Postpone, Delay: time.Minute}},
	} {
		if got := c.p.Decide(c.err, c.attempt); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestCut(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	counted := errors.New("dependency down")
	counts := func(err error) bool { return errors.Is(err, counted) }
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"success, context ended", ended, nil, false},
		{"uncounted error, context live", live, context.Canceled, false},
		{"uncounted error, context ended", ended, context.Canceled, true},
		{"counted error, context ended", ended, counted, false},
	} {
		if got := Cut(c.ctx, c.err, counts); got != c.want {
			t.Errorf("%s: Cut = %v, want %v", c.name, got, c.want)
		}
	}
}

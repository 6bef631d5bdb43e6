package executor

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/visibility"
)

type nopExtend struct{}

func (nopExtend) ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}

// A lease whose deadline has passed does not hold, even before the
// heartbeat's next round finds it lost: a handler that returns then must not
// acknowledge with its stale receipt handle.
func TestHeldTrustsTheDeadlineNotOnlyTheHeartbeat(t *testing.T) {
	ext, err := visibility.New(nopExtend{}, visibility.Config{QueueURL: "q", VisibilityTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m := &sqsworker.Message{ID: "m"}
	ctx, lease := ext.Track(context.Background(), m, now.Add(-11*time.Second))
	j := &Job{Msg: m, Ctx: ctx, Lease: lease}
	if j.Held(now) {
		t.Error("a lease 1s past its deadline holds")
	}
	ctx, lease = ext.Track(context.Background(), m, now)
	j = &Job{Msg: m, Ctx: ctx, Lease: lease}
	if !j.Held(now) {
		t.Error("a fresh lease does not hold")
	}
	j = &Job{Msg: m, Ctx: context.Background(), LeaseEnd: now.Add(-time.Millisecond)}
	if j.Held(now) {
		t.Error("without a heartbeat, a job past its lease end holds")
	}
}

// VisibilityOf rounds up to whole seconds and keeps the visibility within
// SQS's 12 hours from the receive, less the slack.
func TestVisibilityOf(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	defer SetStepsForTest(Steps{Now: func() time.Time { return now }})()
	for _, c := range []struct {
		name string
		ago  time.Duration // since the receive
		d    time.Duration
		want time.Duration
	}{
		{"rounded up", 0, 1200 * time.Millisecond, 2 * time.Second},
		{"whole seconds kept", 0, 30 * time.Second, 30 * time.Second},
		{"negative", 0, -time.Second, 0},
		{"beyond 12h", 0, 13 * time.Hour, 12*time.Hour - time.Minute},
		{"within 12h of the receive", 3 * time.Hour, 12 * time.Hour, 9*time.Hour - time.Minute},
		{"left rounded up", 1500 * time.Millisecond, 12 * time.Hour, 12*time.Hour - time.Minute - time.Second},
		{"no time left", 12 * time.Hour, time.Hour, 0},
		{"past 12h", 13 * time.Hour, time.Hour, 0},
	} {
		j := &Job{ReceivedAt: now.Add(-c.ago)}
		if got := VisibilityOf(j, c.d); got != c.want {
			t.Errorf("%s: VisibilityOf(received %s ago, %s) = %s, want %s", c.name, c.ago, c.d, got, c.want)
		}
	}
}

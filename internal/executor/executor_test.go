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

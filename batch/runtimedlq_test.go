package batch_test

import (
	"context"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A chunks' queue without a redrive policy, whose worker dead-letters
// itself (worker.Config.MaxReceiveCount 2 and a dead-letter queue), and
// Config.MaxReceiveCount set to the same 2, as its documentation allows
// ("SQS (or the runtime)"): the chunk that completes the batch, on its
// second receive, may be put off once, but nothing moves it on its next
// receive, and then it sends the completion. Before, it was postponed on
// every receive from the second on (its receive count at or past 2), which
// the worker, with no redrive policy to make a copy for, carried out by
// its visibility: the chunk came back at once, for ever, and the
// completion was never sent. On the fake SQS, counted in DynamoDB Local.
func TestCompletionWithTheRuntimesDeadLetterQueue(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	e := newFakeEnv(t, batch.Config{MaxReceiveCount: 2})
	dlq := e.sqs.CreateQueue("chunks-dlq", nil)
	ctx := context.Background()
	if err := e.coord.Create(ctx, e.spec("runtime-dlq", 1)); err != nil {
		t.Fatal(err)
	}
	var eff effects
	callbacks := runFailingFirst(t, e, &eff, worker.Config{QueueURL: e.work, MaxReceiveCount: 2, DeadLetterQueueURL: dlq},
		2*time.Second, func() bool { return true })
	if callbacks != 1 {
		t.Errorf("%d completion jobs, want 1", callbacks)
	}
	if n := eff.get("runtime-dlq#0"); n != 1 {
		t.Errorf("the chunk's handler succeeded %d times, want once", n)
	}
	if v, fl, d := e.sqs.Depth(e.work); v+fl+d != 0 {
		t.Errorf("%d chunks left in the queue, want none", v+fl+d)
	}
	if v, fl, d := e.sqs.Depth(dlq); v+fl+d != 0 {
		t.Errorf("%d chunks dead-lettered, want none", v+fl+d)
	}
}

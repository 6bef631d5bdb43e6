package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// The chunk that completes a batch, on the last receive its queue's
// redrive policy allows (2), with the eight attributes of its own that
// Create allows: the runtime's copy of it would have no room for its prior
// attempts (ten attributes with the chunk's marker and key), so it would
// look like a first delivery and run the chunk's handler again. The chunk
// sends the completion itself instead: the handler's effect is applied
// once, the completion sent once, nothing dead-lettered. Before, it was
// put off, the copy made without its prior attempts ran the handler a
// second time. On the fake SQS, counted in DynamoDB Local.
func TestCompletionSenderWithoutRoomForTheCopy(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	e := newFakeEnv(t, batch.Config{})
	dlq := e.sqs.CreateQueue("room-dlq", nil)
	chunks := e.sqs.CreateQueue("room", map[string]string{"VisibilityTimeout": "30",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("room-dlq"))})
	ctx := context.Background()
	s := e.spec("no-room", 1)
	s.QueueURL = chunks
	s.Chunks[0].Attributes = map[string]sqsworker.MessageAttribute{}
	for i := range 8 {
		s.Chunks[0].Attributes["own-"+strconv.Itoa(i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	var eff effects
	h := e.coord.Middleware(eff.handler(func(*sqsworker.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("the first attempt fails")
		}
		return nil
	}))
	w, err := worker.New(e.sqs, worker.Config{
		QueueURL: chunks, Concurrency: 2, WaitTime: time.Second, DisableDepth: true,
		Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second},
		Logger:  quiet(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("worker stats %+v", w.Stats())
		}
	}()
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx, h) }()
	var callbacks int
	localtest.Eventually(t, time.Minute, func() bool {
		callbacks += len(receive(t, e.sqs, e.callbacks, 10))
		v, fl, d := e.sqs.Depth(chunks)
		return callbacks > 0 && v+fl+d == 0
	}, "the completion was not sent, or the chunk not deleted")
	time.Sleep(3 * time.Second) // a copy's run would show now
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	callbacks += len(receive(t, e.sqs, e.callbacks, 10))
	if callbacks != 1 {
		t.Errorf("%d completion jobs, want 1", callbacks)
	}
	if n := eff.get("no-room#0"); n != 1 {
		t.Errorf("the chunk's handler succeeded %d times, want once: its effect applied again", n)
	}
	if v, fl, d := e.sqs.Depth(chunks); v+fl+d != 0 {
		t.Errorf("%d chunks left in the queue, want none", v+fl+d)
	}
	if v, fl, d := e.sqs.Depth(dlq); v+fl+d != 0 {
		t.Errorf("%d chunks dead-lettered, want none", v+fl+d)
	}
}

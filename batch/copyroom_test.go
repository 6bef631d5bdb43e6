package batch_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

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
	var eff effects
	callbacks := runFailingFirst(t, e, &eff, worker.Config{QueueURL: chunks}, 3*time.Second, func() bool {
		v, fl, d := e.sqs.Depth(chunks)
		return v+fl+d == 0
	})
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

// runFailingFirst runs a worker (cfg, with the test's settings added) over
// the fake SQS on the chunks of a batch, its handler (applying eff) failing
// its first attempt, until a completion job was received and done holds;
// then for settle more, so that a second completion or a copy's run would
// show. It returns the completion jobs received.
func runFailingFirst(t *testing.T, e *fakeEnv, eff *effects, cfg worker.Config, settle time.Duration, done func() bool) int {
	t.Helper()
	var calls atomic.Int64
	h := e.coord.Middleware(eff.handler(func(*sqsworker.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("the first attempt fails")
		}
		return nil
	}))
	cfg.Concurrency, cfg.WaitTime, cfg.DisableDepth = 2, time.Second, true
	cfg.Backoff = sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second}
	cfg.Logger = quiet()
	w, err := worker.New(e.sqs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("worker stats %+v", w.Stats())
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx, h) }()
	var callbacks int
	localtest.Eventually(t, time.Minute, func() bool {
		callbacks += len(receive(t, e.sqs, e.callbacks, 10))
		return callbacks > 0 && done()
	}, "the completion was not sent, or the chunks not settled")
	time.Sleep(settle)
	cancel()
	if err := <-ran; err != nil {
		t.Fatal(err)
	}
	return callbacks + len(receive(t, e.sqs, e.callbacks, 10))
}

// The same with room in the attributes but not in the queue's
// MaximumMessageSize: a chunks' queue kept at 256 KiB, and a completing
// chunk within a few bytes of it, which Create takes. The runtime's copy,
// its prior attempts added, would be over the queue's size: SQS would
// refuse it, and the runtime would send it without its prior attempts, a
// first delivery again. The chunk sends the completion itself: the effect
// is applied once. Before, room was counted against 1 MiB, and the
// handler ran twice.
func TestCompletionSenderWithoutRoomInTheQueuesSize(t *testing.T) {
	t.Parallel()
	localtest.RequireDynamoDB(t)
	e := newFakeEnv(t, batch.Config{})
	const limit = 256 << 10
	dlq := e.sqs.CreateQueue("size-dlq", nil)
	chunks := e.sqs.CreateQueue("size", map[string]string{"VisibilityTimeout": "30", "MaximumMessageSize": strconv.Itoa(limit),
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("size-dlq"))})
	ctx := context.Background()
	// The attributes Create gives a chunk of this batch, measured on a
	// probe of the same ID's length on another queue.
	probeQueue := e.sqs.CreateQueue("probe", nil)
	probe := e.spec("size-a", 1)
	probe.QueueURL = probeQueue
	if err := e.coord.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	pm := receive(t, e.sqs, probeQueue, 1)[0]
	attrBytes := sqsworker.MessageSize("", pm.MessageAttributes)
	s := e.spec("size-b", 1)
	s.QueueURL = chunks
	s.Chunks[0].Body = strings.Repeat("x", limit-attrBytes-8)
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var eff effects
	callbacks := runFailingFirst(t, e, &eff, worker.Config{QueueURL: chunks}, 3*time.Second, func() bool {
		v, fl, d := e.sqs.Depth(chunks)
		return v+fl+d == 0
	})
	if callbacks != 1 {
		t.Errorf("%d completion jobs, want 1", callbacks)
	}
	if n := eff.get("size-b#0"); n != 1 {
		t.Errorf("the chunk's handler succeeded %d times, want once: its effect applied again", n)
	}
	if v, fl, d := e.sqs.Depth(dlq); v+fl+d != 0 {
		t.Errorf("%d chunks dead-lettered, want none", v+fl+d)
	}
}

// TestCompletionSenderWithoutRoomInTheQueuesSize on the local SQS: its
// chunks' queue set to 256 KiB, the chunk within a few bytes of it.
func TestCompletionSenderWithoutRoomInTheQueuesSizeOnEmulator(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 2)
	ctx := context.Background()
	const limit = 256 << 10
	if _, err := e.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(e.work),
		Attributes: map[string]string{"MaximumMessageSize": strconv.Itoa(limit), "VisibilityTimeout": "2"}}); err != nil {
		t.Fatal(err)
	}
	// The attributes Create gives a chunk of this batch, measured on a
	// probe of the same ID's length sent to the callback queue.
	probe := e.spec("size-a", 1)
	probe.QueueURL = e.callbacks
	if err := e.coord.Create(ctx, probe); err != nil {
		t.Fatal(err)
	}
	pm := receive(t, e.sqs, e.callbacks, 1)[0]
	attrBytes := sqsworker.MessageSize("", pm.MessageAttributes)
	if _, err := e.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(e.callbacks), ReceiptHandle: aws.String(pm.ReceiptHandle)}); err != nil {
		t.Fatal(err)
	}
	s := e.spec("size-b", 1)
	s.Chunks[0].Body = strings.Repeat("x", limit-attrBytes-8)
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	var eff effects
	var calls atomic.Int64
	h := e.coord.Middleware(eff.handler(func(*sqsworker.Message) error {
		if calls.Add(1) == 1 {
			return errors.New("the first attempt fails")
		}
		return nil
	}))
	callbacks := 0
	e.runWorker(t, h, "the completion sent and the chunk settled", func() bool {
		callbacks += len(receive(t, e.sqs, e.callbacks, 10))
		v, f, d := localtest.Depth(t, e.sqs, e.work)
		return callbacks > 0 && v+f+d == 0
	})
	if callbacks != 1 {
		t.Errorf("%d completion jobs, want 1", callbacks)
	}
	if n := eff.get("size-b#0"); n != 1 {
		t.Errorf("the chunk's handler succeeded %d times, want once: its effect applied again", n)
	}
	if v, f, _ := localtest.Depth(t, e.sqs, e.chunks.DLQURL); v+f != 0 {
		t.Errorf("%d chunks dead-lettered, want none", v+f)
	}
}

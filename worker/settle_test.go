package worker_test

// Regression tests of the settle path, on sqstest.Fake: each names the
// defect it guards against.

import (
	"context"
	"errors"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A dead-letter copy that fails on the "last attempt" must back off when
// SQS's redrive policy will not move the message on its next receive: here a
// dead-letter queue configured by hand and no redrive policy. Before, every
// receive was again a last attempt at delay 0: a hot loop.
func TestDeadLetterFailureOnLastAttemptBacksOff(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	dlq := f.CreateQueue("dlq", nil)
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "30"})
	f.Send(url, "m")
	f.FailNext(sqstest.OpSendMessage, &smithy.GenericAPIError{Code: "KMS.AccessDeniedException", Message: "no key", Fault: smithy.FaultClient}, 1000)
	var calls atomic.Int64
	backoff := sqsworker.BackoffFunc(func(int, error) time.Duration { return time.Minute })
	r := start(t, f, worker.Config{QueueURL: url, DeadLetterQueueURL: dlq, MaxReceiveCount: 1, Backoff: backoff},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
			calls.Add(1)
			return errTransient
		}))
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().MoveFailures >= 1 }, "no move attempted")
	time.Sleep(3 * time.Second)
	if n := calls.Load(); n != 1 {
		t.Errorf("handler ran %d times in 3s, want once: the failed move must back off a minute", n)
	}
	if _, inFlight, _ := f.Depth(url); inFlight != 1 {
		t.Errorf("message not held invisible for its backoff")
	}
}

// visibilityWatch records the VisibilityTimeout of every receive.
type visibilityWatch struct {
	*sqstest.Fake
	mu   sync.Mutex
	seen []int32
}

func (w *visibilityWatch) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	w.mu.Lock()
	w.seen = append(w.seen, in.VisibilityTimeout)
	w.mu.Unlock()
	return w.Fake.ReceiveMessage(ctx, in, opts...)
}

// Every receive asks for the visibility timeout the heartbeat and the
// handler deadlines are planned with: lowering the queue's own timeout while
// the worker runs must not hand its messages out again mid-run.
func TestReceiveAsksForPlannedVisibility(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "6"})
	api := &visibilityWatch{Fake: f}
	var calls atomic.Int64
	r := start(t, api, worker.Config{QueueURL: url, Concurrency: 4, DisableHeartbeat: true},
		sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
			calls.Add(1)
			time.Sleep(2 * time.Second)
			return nil
		}))
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Ready() }, "not ready")
	f.SetAttribute(url, "VisibilityTimeout", "1") // an operator lowers it
	f.Send(url, "m")
	localtest.Eventually(t, 15*time.Second, func() bool { return r.w.Stats().Deleted == 1 }, "not deleted: %+v", r.w.Stats())
	if n := calls.Load(); n != 1 {
		t.Errorf("handled %d times, want once", n)
	}
	api.mu.Lock()
	defer api.mu.Unlock()
	for _, v := range api.seen {
		if v != 6 {
			t.Fatalf("receive asked for visibility %d, want 6 (the timeout planned with)", v)
		}
	}
}

// loseLease fails every heartbeat extension, and every delete, of one
// receipt handle, as a FIFO queue does once a message's lease is gone
// (another consumer received it since). A standard queue may still take
// such a delete; neither the fake nor the emulator models that.
type loseLease struct {
	*sqstest.Fake
	handle atomic.Pointer[string]
}

// splitLost splits a batch's entries into those to pass on and the
// failures of those on the lost receipt handle (none when lost is nil);
// ids gives an entry's id and receipt handle.
func splitLost[E any](entries []E, lost *string, ids func(E) (id, handle *string)) (keep []E, failed []types.BatchResultErrorEntry) {
	for _, e := range entries {
		id, handle := ids(e)
		if lost != nil && aws.ToString(handle) == *lost {
			failed = append(failed, types.BatchResultErrorEntry{Id: id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("lease gone"), SenderFault: true})
			continue
		}
		keep = append(keep, e)
	}
	return keep, failed
}

func (l *loseLease) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	keep, failed := splitLost(in.Entries, l.handle.Load(), func(e types.ChangeMessageVisibilityBatchRequestEntry) (*string, *string) {
		return e.Id, e.ReceiptHandle
	})
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	if len(keep) > 0 {
		in2 := *in
		in2.Entries = keep
		o, err := l.Fake.ChangeMessageVisibilityBatch(ctx, &in2, opts...)
		if err != nil {
			return nil, err
		}
		out = o
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

func (l *loseLease) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	keep, failed := splitLost(in.Entries, l.handle.Load(), func(e types.DeleteMessageBatchRequestEntry) (*string, *string) { return e.Id, e.ReceiptHandle })
	out := &sqs.DeleteMessageBatchOutput{}
	if len(keep) > 0 {
		in2 := *in
		in2.Entries = keep
		o, err := l.Fake.DeleteMessageBatch(ctx, &in2, opts...)
		if err != nil {
			return nil, err
		}
		out = o
	}
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

// FIFO: when a handler that ignored its context returns nil after its lease
// was lost, the rest of its group must be released, not handled: its
// delete, sent all the same, may not land (here SQS refuses it), and the
// lost message then comes back first; nothing of its group overtakes it.
func TestFIFOLostLeaseReleasesRestOfGroup(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := fakeFIFO(f, "lost", map[string]string{"VisibilityTimeout": "2"})
	fakeGroup(f, url, "g", "g1", "g2")
	api := &loseLease{Fake: f}
	var calls fakeCalls
	r := start(t, api, worker.Config{QueueURL: url},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if calls.add(m) == 1 && m.Body == "g1" {
				api.handle.Store(&m.ReceiptHandle)
				time.Sleep(3 * time.Second) // its lease is lost meanwhile; it ignores ctx
			}
			return nil
		}))
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, fl, d := f.Depth(url)
		return v+fl+d == 0 && r.w.Stats().LeasesLost == 1
	}, "queue not drained: %+v", r.w.Stats())
	var order []string
	for _, c := range calls.of("") {
		order = append(order, c.body)
	}
	if !slices.Equal(order, []string{"g1", "g1", "g2"}) {
		t.Errorf("handled %v, want [g1 g1 g2]: g2 must not overtake the lost g1", order)
	}
}

// A handler that returns after its lease ended no longer holds the message:
// another consumer may hold it now (here the worker's own next receive,
// which handles it again). Its job is done, so its delete is sent all the
// same (a delete is harmless to a job that is done), with its stale
// receipt handle: SQS refuses it (counted in AckFailures), and the
// consumer that holds the message now settles it. Nothing else is sent for
// the late return.
func TestHandlerPastLeaseDeleteSentOnce(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "1"})
	f.Send(url, "m")
	var calls atomic.Int64
	again := make(chan struct{})
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 2, DisableHeartbeat: true, HandlerTimeout: time.Minute},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			switch calls.Add(1) {
			case 1:
				select { // until the message, its lease ended, is handled again
				case <-again:
					// The worker counts the lease from the receive's reply,
					// later than SQS's hide by the reply's way back and the
					// dispatch: half a second more puts the return past it
					// too on a loaded machine (the test failed once in
					// make test, the lease not yet seen lost).
					time.Sleep(500 * time.Millisecond)
				case <-time.After(30 * time.Second):
				}
			case 2:
				close(again)
			} // a third call fails the test below, not with a panic here
			return nil
		}))
	localtest.Eventually(t, 40*time.Second, func() bool {
		s := r.w.Stats()
		return s.Deleted == 1 && s.AckFailures == 1 && s.InFlight == 0
	}, "not deleted: %+v", r.w.Stats())
	if s := r.w.Stats(); s.LeasesLost != 1 || s.Succeeded != 2 || s.Retried+s.Released != 0 || calls.Load() != 2 {
		t.Errorf("stats = %+v, %d calls; want the message handled again, the late return's delete refused", s, calls.Load())
	}
	if v, fl, d := f.Depth(url); v+fl+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+fl+d)
	}
}

// Shutdown ends Run promptly while Run still retries an unreachable queue at
// start-up.
func TestShutdownWhileQueueUnreachable(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("q", nil)
	f.FailNext(sqstest.OpGetQueueAttributes, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, 1_000_000)
	w, err := worker.New(f, worker.Config{QueueURL: url})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	localtest.Eventually(t, 10*time.Second, func() bool { return f.Calls(sqstest.OpGetQueueAttributes) >= 2 }, "queue not retried")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown = %v, want nil", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running after Shutdown")
	}
}

// A shutdown whose deadline passes while a long poll is under way cuts the
// handlers, not the poll: cut short, the emulator (as SQS) would keep the
// poll open and hide the released message for a whole visibility timeout.
// The message must be receivable again soon after Shutdown.
func TestShutdownDeadlineDoesNotHideReleasedMessages(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 60 * time.Second})
	localtest.Send(t, c, q.URL, "", "long")
	started := make(chan struct{}, 1)
	polls := &pollCount{API: c}
	w, err := worker.New(polls, worker.Config{QueueURL: q.URL, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			started <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}))
	}()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("handler never started")
	}
	polls.under(t, 1) // a long poll is under way
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = w.Shutdown(ctx)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	localtest.Eventually(t, 15*time.Second, func() bool {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 1})
		return err == nil && len(out.Messages) == 1
	}, "the released message stayed hidden after the shutdown")
}

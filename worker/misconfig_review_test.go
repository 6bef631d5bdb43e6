package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// stalledStart is an SQS whose first GetQueueAttributes is taken and never
// answered (a stalled endpoint).
type stalledStart struct {
	*sqstest.Fake
	calls atomic.Int32
}

func (s *stalledStart) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if s.calls.Add(1) == 1 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return s.Fake.GetQueueAttributes(ctx, in, opts...)
}

// A start whose read of the queue is never answered is tried again after
// 20 s: the worker becomes ready and runs the queue's job. It waited for
// good, never ready.
func TestStartReadNeverAnsweredIsTriedAgain(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		url := f.CreateQueue("stalled", nil)
		f.Send(url, "job")
		ran := make(chan struct{}, 1)
		r := start(t, &stalledStart{Fake: f}, worker.Config{QueueURL: url, DisableDepth: true},
			sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
				ran <- struct{}{}
				return nil
			}))
		select {
		case <-ran:
		case <-time.After(2 * time.Minute):
			t.Fatalf("the job did not run within 2 minutes; ready %v", r.w.Ready())
		}
	})
}

// deniedDeletes refuses every DeleteMessageBatch for the role.
type deniedDeletes struct{ *sqstest.Fake }

func (deniedDeletes) DeleteMessageBatch(context.Context, *sqs.DeleteMessageBatchInput, ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return nil, &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized to perform sqs:DeleteMessage", Fault: smithy.FaultClient}
}

// A role that may receive but not delete (an IAM policy without
// sqs:DeleteMessage): Run stops with the refusal after the first job,
// naming the permission, rather than run every job until SQS dead-letters
// it. It went on, each healthy job run maxReceiveCount times and
// dead-lettered.
func TestDeleteDeniedStopsRun(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	f.CreateQueue("denied-dlq", nil)
	url := f.CreateQueue("denied", map[string]string{"VisibilityTimeout": "1",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":3}`, sqstest.QueueARN("denied-dlq"))})
	f.Send(url, "job")
	var calls atomic.Int32
	w, err := worker.New(deniedDeletes{f}, worker.Config{QueueURL: url, WaitTime: time.Second, DisableDepth: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
			calls.Add(1)
			return nil
		}))
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "sqs:DeleteMessage") || !strings.Contains(err.Error(), "AccessDenied") {
			t.Errorf("Run: %v, want the refusal, naming the permission", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop")
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the handler ran %d times, want once", n)
	}
}

// A queue whose visibility timeout is 0, run without the heartbeat, is
// refused at start, naming the fix: every receive would take its message
// back at once, to run beside itself until SQS dead-letters it. So is an
// AckInterval that leaves handlers less than half the visibility timeout
// without the heartbeat: every handler would be cut short.
func TestLeaselessConfigurationsRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, vis string
		cfg       worker.Config
		want      string
	}{
		{"visibility 0", "0", worker.Config{DisableHeartbeat: true}, "visibility timeout of 0s"},
		{"AckInterval over the lease", "5", worker.Config{DisableHeartbeat: true, AckInterval: 6 * time.Second}, "AckInterval"},
	} {
		f := sqstest.NewFake()
		c.cfg.QueueURL = f.CreateQueue("q", map[string]string{"VisibilityTimeout": c.vis})
		c.cfg.WaitTime, c.cfg.Logger = time.Second, slog.New(slog.NewTextHandler(io.Discard, nil))
		w, err := worker.New(f, c.cfg)
		if err != nil {
			t.Fatalf("%s: New: %v", c.name, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = w.Run(ctx, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Run: %v, want it refused naming %q", c.name, err, c.want)
		}
	}
}

// A Shutdown without a deadline, then a second one whose context ends (a
// second signal): the handler still running is cut short then, and Run
// returns. Only the first Shutdown's context counted: the handler ran on,
// and Run with it. Run's context ending during the stop does not cut the
// handler short: the stop stays graceful (an errgroup's context cancelled
// by a sibling, say).
func TestLaterShutdownForcesTheStop(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("forced", nil)
	f.Send(url, "long")
	started := make(chan struct{})
	w, err := worker.New(f, worker.Config{QueueURL: url, WaitTime: time.Second, DisableDepth: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	done := make(chan error, 1)
	var cut atomic.Bool
	go func() {
		done <- w.Run(runCtx, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			close(started)
			<-ctx.Done()
			cut.Store(true)
			return ctx.Err()
		}))
	}()
	<-started
	go func() { _ = w.Shutdown(context.Background()) }()
	time.Sleep(500 * time.Millisecond)
	cancelRun()
	time.Sleep(time.Second)
	if cut.Load() {
		t.Fatal("Run's context ending during a graceful stop cut the handler short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_ = w.Shutdown(ctx)
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after a second Shutdown's context ended")
	}
}

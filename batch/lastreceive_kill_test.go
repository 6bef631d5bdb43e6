package batch_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// The environment of the worker process of TestCompletionSenderKilledOnLastReceive.
const (
	envKillAt   = "BATCH_TEST_KILL_AT" // "before-send" or "after-send": run as that worker process
	envCallback = "BATCH_TEST_CALLBACK"
	envNoMax    = "BATCH_TEST_NO_MAX" // set: Config.MaxReceiveCount unset, the redrive policy read
)

// lastReceiveMax is the chunks' queue's maxReceiveCount in
// TestCompletionSenderKilledOnLastReceive: the chunk's first attempt fails,
// its second is the last receive the redrive policy allows.
const lastReceiveMax = 2

// lastReceiveLease is the NotifyLease of
// TestCompletionSenderKilledOnLastReceive.
const lastReceiveLease = 3 * time.Second

// runKilledSender is the worker process of
// TestCompletionSenderKilledOnLastReceive: a worker whose handler fails a
// chunk's first attempt and succeeds on the second, the last receive its
// queue's redrive policy allows; the process kills itself (SIGKILL) as it
// sends the batch's completion job, before the request or once SQS has
// accepted it.
func runKilledSender(killAt string) error {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	// deleted is closed once the worker has deleted a message: the kill
	// waits for it (for a while), so that a chunk that handed the
	// completion to a copy of itself is not killed in the window between
	// the copy's send and its own delete, which the package documents.
	deleted := make(chan struct{})
	var once sync.Once
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("seeDeletes",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					out, md, err := next.HandleInitialize(ctx, in)
					if _, ok := in.Parameters.(*sqs.DeleteMessageBatchInput); ok && err == nil {
						once.Do(func() { close(deleted) })
					}
					return out, md, err
				}), middleware.After)
		})
	})
	callback := os.Getenv(envCallback)
	killing := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("killOnCompletion",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					send, ok := in.Parameters.(*sqs.SendMessageInput)
					if !ok || aws.ToString(send.QueueUrl) != callback {
						return next.HandleInitialize(ctx, in)
					}
					select {
					case <-deleted:
					case <-time.After(10 * time.Second):
					}
					if killAt == "before-send" {
						_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					}
					out, md, err := next.HandleInitialize(ctx, in)
					if err == nil {
						_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
					}
					return out, md, err
				}), middleware.Before)
		})
	})
	mrc := lastReceiveMax
	if os.Getenv(envNoMax) != "" {
		mrc = 0
	}
	coord, err := batch.New(ctx, db, killing, batch.Config{Table: os.Getenv(envTable), MaxReceiveCount: mrc,
		NotifyLease: lastReceiveLease, Logger: quiet()})
	if err != nil {
		return err
	}
	w, err := worker.New(client, worker.Config{
		QueueURL: os.Getenv(envQueue), Concurrency: 1, WaitTime: time.Second, DisableDepth: true,
		Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second},
		Logger:  quiet(),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx, coord.Middleware(failFirst()))
}

// failFirst is a chunk handler that fails the first attempt.
func failFirst() sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.ReceiveCount == 1 {
			return errors.New("flaky dependency")
		}
		return nil
	})
}

// The consumer sending a batch's completion is killed (SIGKILL) while the
// chunk whose count completed the batch is on the last receive its redrive
// policy allows: before the send, or once SQS has accepted it. A worker
// started afterwards sends the completion (once when the kill came before
// the send), and the chunk, which did not fail, is not in the dead-letter
// queue. Before, SQS moved the chunk to the dead-letter queue on its next
// receive, and the completion killed before its send was never sent.
func TestCompletionSenderKilledOnLastReceive(t *testing.T) {
	for _, tc := range []struct {
		name, killAt string
		noMax        bool
	}{
		{"before-send", "before-send", false},
		{"after-send", "after-send", false},
		// Config.MaxReceiveCount unset: the queue's redrive policy tells.
		{"before-send-redrive-policy", "before-send", true},
	} {
		killAt := tc.killAt
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEmulatorEnv(t, lastReceiveMax)
			coord, err := batch.New(context.Background(), e.db, e.sqs, batch.Config{Table: e.table, MaxReceiveCount: lastReceiveMax,
				NotifyLease: lastReceiveLease, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			spec := batch.Spec{ID: "last-" + tc.name, QueueURL: e.work, Callback: batch.Callback{QueueURL: e.callbacks, Body: `{"done":true}`},
				Chunks: []producer.Message{{Body: `{"rows":[0,99]}`}}}
			if err := coord.Create(ctx, spec); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envKillAt+"="+killAt, envQueue+"="+e.work, envTable+"="+e.table, envCallback+"="+e.callbacks)
			if tc.noMax {
				cmd.Env = append(cmd.Env, envNoMax+"=1")
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("worker: %v, want killed by SIGKILL\n%s", err, out)
			}
			if p := progress(t, coord, spec.ID); p.Done != 1 || !p.Notified.IsZero() {
				t.Fatalf("progress at the kill %+v", p)
			}

			// A worker started again: it runs until the completion is
			// marked sent and the chunk deleted, or the chunk is
			// dead-lettered.
			e.runWorker(t, coord.Middleware(failFirst()), "the completion, or a dead letter", func() bool {
				v, f, _ := localtest.Depth(t, e.sqs, e.chunks.DLQURL)
				if v+f > 0 {
					return true
				}
				v, f, _ = localtest.Depth(t, e.sqs, e.work)
				return v+f == 0 && !progress(t, coord, spec.ID).Notified.IsZero()
			})
			if v, f, _ := localtest.Depth(t, e.sqs, e.chunks.DLQURL); v+f != 0 {
				t.Errorf("the dead-letter queue holds %d chunks, which did not fail", v+f)
			}
			// Killed before the send: sent once. Killed once SQS had
			// accepted it, before it was marked sent: the documented
			// window of a second send, each carrying DoneKey.
			got := receive(t, e.sqs, e.callbacks, 10)
			if len(got) == 0 || killAt == "before-send" && len(got) != 1 {
				t.Errorf("%d completion jobs, want 1", len(got))
			}
			for _, m := range got {
				if k, _ := m.Attribute(idempotency.KeyAttribute); k != batch.DoneKey(spec.ID) {
					t.Errorf("a completion job with the idempotency key %q, want %q", k, batch.DoneKey(spec.ID))
				}
			}
			if p := progress(t, coord, spec.ID); p.Notified.IsZero() {
				t.Errorf("the completion is not marked sent: %+v", p)
			}
		})
	}
}

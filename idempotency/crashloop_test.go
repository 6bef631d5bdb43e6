package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// The environment of a worker process started by
// TestFIFOCrashLoopTakesOverTheDeadAttemptsClaim.
const (
	envCrashWorker  = "IDEMPOTENCY_TEST_CRASH_WORKER" // set: run as the worker process
	envCrashQueue   = "IDEMPOTENCY_TEST_CRASH_QUEUE"
	envCrashTable   = "IDEMPOTENCY_TEST_CRASH_TABLE"
	envCrashEffects = "IDEMPOTENCY_TEST_CRASH_EFFECTS"
)

func TestMain(m *testing.M) {
	if os.Getenv(envCrashWorker) != "" {
		if err := runCrashWorker(); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCrashWorker is the worker process of the crash-loop test: a worker
// with the idempotency middleware (default ClaimGrace) on a FIFO queue. It
// prints a line for each call of the job ("run N", N the receive count;
// the first receive's call hangs until the process is killed), and for
// each outcome of the middleware ("postponed N", "done N", "failed N").
// It runs until SIGTERM, or until it is killed.
func runCrashWorker() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	store, err := idempotency.NewDynamoStore(ctx, db, idempotency.StoreConfig{Table: os.Getenv(envCrashTable)})
	if err != nil {
		return err
	}
	guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
	if err != nil {
		return err
	}
	effects := os.Getenv(envCrashEffects)
	job := guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		fmt.Println("run", m.ReceiveCount)
		if m.ReceiveCount == 1 {
			select {} // killed here, holding the claim
		}
		return idempotency.AddWrites(ctx, effectWrite(effects, "crash-loop"))
	}))
	w, err := worker.New(sqs.NewFromConfig(cfg), worker.Config{
		QueueURL: os.Getenv(envCrashQueue), Concurrency: 1, WaitTime: time.Second, DisableDepth: true, Logger: quiet(),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		err := job.HandleMessage(ctx, m)
		switch {
		case sqsworker.IsPostponed(err):
			fmt.Println("postponed", m.ReceiveCount)
		case err == nil:
			fmt.Println("done", m.ReceiveCount)
		default:
			fmt.Println("failed", m.ReceiveCount)
		}
		return err
	}))
}

// A FIFO group's head whose worker dies holding its idempotency claim, in a
// crash loop: every worker that takes the head and does not run it within
// 10s is killed too. The head's next receive takes over the claim of the
// receive that died once that receive's visibility deadline is its
// heartbeat's LossLag and a second past, rather than waiting for the
// claim's lease and ClaimGrace (30s) to end while each kill spends one of
// the receives the redrive policy allows (maxReceiveCount 3): the job runs
// on its second receive, which waits for the takeover in its handler, its
// effect applied once, nothing dead-lettered.
//
// Before, the second and third workers found the claim held and waited for
// it, and SQS moved the head to the dead-letter queue on its fourth
// receive: a job no handler had failed, never applied.
func TestFIFOCrashLoopTakesOverTheDeadAttemptsClaim(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	client := localtest.NewSQS(t)
	db := localtest.NewDynamoDB(t)
	store := newStore(t, db, idempotency.StoreConfig{})
	effects := newEffectsTable(t, db)
	q := localtest.NewQueue(t, client, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 3, VisibilityTimeout: 2 * time.Second})
	sendFIFOKeyed(t, client, q.URL, "g", "crash-loop")

	// start runs a worker process; its lines arrive on the channel, which
	// is closed when the process's output ends.
	start := func() (*exec.Cmd, <-chan string) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envCrashWorker+"=1", envCrashQueue+"="+q.URL,
			envCrashTable+"="+store.Config().Table, envCrashEffects+"="+effects)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string, 16)
		go func() {
			defer close(lines)
			s := bufio.NewScanner(out)
			for s.Scan() {
				lines <- s.Text()
			}
			_, _ = io.Copy(io.Discard, out)
		}()
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, lines
	}
	// drain reads lines to the end of the output: Wait may be called only
	// then.
	drain := func(lines <-chan string) {
		for range lines {
		}
	}
	kill := func(cmd *exec.Cmd, lines <-chan string) {
		t.Helper()
		_ = cmd.Process.Kill()
		drain(lines)
		var exit *exec.ExitError
		if err := cmd.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("worker: %v, want killed by SIGKILL", err)
		}
	}
	deadLettered := func() bool {
		visible, inFlight, delayed := localtest.Depth(t, client, q.DLQURL)
		return visible+inFlight+delayed > 0
	}

	// Each worker is killed when its job hangs (the first receive), or 10s
	// after it first postponed the head: a crash loop faster than the
	// claim's lease and grace (30s), slower than the takeover's wait (the
	// first holder's visibility deadline, then its heartbeat's LossLag and
	// a second: 1.7s here).
	const crashAfter = 10 * time.Second
	var seen []string
	done := false
	for n := 1; !done; n++ {
		if n > 4 {
			t.Fatalf("4 workers and no outcome: %v", seen)
		}
		cmd, lines := start()
		var crash <-chan time.Time
		deadline := time.Now().Add(2 * time.Minute)
		killNow := false
		for !killNow && !done {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("worker %d exited: %v", n, seen)
				}
				seen = append(seen, fmt.Sprintf("worker %d: %s", n, l))
				switch {
				case l == "run 1":
					killNow = true
				case strings.HasPrefix(l, "postponed") && crash == nil:
					crash = time.After(crashAfter)
				case strings.HasPrefix(l, "done"):
					done = true
				}
			case <-crash:
				killNow = true
			case <-time.After(500 * time.Millisecond):
				if deadLettered() {
					kill(cmd, lines)
					t.Fatalf("the head was dead-lettered, its effect applied %d times: %v", applied(t, db, effects, "crash-loop"), seen)
				}
				if time.Now().After(deadline) {
					t.Fatalf("worker %d: no outcome in 2 minutes: %v", n, seen)
				}
			}
		}
		if killNow {
			kill(cmd, lines) // the crash loop
			continue
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		drain(lines)
		if err := cmd.Wait(); err != nil {
			t.Errorf("worker %d: %v", n, err)
		}
	}
	t.Logf("%s", strings.Join(seen, "; "))
	if got := applied(t, db, effects, "crash-loop"); got != 1 {
		t.Errorf("effect applied %d times, want 1", got)
	}
	localtest.Eventually(t, 30*time.Second, func() bool {
		visible, inFlight, delayed := localtest.Depth(t, client, q.URL)
		return visible+inFlight+delayed == 0
	}, "the queue still holds the job")
	if deadLettered() {
		t.Error("the dead-letter queue holds the job")
	}
}

// sendFIFOKeyed sends one message per key to a FIFO queue's group, in
// order, each with its key in the idempotency-key attribute and as its
// deduplication ID.
func sendFIFOKeyed(t *testing.T, c *sqs.Client, url, group string, keys ...string) {
	t.Helper()
	for _, k := range keys {
		_, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{
			QueueUrl: &url, MessageBody: aws.String("body-" + k),
			MessageGroupId: &group, MessageDeduplicationId: aws.String(k),
			MessageAttributes: map[string]types.MessageAttributeValue{
				idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(k)},
			},
		})
		if err != nil {
			t.Fatalf("sending %s: %v", k, err)
		}
	}
}

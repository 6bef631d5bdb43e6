package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// startShortLeases runs h on a worker of a new queue of f, whose messages'
// lease (a 2s visibility timeout) ends long before the worker's long polls
// (10s): two receive loops of one message each. It returns once both loops
// poll: a message sent then is taken by one, and the other stays in its
// poll for about 10s.
func startShortLeases(t *testing.T, f *sqstest.Fake, name string, heartbeat bool, backoff sqsworker.Backoff, h sqsworker.Handler) (*running, string) {
	t.Helper()
	url := f.CreateQueue(name, map[string]string{"VisibilityTimeout": "2"})
	r := start(t, f, worker.Config{QueueURL: url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 10 * time.Second,
		DisableHeartbeat: !heartbeat, DisableDepth: true, Backoff: backoff}, h)
	localtest.Eventually(t, 10*time.Second, func() bool { return f.Calls(sqstest.OpReceiveMessage) >= 2 }, "the loops do not poll")
	return r, url
}

// eachHeartbeat runs test in parallel with the heartbeat on and off, each
// on a Fake of its own.
func eachHeartbeat(t *testing.T, test func(t *testing.T, f *sqstest.Fake, heartbeat bool)) {
	t.Parallel()
	for _, heartbeat := range []bool{true, false} {
		t.Run(fmt.Sprint("heartbeat=", heartbeat), func(t *testing.T) {
			t.Parallel()
			test(t, sqstest.NewFake(), heartbeat)
		})
	}
}

// The visibility change of a message settled while the worker stops waits
// for the worker's last long polls only while the message's lease outlasts
// them. Here the lease (a 2s visibility timeout, which the heartbeat extends
// by 2s) ends long before the other loop's long poll (10s): a change sent
// once the polls have ended would be dropped, its receipt handle expired
// (an acknowledgement failure), and the message would come back at the end
// of its lease, to be taken again by that very long poll.
//
// A failure's backoff (10 minutes) is then lost: the message, received
// again while stopping, is released at once.
func TestFakeStoppingFailureBackoffOutlastsLastPolls(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		started, fail := make(chan struct{}, 1), make(chan struct{})
		r, url := startShortLeases(t, f, "stopfail", heartbeat,
			sqsworker.BackoffFunc(func(int, error) time.Duration { return 10 * time.Minute }),
			sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
				started <- struct{}{}
				<-fail
				return errors.New("the dependency failed")
			}))
		f.Send(url, "m")
		<-started
		stopped := make(chan struct{})
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = r.w.Shutdown(ctx)
			close(stopped)
		}()
		localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "not stopping")
		time.Sleep(50 * time.Millisecond) // receiving stops right after readiness does
		close(fail)
		<-stopped
		r.stop(10 * time.Second)
		if s := r.w.Stats(); s.Received != 1 || s.Released != 0 || s.AckFailures != 0 || s.Retried != 1 {
			t.Errorf("stats %+v: want the message received once, retried once with its backoff, no release, no acknowledgement failure", s)
		}
		if v, fl, _ := f.Depth(url); v != 0 || fl != 1 {
			t.Errorf("after the stop: %d visible, %d in flight; want the message in flight for its 10-minute backoff", v, fl)
		}
	})
}

// A handler cut short at the shutdown deadline has its message released
// once the last long polls have ended (TestFakeShutdownDeadlineReleaseIsNotReceivedAgain)
// also when its lease ends before they do: it stays invisible until they
// have ended, and its release is not dropped as an acknowledgement failure.
func TestFakeShutdownDeadlineReleaseShortLease(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		started := make(chan struct{}, 1)
		r, url := startShortLeases(t, f, "rereceive-short", heartbeat, nil,
			sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				started <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}))
		f.Send(url, "m")
		<-started
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = r.w.Shutdown(ctx)
		r.stop(30 * time.Second)
		if s := r.w.Stats(); s.Received != 1 || s.AckFailures != 0 {
			t.Errorf("stats %+v: want the message received once (the worker's own last long poll took it again?), no acknowledgement failure", s)
		}
	})
}

// A message a last long poll brings while the worker stops is released
// unstarted, and not taken again by another loop's last long poll, also
// when its lease ends before they do: it stays invisible until they have
// ended, then comes back received once.
func TestFakeReceivedWhileStoppingShortLease(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		r, url := startShortLeases(t, f, "stopping-short", heartbeat, nil,
			sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				t.Errorf("handler ran for %s while the worker was stopping", m.ID)
				return nil
			}))
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = r.w.Shutdown(context.Background())
		}()
		localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
		f.Send(url, "m") // taken by one of the two long polls under way
		<-stopped
		r.stop(30 * time.Second)
		if s := r.w.Stats(); s.Received != 1 || s.AckFailures != 0 {
			t.Errorf("stats %+v: want the message received once (the worker's own last long poll took it again?), no acknowledgement failure", s)
		}
		if v, inFlight, _ := f.Depth(url); v+inFlight != 1 {
			t.Fatalf("depth %d visible, %d in flight: want the message", v, inFlight)
		}
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 20,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("after the stop: %d messages, %v; want the released one", len(out.Messages), err)
		}
		if n := out.Messages[0].Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
		}
	})
}

// lateReceives is a client whose receives, once armed, reach the queue
// late: as a receive does that the SDK sends again after a failed attempt,
// or that a slow network holds up. The first late receive signals entered.
type lateReceives struct {
	worker.API
	late    time.Duration
	armed   atomic.Bool
	entered chan struct{}
	once    sync.Once
	// gaveUp, if set, is closed when the first late receive is given up
	// on (its context ends).
	gaveUp     chan struct{}
	gaveUpOnce sync.Once
	// fail, if set, is what the late receives return instead of reaching
	// the queue.
	fail error
}

func (l *lateReceives) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if l.armed.Load() {
		l.once.Do(func() { close(l.entered) })
		select {
		case <-time.After(l.late):
			if l.fail != nil {
				return nil, l.fail
			}
		case <-ctx.Done():
			if l.gaveUp != nil {
				l.gaveUpOnce.Do(func() { close(l.gaveUp) })
			}
			return nil, ctx.Err()
		}
	}
	return l.API.ReceiveMessage(ctx, in, opts...)
}

// stopBehindLateReceive runs h on a worker of url through api: two receive
// loops of one message each, 2s long polls. send sends a message; once h
// runs, api's receives are armed, and once one is on its way, late, the
// worker is shut down with a 100ms deadline. It returns the stopped worker.
func stopBehindLateReceive(t *testing.T, api *lateReceives, url string, send func(), heartbeat bool,
	h func(ctx context.Context) error) *running {
	t.Helper()
	started := make(chan struct{}, 1)
	r := start(t, api, worker.Config{QueueURL: url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 2 * time.Second,
		DisableHeartbeat: !heartbeat, DisableDepth: true},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			started <- struct{}{}
			return h(ctx)
		}))
	send()
	<-started
	api.armed.Store(true)
	<-api.entered // a receive is on its way, late
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	r.stop(60 * time.Second) // a receive given up on ends 22s after its start
	if s := r.w.Stats(); s.Received != 1 || s.Released != 1 || s.AckFailures != 0 {
		t.Errorf("stats %+v: want the message received once (a late last receive took it again?), released once, no acknowledgement failure", s)
	}
	return r
}

// untilCancelled is a handler that returns once its context is cancelled.
func untilCancelled(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// checkHiddenThenBack checks that f's queue url hides its one message right
// after the stop, and shows it again within 30s.
func checkHiddenThenBack(t *testing.T, f *sqstest.Fake, url string) {
	t.Helper()
	if v, inFlight, _ := f.Depth(url); v != 0 || inFlight != 1 {
		t.Errorf("right after the stop: %d visible, %d in flight; want the message hidden while the failed receive may be open", v, inFlight)
	}
	localtest.Eventually(t, 30*time.Second, func() bool { v, _, _ := f.Depth(url); return v == 1 }, "the message does not come back")
}

// A message released at the shutdown deadline whose lease ends before the
// last receives do is hidden until they have surely ended, not only until
// WaitTime after the stop: a last receive that reaches SQS late (here 5s
// late, with 2s long polls and a 4s lease) does not take it again. Once the
// receives have ended it is made visible at once.
func TestFakeShutdownDeadlineReleaseLateLastReceive(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		api := &lateReceives{API: f, late: 5 * time.Second, entered: make(chan struct{})}
		url := f.CreateQueue("late-receive", map[string]string{"VisibilityTimeout": "4"})
		stopBehindLateReceive(t, api, url, func() { f.Send(url, "m") }, heartbeat, untilCancelled)
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("after the stop: %d messages, %v; want the released one, visible at once", len(out.Messages), err)
		}
		if n := out.Messages[0].Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
		}
	})
}

// A last receive that never comes back is given up on after WaitTime and
// 20s, and its long poll may still be open at SQS: a message released at
// the shutdown deadline stays hidden for WaitTime and 2s more after that,
// not made visible as soon as the receive loops have returned.
func TestFakeShutdownDeadlineReleaseReceiveGivenUp(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		api := &lateReceives{API: f, late: time.Hour, entered: make(chan struct{})}
		url := f.CreateQueue("given-up", map[string]string{"VisibilityTimeout": "4"})
		stopBehindLateReceive(t, api, url, func() { f.Send(url, "m") }, heartbeat, untilCancelled)
		checkHiddenThenBack(t, f, url)
	})
}

// A message released after the receive loops have returned, while a
// receive given up on may still be open at SQS (a handler that ignores its
// context, and returns after the loops gave that receive up), stays hidden
// until that receive has surely ended, as one released before they
// returned does (TestFakeShutdownDeadlineReleaseReceiveGivenUp): not made
// visible at once, for the open receive to take.
func TestFakeReleaseAfterLoopsReturnedReceiveGivenUp(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		api := &lateReceives{API: f, late: time.Hour, entered: make(chan struct{}), gaveUp: make(chan struct{})}
		url := f.CreateQueue("given-up-after", map[string]string{"VisibilityTimeout": "120"})
		stopBehindLateReceive(t, api, url, func() { f.Send(url, "m") }, heartbeat, func(ctx context.Context) error {
			// Ignores its context, cancelled long before; returns once the
			// loops have returned.
			<-api.gaveUp
			time.Sleep(500 * time.Millisecond)
			return ctx.Err()
		})
		checkHiddenThenBack(t, f, url)
	})
}

// A last receive that fails on the network (here its connection reset
// after 1s) may still be waiting at SQS: a message released at the shutdown
// deadline stays hidden for WaitTime and 2s after the failure, not made
// visible as soon as the receive loops have returned.
func TestFakeShutdownDeadlineReleaseReceiveFailed(t *testing.T) {
	eachHeartbeat(t, func(t *testing.T, f *sqstest.Fake, heartbeat bool) {
		reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
		api := &lateReceives{API: f, late: time.Second, entered: make(chan struct{}), fail: reset}
		url := f.CreateQueue("receive-failed", map[string]string{"VisibilityTimeout": "4"})
		stopBehindLateReceive(t, api, url, func() { f.Send(url, "m") }, heartbeat, untilCancelled)
		checkHiddenThenBack(t, f, url)
	})
}

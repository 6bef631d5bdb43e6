package worker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// probeStopQueue is a FIFO queue whose redrive policy allows 2 receives, and
// its dead-letter queue, on the Fake or on the emulator.
type probeStopQueue struct {
	api         worker.API
	url, dlqURL string
	// send sends body to group.
	send func(group, body string)
	// receiveOnce receives every visible message once and makes it visible
	// again at once: each message's receive count goes up by one.
	receiveOnce func()
	// depth returns a queue's visible, in-flight and delayed counts.
	depth func(url string) (visible, inFlight, delayed int)
	// bodies receives and returns every message of a queue.
	bodies func(url string) []string
}

func fakeProbeStopQueue(t *testing.T, f *sqstest.Fake) probeStopQueue {
	dlq := f.CreateQueue("probe-stop-dlq.fifo", map[string]string{"FifoQueue": "true"})
	url := fakeFIFO(f, "probe-stop", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("probe-stop-dlq.fifo"))})
	return probeStopQueue{api: f, url: url, dlqURL: dlq,
		send:        func(group, body string) { fakeGroup(f, url, group, body) },
		receiveOnce: func() { receiveOnce(t, f, url) },
		depth:       f.Depth,
		bodies: func(url string) []string {
			out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
			if err != nil {
				t.Fatal(err)
			}
			var b []string
			for _, m := range out.Messages {
				b = append(b, aws.ToString(m.Body))
			}
			return b
		}}
}

func emulatorProbeStopQueue(t *testing.T) probeStopQueue {
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 2})
	return probeStopQueue{api: c, url: q.URL, dlqURL: q.DLQURL,
		send:        func(group, body string) { localtest.Send(t, c, q.URL, group, body) },
		receiveOnce: func() { receiveOnce(t, c, q.URL) },
		depth:       func(url string) (int, int, int) { return localtest.Depth(t, c, url) },
		bodies: func(url string) []string {
			var b []string
			for _, m := range localtest.ReceiveAll(t, c, url, 2*time.Second, 30*time.Second) {
				b = append(b, aws.ToString(m.Body))
			}
			return b
		}}
}

// A FIFO message on the last receive its redrive policy allows (a0, on its
// second of 2), its dependency down, waits in flight for the circuit
// breaker's probe, when the worker is shut down: the breaker opened for
// 16-24 s (a ProbeInterval of 20 s) on a failure of b0, of another group,
// while a0 waited out its backoff of 5 s. Shutdown ends the wait: a0 runs
// once more at once, fails again, and is hidden until the breaker's next
// probe; Shutdown returns well within its deadline, nil.
//
// What becomes of a0 is a limit of FIFO queues, not a fault of the wait:
// not released, but not deleted either, it comes back on its third receive,
// which SQS turns into a move to the dead-letter queue, with no handler
// call, though no attempt failed but for its dependency. A standard queue's
// message would wait in a fresh copy; a FIFO copy would go behind the rest
// of its group. The restarted worker, its dependency back, never sees a0,
// and handles b0 (on its second receive) once. The worker logs, at the
// stop, that SQS will move a0 to the dead-letter queue, for it to be
// replayed.
func stopWhileWaitingForProbe(t *testing.T, q probeStopQueue) {
	q.send("a", "a0")
	q.receiveOnce() // the worker's receive is a0's second, its last
	q.send("b", "b0")
	var down atomic.Bool
	down.Store(true)
	aWaits := make(chan struct{}) // closed once a0 waits in flight
	var calls fakeCalls
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		calls.add(m)
		if !down.Load() {
			return nil
		}
		if m.Body == "b0" {
			select {
			case <-aWaits:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return sqsworker.Unavailable(errors.New("the dependency is down"))
	})
	cfg := worker.Config{QueueURL: q.url,
		Breaker: sqsworker.BreakerConfig{Threshold: 2, ProbeInterval: 20 * time.Second},
		Backoff: sqsworker.BackoffFunc(func(int, error) time.Duration { return 5 * time.Second })}
	r := start(t, q.api, cfg, h)
	localtest.Eventually(t, 30*time.Second, func() bool { return strings.Contains(r.logs.String(), "kept in flight") },
		"a0 did not wait in flight")
	close(aWaits) // b0 fails now: 2 in a row, the breaker opens
	localtest.Eventually(t, 30*time.Second, func() bool {
		return strings.Contains(r.logs.String(), "waiting in flight for the circuit breaker's probe")
	}, "a0 did not wait for the breaker's probe: %+v", r.w.Stats())
	if s := r.w.Stats(); s.BreakerOpens != 1 || s.BreakerProbes != 0 {
		t.Fatalf("breaker opened %d times, %d probes, want open once, no probe yet", s.BreakerOpens, s.BreakerProbes)
	}

	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut <- r.w.Shutdown(ctx)
	}()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("Shutdown = %v, want nil within its deadline of 30 s", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Shutdown did not return")
	}
	r.stop(10 * time.Second) // Run returned nil
	want := []fakeCall{{"a0", 2}, {"a0", 2}, {"b0", 1}}
	got := calls.of("")
	slices.SortStableFunc(got, func(x, y fakeCall) int { return strings.Compare(x.body, y.body) })
	if !slices.Equal(got, want) {
		t.Errorf("calls %v, want %v: a0 once more at the stop", got, want)
	}
	if s := r.w.Stats(); s.Deleted != 0 || s.DeadLettered != 0 || s.Released != 0 || s.InFlight != 0 {
		t.Errorf("stats %+v, want nothing deleted, dead-lettered or released", s)
	}
	// Both hidden, not released: a0 until the breaker's next probe, b0
	// for its backoff.
	if v, fl, d := q.depth(q.url); v != 0 || fl != 2 || d != 0 {
		t.Errorf("queue: %d visible, %d in flight, %d delayed, want 2 in flight", v, fl, d)
	}
	if l := r.logs.String(); !strings.Contains(l, "level=ERROR msg=\"FIFO message failed for a dependency down on its last receive") ||
		!strings.Contains(l, "SQS moves it to the dead-letter queue on its next receive") {
		t.Errorf("no error logged that SQS will move a0 to the dead-letter queue")
	}

	// The dependency back, a worker restarted: SQS moves a0, back on its
	// third receive, to the dead-letter queue; b0 is handled.
	down.Store(false)
	r2 := start(t, q.api, worker.Config{QueueURL: q.url}, h)
	localtest.Eventually(t, 2*time.Minute, func() bool {
		v, fl, d := q.depth(q.dlqURL)
		return len(calls.of("b0")) == 2 && v+fl+d == 1
	}, "b0 not handled, or a0 not dead-lettered: %+v", r2.w.Stats())
	r2.stop(30 * time.Second)
	if got, want := calls.of("a0"), []fakeCall{{"a0", 2}, {"a0", 2}}; !slices.Equal(got, want) {
		t.Errorf("a0's calls %v, want %v: the two before the stop, none after", got, want)
	}
	if got, want := calls.of("b0"), []fakeCall{{"b0", 1}, {"b0", 2}}; !slices.Equal(got, want) {
		t.Errorf("b0's calls %v, want %v: handled on its second receive", got, want)
	}
	if s := r2.w.Stats(); s.Deleted != 1 || s.DeadLettered != 0 {
		t.Errorf("restarted worker's stats %+v, want b0 deleted, nothing dead-lettered by the worker", s)
	}
	if got := q.bodies(q.dlqURL); !slices.Equal(got, []string{"a0"}) {
		t.Errorf("dead-letter queue holds %v, want a0", got)
	}
	if v, fl, d := q.depth(q.url); v+fl+d != 0 {
		t.Errorf("queue holds %d messages, want none", v+fl+d)
	}
}

// On the Fake, on fake time.
func TestFakeFIFOStopWhileWaitingForProbeOnLastReceive(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		stopWhileWaitingForProbe(t, fakeProbeStopQueue(t, sqstest.NewFake()))
	})
}

// On the emulator.
func TestFIFOStopWhileWaitingForProbeOnLastReceive(t *testing.T) {
	t.Parallel()
	stopWhileWaitingForProbe(t, emulatorProbeStopQueue(t))
}

package worker_test

// What an SQS that stops answering while the worker stops costs the stop:
// a heartbeat extension that hangs, or copies whose sends hang. On
// sqstest.Fake (in a synctest bubble: its clock is fake, so the bounds are
// exact) and on the emulator (with margins of several times the expected
// figure).

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

// hungExtensions is a client whose heartbeat extensions (the batch changes
// whose every entry sets extension seconds) go unanswered until their
// context ends, as an SQS that stopped answering them: the heartbeat gives
// such a call up after its Interval. Other calls pass.
type hungExtensions struct {
	worker.API
	extension int32
	held      chan struct{} // closed once an extension hangs
	once      sync.Once
}

func (h *hungExtensions) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	extension := len(in.Entries) > 0
	for _, e := range in.Entries {
		extension = extension && e.VisibilityTimeout == h.extension
	}
	if !extension {
		return h.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
	}
	h.once.Do(func() { close(h.held) })
	<-ctx.Done()
	return nil, ctx.Err()
}

// stopQueue is a queue of the tests below, on the fake or the emulator.
type stopQueue struct {
	api   worker.API
	url   string
	send  func(bodies ...string)
	depth func() (visible, inFlight, delayed int)
}

func fakeStopQueue(name string, attrs map[string]string) stopQueue {
	f := sqstest.NewFake()
	url := f.CreateQueue(name, attrs)
	return stopQueue{api: f, url: url,
		send: func(bodies ...string) {
			for _, b := range bodies {
				f.Send(url, b)
			}
		},
		depth: func() (int, int, int) { return f.Depth(url) }}
}

func emulatorStopQueue(t *testing.T, o localtest.QueueOptions) stopQueue {
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, o)
	return stopQueue{api: c, url: q.URL,
		send:  func(bodies ...string) { localtest.Send(t, c, q.URL, "", bodies...) },
		depth: func() (int, int, int) { return localtest.Depth(t, c, q.URL) }}
}

// hungHeartbeat: on a queue whose visibility timeout is 60s, the first
// round comes 30s after the start and extends every message (by 10
// minutes); a hung extension call is given up 30s after it was sent.
var hungHeartbeat = visibility.Config{Threshold: 50 * time.Second, Interval: 30 * time.Second, Extension: 10 * time.Minute}

// A handler cut short at the shutdown deadline while a heartbeat extension
// of its message hangs is released once the ack flush grace (5s) has
// passed, without waiting for the heartbeat to give the call up (its
// Interval, 30s): the stop ends some 5s after the deadline. The messages
// handled are deleted, among them one whose handler returned during the
// stop; the cut message is made visible again. Before, Run returned only
// once the extension call was given up, some 30s after the deadline. On
// the emulator: TestShutdownNotHeldByHungExtension.
func TestFakeShutdownNotHeldByHungExtension(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		shutdownBehindHungExtension(t, fakeStopQueue("hung-extension", map[string]string{"VisibilityTimeout": "60"}), 10*time.Second)
	})
}

func TestShutdownNotHeldByHungExtension(t *testing.T) {
	t.Parallel()
	shutdownBehindHungExtension(t, emulatorStopQueue(t, localtest.QueueOptions{VisibilityTimeout: 60 * time.Second}), 18*time.Second)
}

// shutdownBehindHungExtension runs the test above on q: Run must return
// within within of the shutdown deadline.
func shutdownBehindHungExtension(t *testing.T, q stopQueue, within time.Duration) {
	api := &hungExtensions{API: q.api, extension: int32(hungHeartbeat.Extension / time.Second), held: make(chan struct{})}
	stopping := make(chan struct{})
	cut := make(chan error, 1)
	var handled atomic.Int32
	q.send("done-1", "done-2", "slow", "cut")
	r := start(t, api, worker.Config{QueueURL: q.url, Concurrency: 4, MaxMessages: 10, WaitTime: time.Second,
		DisableDepth: true, Heartbeat: hungHeartbeat},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			switch m.Body {
			case "slow": // returns once the stop has begun: its delete is sent while stopping
				<-stopping
			case "cut":
				<-ctx.Done()
				cut <- context.Cause(ctx)
				return ctx.Err()
			}
			handled.Add(1)
			return nil
		}))
	select {
	case <-api.held:
	case <-time.After(2 * time.Minute):
		t.Fatal("no extension was sent")
	}
	if s := r.w.Stats(); s.Received != 4 {
		t.Fatalf("stats %+v: want the 4 messages received before the first round", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	go func() { _ = r.w.Shutdown(ctx) }()
	localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
	close(stopping)
	var err error
	select {
	case err = <-r.done:
		r.done <- err // for the cleanup's stop
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return")
	}
	took := time.Since(deadline)
	t.Logf("Run returned %s after the shutdown deadline", took.Round(time.Millisecond))
	if err != nil {
		t.Errorf("Run returned %v", err)
	}
	if took > within {
		t.Errorf("Run returned %s after the shutdown deadline, want within %s: the release of the cut message waited for the hung extension (Interval %s)",
			took.Round(time.Millisecond), within, hungHeartbeat.Interval)
	}
	select {
	case cause := <-cut:
		if cause != worker.ErrShutdown {
			t.Errorf("the cut handler's cause is %v, want ErrShutdown", cause)
		}
	default:
		t.Error("the cut handler did not return")
	}
	if n := handled.Load(); n != 3 {
		t.Errorf("%d messages handled, want 3", n)
	}
	s := r.w.Stats()
	if s.Succeeded != 3 || s.Deleted != 3 || s.Released != 1 || s.AckFailures != 0 || s.LeasesLost != 0 {
		t.Errorf("stats %+v: want 3 handled and deleted, the cut one released, no failure", s)
	}
	if v, fl, d := q.depth(); v != 1 || fl != 0 || d != 0 {
		t.Errorf("queue after the stop: %d visible, %d in flight, %d delayed; want the cut message visible, the others deleted", v, fl, d)
	}
}

// hungSends is a client whose SendMessage calls, once armed, go to hang
// instead: an SQS that takes the copies' sends and never answers.
type hungSends struct {
	worker.API
	hang  func(ctx context.Context, in *sqs.SendMessageInput) error
	armed atomic.Bool
	sends atomic.Int64
}

func (h *hungSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if !h.armed.Load() {
		return h.API.SendMessage(ctx, in, opts...)
	}
	h.sends.Add(1)
	return nil, h.hang(ctx, in)
}

// firstAttempts receives q's n messages and keeps them invisible, as first
// attempts that failed, and returns a function that makes them all visible
// again at once.
func (q relQueue) firstAttempts(t *testing.T, n int) (release func()) {
	t.Helper()
	var entries []types.ChangeMessageVisibilityBatchRequestEntry
	for len(entries) < n {
		out, err := q.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.url, MaxNumberOfMessages: 10,
			WaitTimeSeconds: 5, VisibilityTimeout: 300})
		if err != nil || len(out.Messages) == 0 {
			t.Fatalf("first receives: %d of %d messages, then %v", len(entries), n, err)
		}
		for _, m := range out.Messages {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(fmt.Sprint(len(entries))), ReceiptHandle: m.ReceiptHandle})
		}
	}
	return func() {
		out, err := q.api.ChangeMessageVisibilityBatch(context.Background(), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.url, Entries: entries})
		if err != nil || len(out.Failed) > 0 {
			t.Fatalf("making the messages visible: %v %v", err, out)
		}
	}
}

// Ten messages that one of the stopping worker's last long polls takes,
// each on the last receive its redrive policy allows, are released in
// fresh copies sent at once, not one after another: when SQS takes the
// sends and never answers, the stop waits for one send's bound (5s), not
// ten, and every message falls back to its release by visibility, as
// before (none lost, none dead-lettered by the worker). When the sends
// pass, the ten copies take the place of the originals. Before, the copies
// went one after another from the receive loop, and the hanging sends held
// the stop up some 50s. On the emulator, the sends go through a fault
// proxy that swallows them (faultproxy.Blackhole).
func TestStoppingCopiesShareOneBound(t *testing.T) {
	eachHungSends(t, "stopping-copies", 10*time.Second, 25*time.Second, copiesWhileStopping)
}

// eachHungSends runs test with sends that pass, and with sends that hang
// until their context ends: on the fake (in a synctest bubble, the stop
// within fakeWithin) and on the emulator, whose sends go through a fault
// proxy that swallows them (the stop within emuWithin).
func eachHungSends(t *testing.T, name string, fakeWithin, emuWithin time.Duration,
	test func(t *testing.T, q relQueue, api *hungSends, hang bool, within time.Duration)) {
	t.Parallel()
	for _, hang := range []bool{true, false} {
		t.Run(fmt.Sprint("hang=", hang), func(t *testing.T) {
			t.Parallel()
			t.Run("fake", func(t *testing.T) {
				t.Parallel()
				bubble.Test(t, func(t *testing.T) {
					q := fakeRelQueue(t, name)
					api := &hungSends{API: q.api, hang: func(ctx context.Context, _ *sqs.SendMessageInput) error {
						<-ctx.Done()
						return ctx.Err()
					}}
					test(t, q, api, hang, fakeWithin)
				})
			})
			t.Run("emulator", func(t *testing.T) {
				t.Parallel()
				q := emuRelQueue(t)
				api, proxy := sendsThroughProxy(t, q)
				if err := proxy.Blackhole(); err != nil {
					t.Fatal(err)
				}
				test(t, q, api, hang, emuWithin)
			})
		})
	}
}

// copiesWhileStopping runs the test above on q through api: the stop must
// end within within of the messages' release to the last long poll.
func copiesWhileStopping(t *testing.T, q relQueue, api *hungSends, hang bool, within time.Duration) {
	took, s := stopWithCopies(t, q, api, hang)
	if hang {
		if took > within {
			t.Errorf("the stop took %s, want within %s: one bound of a hanging send, not one per copy", took.Round(time.Millisecond), within)
		}
		if s.Requeued != 0 || s.RequeueFailures != copies || api.sends.Load() != copies {
			t.Errorf("stats %+v, %d sends: want each copy sent once and given up", s, api.sends.Load())
		}
	} else if s.Requeued != copies || s.RequeueFailures != 0 {
		t.Errorf("stats %+v: want the %d copies sent", s, copies)
	}
	// Released by visibility, or replaced by copies: in the queue either way.
	if got := q.count(q.url); got != copies {
		t.Errorf("%d messages in the queue after the stop, want %d", got, copies)
	}
}

// copies is the number of messages the tests of copies sent while stopping
// release: one receive's worth.
const copies = 10

// stopWithCopies sends copies messages to q and takes their first
// attempts, starts a worker on q through api, stops it and, once it polls
// no more, makes the messages visible for its last long poll to take, on
// their last receive; api's sends are armed then if arm is set. It returns
// how long the stop took from then, and the worker's stats, once it has
// checked that the messages were all received and released while stopping,
// none run nor dead-lettered.
func stopWithCopies(t *testing.T, q relQueue, api *hungSends, arm bool) (time.Duration, worker.Stats) {
	t.Helper()
	for i := range copies {
		q.send(t, fmt.Sprint("job-", i))
	}
	visible := q.firstAttempts(t, copies)
	polls := &pollCount{API: api}
	r := start(t, polls, worker.Config{QueueURL: q.url, Concurrency: copies, Pollers: 1, MaxMessages: copies, WaitTime: 5 * time.Second, DisableDepth: true},
		sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			t.Errorf("handler ran for %s while the worker was stopping", m.ID)
			return nil
		}))
	polls.under(t, 1) // the loop in its long poll
	stopped := make(chan error, 1)
	go func() { stopped <- r.w.Shutdown(context.Background()) }()
	localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
	api.armed.Store(arm)
	begin := time.Now()
	visible() // taken by the last long poll
	select {
	case err := <-stopped:
		if err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("Shutdown did not return")
	}
	took := time.Since(begin)
	t.Logf("stopped %s after the messages were made visible", took.Round(time.Millisecond))
	r.stop(10 * time.Second)
	s := r.w.Stats()
	if s.Received != copies || s.Released != copies || s.DeadLettered != 0 || s.AckFailures != 0 {
		t.Fatalf("stats %+v: want the %d messages received by the last long poll and released", s, copies)
	}
	if got := q.count(q.dlq); got != 0 {
		t.Errorf("%d messages dead-lettered by the stop, want none", got)
	}
	return took, s
}

// Should SQS take the copies sent while stopping but their replies be lost
// (the test's fault proxy resets the connection as SQS answers, ten
// times), the SDK sends them again: the jobs wait in twenty copies, their
// originals deleted, and the copies of a job carry its key
// (idempotency.DefaultKey), so that the idempotency middleware applies its
// effect once. The stop is not held up.
func TestEmulatorStoppingCopiesLostReplies(t *testing.T) {
	t.Parallel()
	q := emuRelQueue(t)
	api, proxy := sendsThroughProxy(t, q)
	if err := proxy.LoseReplies(copies); err != nil {
		t.Fatal(err)
	}
	took, s := stopWithCopies(t, q, api, true)
	if took > 25*time.Second {
		t.Errorf("the stop took %s", took.Round(time.Millisecond))
	}
	if lost := proxy.Stats().LostReplies; s.Requeued != copies || s.RequeueFailures != 0 || lost != copies {
		t.Fatalf("stats %+v, %d replies lost: want the %d copies sent, every first reply lost", s, lost, copies)
	}
	// The copies wait until the stopped worker's last polls have surely
	// ended (some 30s).
	var got []types.Message
	localtest.Eventually(t, 2*time.Minute, func() bool {
		out, err := q.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.url, MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, VisibilityTimeout: 300, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, out.Messages...)
		return len(got) >= 2*copies
	}, "%d copies received, want %d", len(got), 2*copies)
	time.Sleep(2 * time.Second)
	if v, fl, d := localtest.Depth(t, q.api.(*sqs.Client), q.url); v+fl+d != len(got) {
		t.Errorf("%d copies received, %d in the queue: more copies than expected", len(got), v+fl+d)
	}
	keys := map[string]int{}
	for i := range got {
		keys[idempotency.DefaultKey(sqsmsg.FromSDK(q.url, &got[i]))]++
	}
	// Every lost reply made a copy more; a copy sent again may lose its
	// reply again, so that a job may have three, and another one.
	if len(got) != 2*copies || len(keys) != copies {
		t.Errorf("%d copies with %d keys (%v), want %d, one key per job", len(got), len(keys), keys, 2*copies)
	}
}

// sendsThroughProxy returns q's API whose SendMessage calls, alone, go
// through a fault proxy in front of the emulator, and that proxy.
func sendsThroughProxy(t *testing.T, q relQueue) (*hungSends, *faultproxy.Proxy) {
	t.Helper()
	proxy, via := proxiedSQS(t)
	return &hungSends{API: q.api, hang: func(ctx context.Context, in *sqs.SendMessageInput) error {
		_, err := via.SendMessage(ctx, in)
		return err
	}}, proxy
}

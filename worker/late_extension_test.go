package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
	"github.com/sqsworker/sqsworker/worker"
)

// lateExtensions is a client whose heartbeat extensions (the batch changes
// whose every entry sets extension seconds), once armed, land late: as an
// extension does that the SDK sends again after a throttle or a lost reply,
// still under way when the worker changes the message's visibility itself.
// A held extension lands as soon as a visibility change of another length
// has landed (what the worker sends once the message is settled), or, at
// the latest, when the call's own context ends: the client gives the call
// up, and the request it sent last lands then.
type lateExtensions struct {
	worker.API
	extension int32
	armed     atomic.Bool

	held        chan struct{} // closed once an extension is held
	heldOnce    sync.Once
	changed     chan struct{} // closed once another change landed while armed
	changedOnce sync.Once
	// after counts the held extensions that landed after another change.
	after atomic.Int32
}

func newLateExtensions(api worker.API, extension time.Duration) *lateExtensions {
	return &lateExtensions{API: api, extension: int32(extension / time.Second), held: make(chan struct{}), changed: make(chan struct{})}
}

func (l *lateExtensions) isExtension(in *sqs.ChangeMessageVisibilityBatchInput) bool {
	for _, e := range in.Entries {
		if e.VisibilityTimeout != l.extension {
			return false
		}
	}
	return len(in.Entries) > 0
}

func (l *lateExtensions) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if !l.armed.Load() {
		return l.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
	}
	if l.isExtension(in) {
		l.heldOnce.Do(func() { close(l.held) })
		select {
		case <-l.changed:
			l.after.Add(1)
		case <-ctx.Done():
		}
		return l.API.ChangeMessageVisibilityBatch(context.WithoutCancel(ctx), in, opts...)
	}
	out, err := l.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
	l.changedOnce.Do(func() { close(l.changed) })
	return out, err
}

// lateHeartbeat is the heartbeat of the tests below, on a queue whose
// visibility timeout is 4s: a round every 1.5s, each extending by 4s the
// leases with 3s or less left, so that every round extends a message that
// is being handled. An extension call may take up to 1.5s, and lands before
// the lease ends.
var lateHeartbeat = visibility.Config{Threshold: 3 * time.Second, Interval: 1500 * time.Millisecond}

// lateQueue is a queue the tests below run on: the Fake or the emulator.
type lateQueue struct {
	api  worker.API
	url  string
	send func()
	// depth returns the queue's visible and in-flight counts.
	depth func() (visible, inFlight int)
	// receive receives what is visible, waiting up to 1s, with the
	// ApproximateReceiveCount attribute.
	receive func() []types.Message
}

func fakeLateQueue(t *testing.T, f *sqstest.Fake, name string) lateQueue {
	url := f.CreateQueue(name, map[string]string{"VisibilityTimeout": "4"})
	return lateQueue{api: f, url: url, send: func() { f.Send(url, "m") },
		depth: func() (int, int) { v, fl, _ := f.Depth(url); return v, fl },
		receive: func() []types.Message {
			out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
			if err != nil {
				t.Fatal(err)
			}
			return out.Messages
		}}
}

func emulatorLateQueue(t *testing.T) lateQueue {
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 4 * time.Second})
	return lateQueue{api: c, url: q.URL, send: func() { localtest.Send(t, c, q.URL, "", "m") },
		depth: func() (int, int) { v, fl, _ := localtest.Depth(t, c, q.URL); return v, fl },
		receive: func() []types.Message {
			out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), WaitTimeSeconds: 1,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
			if err != nil {
				t.Fatal(err)
			}
			return out.Messages
		}}
}

// A message retried with a short backoff (1s) while a heartbeat extension
// of it (60s) is still under way comes back after its backoff: the
// extension, landing after the retry's visibility change, would hide it for
// a minute. The worker's receives reach the queue 10s late, so that the
// test's own receive sees the message visible before one takes it. On the
// emulator:
// TestRetryNotUndoneByLateExtension.
func TestFakeRetryNotUndoneByLateExtension(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		retryBehindLateExtension(t, fakeLateQueue(t, sqstest.NewFake(), "late-extension-retry"), time.Minute)
	})
}

func TestRetryNotUndoneByLateExtension(t *testing.T) {
	t.Parallel()
	retryBehindLateExtension(t, emulatorLateQueue(t), 2*time.Minute)
}

func retryBehindLateExtension(t *testing.T, q lateQueue, stopAfter time.Duration) {
	late := &lateReceives{API: q.api, late: 10 * time.Second, entered: make(chan struct{})}
	api := newLateExtensions(late, time.Minute)
	var calls atomic.Int32
	failed, handled := make(chan struct{}), make(chan struct{})
	hb := lateHeartbeat
	hb.Extension = time.Minute
	r := start(t, api, worker.Config{QueueURL: q.url, Concurrency: 1, MaxMessages: 1, WaitTime: time.Second,
		DisableDepth: true, Heartbeat: hb,
		Backoff: sqsworker.BackoffFunc(func(int, error) time.Duration { return time.Second })},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if calls.Add(1) > 1 {
				close(handled)
				return nil
			}
			late.armed.Store(true)
			api.armed.Store(true)
			<-api.held // an extension of this message is under way
			close(failed)
			return errTransient
		}))
	q.send()
	<-failed
	// A receive of the test's own (the emulator's depth counts lag behind
	// visibility timeouts), which hides the message for 4s again.
	time.Sleep(5 * time.Second)
	if got := q.receive(); len(got) != 1 {
		t.Errorf("5s after a retry with a 1s backoff: %d messages received; want the message, visible (a late extension hid it again?)", len(got))
	}
	select {
	case <-handled:
	case <-time.After(stopAfter):
		t.Errorf("the retried message was not handled again within %s", stopAfter)
	}
	r.stop(time.Minute)
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2", n)
	}
	if s := r.w.Stats(); s.Received != 2 || s.Retried != 1 || s.Succeeded != 1 || s.AckFailures != 0 || s.LeasesLost != 0 {
		t.Errorf("stats %+v: want the message received twice, retried once, then handled; no acknowledgement failure, no lost lease", s)
	}
	if n := api.after.Load(); n != 0 {
		t.Errorf("%d extensions landed after the retry's visibility change", n)
	}
	if v, fl := q.depth(); v+fl != 0 {
		t.Errorf("after the stop: %d visible, %d in flight; want the message deleted", v, fl)
	}
}

// A message released at the shutdown deadline, while a heartbeat extension
// of it is still under way, is hidden until the worker's last receives
// have surely ended (see TestFakeShutdownDeadlineReleaseLateLastReceive):
// the extension, landing after that hide, would shorten it to one
// extension, and a last receive reaching the queue late (8s, with 2s long
// polls) would take the message again. On the emulator:
// TestStopHideNotShortenedByLateExtension.
func TestFakeStopHideNotShortenedByLateExtension(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		stopBehindLateExtension(t, fakeLateQueue(t, sqstest.NewFake(), "late-extension-hide"))
	})
}

func TestStopHideNotShortenedByLateExtension(t *testing.T) {
	t.Parallel()
	stopBehindLateExtension(t, emulatorLateQueue(t))
}

func stopBehindLateExtension(t *testing.T, q lateQueue) {
	late := &lateReceives{API: q.api, late: 8 * time.Second, entered: make(chan struct{})}
	api := newLateExtensions(late, 4*time.Second)
	started := make(chan struct{}, 1)
	r := start(t, api, worker.Config{QueueURL: q.url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 2 * time.Second,
		DisableDepth: true, Heartbeat: lateHeartbeat},
		sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			started <- struct{}{}
			return untilCancelled(ctx)
		}))
	q.send()
	<-started
	late.armed.Store(true)
	<-late.entered // a receive is on its way, late
	api.armed.Store(true)
	<-api.held // and an extension of the message
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	r.stop(time.Minute)
	if s := r.w.Stats(); s.Received != 1 || s.Released != 1 || s.AckFailures != 0 {
		t.Errorf("stats %+v: want the message received once (a late last receive took it again?), released once, no acknowledgement failure", s)
	}
	if n := api.after.Load(); n != 0 {
		t.Errorf("%d extensions landed after the stop's hide", n)
	}
	got := q.receive()
	if len(got) != 1 {
		t.Fatalf("after the stop: %d messages; want the released one, visible at once", len(got))
	}
	if n := got[0].Attributes["ApproximateReceiveCount"]; n != "2" {
		t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
	}
}

// A message received nearly 12 hours ago (about 11h59m, its heartbeat
// ending 30s short of 12h), released at the shutdown deadline, cannot be
// hidden until the last receives have surely ended: SQS keeps a message invisible for at most 12 hours from its
// receive. Its stop hide, cut to what the 12 hours leave less a minute's
// slack (nothing), would make it visible at once, before its lease ends,
// for the other loop's long poll under way to take; it keeps its lease
// instead, and is released once the receives have ended: received once,
// no acknowledgement failure, no lost lease.
func TestFakeStopHideNearTwelveHours(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		url := f.CreateQueue("stop-12h", map[string]string{"VisibilityTimeout": "30"})
		started := make(chan time.Time, 1)
		var until atomic.Int64 // the lease's end, from the heartbeat
		r := start(t, f, worker.Config{QueueURL: url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 2 * time.Second,
			DisableDepth: true, Heartbeat: visibility.Config{OnExtend: func(_ *sqsworker.Message, u time.Time) { until.Store(u.UnixNano()) }}},
			sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				started <- time.Now()
				return untilCancelled(ctx)
			}))
		f.Send(url, "m")
		received := <-started
		time.Sleep(12*time.Hour - 75*time.Second - time.Since(received)) // the heartbeat stops 30s short of 12h
		synctest.Wait()
		// The heartbeat extends the lease by 30s once 15s or less are left.
		if left := time.Until(time.Unix(0, until.Load())); left > 20*time.Second {
			time.Sleep(left - 20*time.Second)
			synctest.Wait()
		}
		left := time.Until(time.Unix(0, until.Load()))
		if left <= 2*time.Second || left >= 26*time.Second {
			t.Fatalf("the lease ends in %s; the test wants it to end after the last long polls (2s), before they have surely ended (26s)", left)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = r.w.Shutdown(ctx)
		r.stop(time.Minute)
		if s := r.w.Stats(); s.Received != 1 || s.Released != 1 || s.AckFailures != 0 || s.LeasesLost != 0 {
			t.Errorf("stats %+v: want the message received once (a last long poll took it again?), released once, no acknowledgement failure, no lost lease", s)
		}
		if v, fl, _ := f.Depth(url); v != 1 || fl != 0 {
			t.Errorf("after the stop: %d visible, %d in flight; want the message released once the receives ended", v, fl)
		}
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url),
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("after the stop: %d messages, %v; want the released one", len(out.Messages), err)
		}
		if n := out.Messages[0].Attributes["ApproximateReceiveCount"]; n != "2" {
			t.Errorf("ApproximateReceiveCount = %s on the next receive, want 2 (one by the worker)", n)
		}
		if logs := r.logs.String(); strings.Contains(logs, "lost") || strings.Contains(logs, "acknowledgement failed") {
			t.Errorf("logs tell of a lost lease or a failed acknowledgement:\n%s", logs)
		}
	})
}

// slowReplies is a client whose receives answer late: the queue handed the
// messages reply before the worker has them, so that the worker's receive
// time is later than the queue's.
type slowReplies struct {
	worker.API
	reply time.Duration
}

func (s *slowReplies) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := s.API.ReceiveMessage(ctx, in, opts...)
	if err == nil && len(out.Messages) > 0 {
		time.Sleep(s.reply)
	}
	return out, err
}

// A message handled for 12 hours reaches SQS's limit: its last extension,
// planned from the worker's receive time, which is later than the queue's
// (here by a 2s reply), goes past the 12 hours at the queue, which refuses
// it. That is the lease reaching its maximum lifetime, not a lost lease:
// the handler's context ends with visibility.ErrMaxLifetime, the failure is
// retried (at once: the 12 hours leave no backoff), and nothing is logged
// as lost.
func TestFakeExtensionRefusedAtTwelveHours(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		url := f.CreateQueue("extension-12h", map[string]string{"VisibilityTimeout": "30"})
		causes := make(chan error, 2)
		r := start(t, &slowReplies{API: f, reply: 2 * time.Second}, worker.Config{QueueURL: url, Concurrency: 1, MaxMessages: 1,
			WaitTime: 2 * time.Second, DisableDepth: true},
			sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				if m.ReceiveCount > 1 {
					return nil
				}
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			}))
		f.Send(url, "m")
		time.Sleep(12*time.Hour + time.Minute)
		synctest.Wait()
		r.stop(time.Minute)
		if cause := <-causes; !errors.Is(cause, visibility.ErrMaxLifetime) {
			t.Errorf("the handler's context ended with %v, want visibility.ErrMaxLifetime", cause)
		}
		if s := r.w.Stats(); s.Received != 2 || s.LeasesLost != 0 || s.Retried != 1 || s.Succeeded != 1 || s.AckFailures != 0 {
			t.Errorf("stats %+v: want the message received twice, retried once, then handled, no lost lease, no acknowledgement failure", s)
		}
		if logs := r.logs.String(); strings.Contains(logs, "lost") {
			t.Errorf("logs tell of a lost lease:\n%s", logs)
		}
	})
}

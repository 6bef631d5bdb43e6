package worker_test

// Messages released without an attempt (cut short at the shutdown deadline,
// or received while the worker stops) on the last receive their redrive
// policy allows, on sqstest.Fake and on the emulator: each waits in a fresh
// copy, delayed past the stopping worker's last receives, instead of being
// left to SQS's move to the dead-letter queue on its next receive.

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
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// relQueue is a queue whose redrive policy allows a few receives (2 unless
// made otherwise), with its dead-letter queue, on the fake or on the
// emulator.
type relQueue struct {
	api      worker.API
	url, dlq string
	count    func(url string) int // the messages in url: visible, in flight, delayed
}

func fakeRelQueue(t *testing.T, name string) relQueue {
	return fakeRelQueueOf(name, 30*time.Second, 2)
}

func emuRelQueue(t *testing.T) relQueue {
	return emuRelQueueOf(t, 30*time.Second, 2)
}

// fakeRelQueueOf is a relQueue on a new fake, named name, with visibility
// timeout vis (whole seconds) and maxReceives receives before SQS
// dead-letters a message.
func fakeRelQueueOf(name string, vis time.Duration, maxReceives int) relQueue {
	f := sqstest.NewFake()
	dlq := f.CreateQueue(name+"-dlq", nil)
	url := f.CreateQueue(name, map[string]string{"VisibilityTimeout": strconv.Itoa(int(vis / time.Second)),
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.QueueARN(name+"-dlq"), maxReceives)})
	return relQueue{api: f, url: url, dlq: dlq, count: func(url string) int { v, fl, d := f.Depth(url); return v + fl + d }}
}

// emuRelQueueOf is a relQueue on the emulator (skipping t when it does not
// run) with visibility timeout vis and maxReceives receives before SQS
// dead-letters a message.
func emuRelQueueOf(t *testing.T, vis time.Duration, maxReceives int) relQueue {
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: maxReceives, VisibilityTimeout: vis})
	return relQueue{api: c, url: q.URL, dlq: q.DLQURL, count: func(url string) int { v, fl, d := localtest.Depth(t, c, url); return v + fl + d }}
}

// eachQueue runs test in parallel on the fake and, when it runs, on the
// emulator.
func eachQueue(t *testing.T, name string, test func(t *testing.T, q relQueue)) {
	t.Run("fake", func(t *testing.T) { t.Parallel(); test(t, fakeRelQueue(t, name)) })
	t.Run("emulator", func(t *testing.T) { t.Parallel(); test(t, emuRelQueue(t)) })
}

func (q relQueue) send(t *testing.T, body string) {
	t.Helper()
	if _, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: &body}); err != nil {
		t.Fatal(err)
	}
}

// runCopy runs a new worker on q until the job has run and is deleted, and
// checks it ran once, as its second attempt (the one the first worker cut
// short, or never started), with nothing dead-lettered.
func (q relQueue) runCopy(t *testing.T) { q.runCopyAs(t, 2) }

// runCopyAs is runCopy, the job running as attempt want.
func (q relQueue) runCopyAs(t *testing.T, want int) {
	t.Helper()
	var ran atomic.Int64
	attempts := make(chan int, 10)
	r := start(t, q.api, worker.Config{QueueURL: q.url, WaitTime: time.Second, DisableDepth: true},
		sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			ran.Add(1)
			attempts <- m.ReceiveCount
			return nil
		}))
	localtest.Eventually(t, 90*time.Second, func() bool { return ran.Load() >= 1 && q.count(q.url) == 0 },
		"the job did not run and go (ran %d times; %d in the dead-letter queue)", ran.Load(), q.count(q.dlq))
	r.stop(20 * time.Second)
	if n := ran.Load(); n != 1 {
		t.Errorf("the job ran %d times, want once", n)
	}
	if a := <-attempts; a != want {
		t.Errorf("the job ran as attempt %d, want %d: the release counts no attempt", a, want)
	}
	if n := q.count(q.dlq); n != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", n)
	}
}

// failThenBlock is a handler whose first attempt fails and whose second
// signals started and blocks past the shutdown deadline, honouring its
// context or (ignore) returning only 1s after it ended.
func failThenBlock(started chan<- struct{}, ignore bool) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if m.ReceiveCount == 1 {
			return errors.New("the dependency failed")
		}
		started <- struct{}{}
		<-ctx.Done()
		if ignore {
			time.Sleep(time.Second)
		}
		return ctx.Err()
	})
}

// stopAtSecondAttempt starts a worker with cfg (two handler goroutines,
// one message per receive, long polls of 2s, a backoff of 1s) whose first
// attempt of a job fails and whose second blocks (failThenBlock); send
// sends the job. Once the second attempt has started, beforeStop runs, if
// set, and the worker is stopped with a shutdown deadline of 300ms and
// given stopWithin to return.
func stopAtSecondAttempt(t *testing.T, api worker.API, cfg worker.Config, ignore bool, send, beforeStop func(), stopWithin time.Duration) *running {
	t.Helper()
	cfg.Concurrency, cfg.Pollers, cfg.MaxMessages, cfg.WaitTime, cfg.DisableDepth, cfg.Backoff = 2, 2, 1, 2*time.Second, true, oneSecond
	started := make(chan struct{}, 1)
	r := start(t, api, cfg, failThenBlock(started, ignore))
	send()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		t.Fatal("the second attempt did not start")
	}
	if beforeStop != nil {
		beforeStop()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_ = r.w.Shutdown(ctx)
	r.stop(stopWithin)
	return r
}

// oneSecond is a backoff of one second for every attempt.
var oneSecond = sqsworker.BackoffFunc(func(int, error) time.Duration { return time.Second })

// A job whose first attempt failed is cut short at the shutdown deadline on
// its second receive, the last its redrive policy allows (2): the stopping
// worker sends a fresh copy of it, delayed past its last receives, and
// deletes the original. The job is not dead-lettered: a new worker runs it
// once, as its second attempt. With the heartbeat on and off, the handler
// honouring its context or ignoring it. Before, the release by visibility
// left the job to SQS's move to the dead-letter queue on its next receive.
func TestShutdownReleaseOnLastReceive(t *testing.T) {
	t.Parallel()
	for _, heartbeat := range []bool{true, false} {
		for _, ignore := range []bool{false, true} {
			t.Run(fmt.Sprintf("heartbeat=%v/ignore-ctx=%v", heartbeat, ignore), func(t *testing.T) {
				t.Parallel()
				eachQueue(t, "release-last", func(t *testing.T, q relQueue) {
					r := stopAtSecondAttempt(t, q.api, worker.Config{QueueURL: q.url, DisableHeartbeat: !heartbeat}, ignore,
						func() { q.send(t, "job") }, nil, 30*time.Second)
					if s := r.w.Stats(); s.Received != 2 || s.Released != 1 || s.Requeued != 1 || s.RequeueFailures != 0 || s.AckFailures != 0 {
						t.Errorf("stats %+v: want 2 receives, 1 release in a copy, no failure", s)
					}
					if n := q.count(q.dlq); n != 0 {
						t.Errorf("%d messages dead-lettered by the stop, want none", n)
					}
					if n := q.count(q.url); n != 1 {
						t.Errorf("%d messages in the queue after the stop, want the copy alone (the original deleted)", n)
					}
					q.runCopy(t)
				})
			})
		}
	}
}

// holdUntil receives q's one message and keeps it invisible, as a first
// attempt that failed, and returns a function that makes it visible again.
func (q relQueue) firstAttempt(t *testing.T) (release func()) {
	t.Helper()
	out, err := q.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.url, WaitTimeSeconds: 5, VisibilityTimeout: 300})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("first receive: %d messages, %v", len(out.Messages), err)
	}
	rh := out.Messages[0].ReceiptHandle
	return func() {
		_, err := q.api.ChangeMessageVisibilityBatch(context.Background(), &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &q.url,
			Entries: []types.ChangeMessageVisibilityBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: rh}}})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// pollCount counts the receives under way through it.
type pollCount struct {
	worker.API
	n atomic.Int64
}

func (p *pollCount) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	p.n.Add(1)
	defer p.n.Add(-1)
	return p.API.ReceiveMessage(ctx, in, opts...)
}

// under waits until n receives are under way: a worker's loops in their
// long polls. A fixed sleep was not enough on a loaded machine: the worker
// had not started its polls when the test stopped it.
func (p *pollCount) under(t *testing.T, n int64) {
	t.Helper()
	localtest.Eventually(t, 30*time.Second, func() bool { return p.n.Load() >= n }, "%d receives under way, want %d", p.n.Load(), n)
}

// A message that one of the stopping worker's last long polls takes on the
// last receive its redrive policy allows is released unstarted in a fresh
// copy, delayed past those polls: the stopping worker does not take it
// again, nothing is dead-lettered, and a new worker runs it once, as its
// second attempt.
func TestReceivedWhileStoppingOnLastReceive(t *testing.T) {
	t.Parallel()
	for _, heartbeat := range []bool{true, false} {
		t.Run(fmt.Sprint("heartbeat=", heartbeat), func(t *testing.T) {
			t.Parallel()
			eachQueue(t, "stopping-last", func(t *testing.T, q relQueue) {
				q.send(t, "job")
				visible := q.firstAttempt(t)
				polls := &pollCount{API: q.api}
				r := start(t, polls, worker.Config{QueueURL: q.url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 5 * time.Second,
					DisableHeartbeat: !heartbeat, DisableDepth: true},
					sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
						t.Errorf("handler ran for %s while the worker was stopping", m.ID)
						return nil
					}))
				polls.under(t, 2) // both loops in their long polls
				stopped := make(chan struct{})
				go func() {
					defer close(stopped)
					_ = r.w.Shutdown(context.Background())
				}()
				localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
				visible() // taken by one of the last long polls
				<-stopped
				r.stop(30 * time.Second)
				if s := r.w.Stats(); s.Received != 1 || s.Released != 1 || s.Requeued != 1 || s.AckFailures != 0 {
					t.Errorf("stats %+v: want the message received once (a last long poll took the copy?), released in a copy", s)
				}
				if n := q.count(q.dlq); n != 0 {
					t.Errorf("%d messages dead-lettered by the stop, want none", n)
				}
				q.runCopy(t)
			})
		})
	}
}

// A job whose time has not come, received by one of the last long polls of
// a stopping worker on the last receive its redrive policy allows, is held
// back until its time, not released: released, its copy was timed for the
// release and ran the job an hour early.
func TestHeldJobReceivedWhileStopping(t *testing.T) {
	t.Parallel()
	eachQueue(t, "stopping-held", func(t *testing.T, q relQueue) {
		nb := time.Now().Add(time.Hour)
		if _, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: aws.String("later"),
			MessageAttributes: map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"),
				StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))}}}); err != nil {
			t.Fatal(err)
		}
		visible := q.firstAttempt(t)
		polls := &pollCount{API: q.api}
		r := start(t, polls, worker.Config{QueueURL: q.url, Concurrency: 2, Pollers: 2, MaxMessages: 1, WaitTime: 5 * time.Second, DisableDepth: true},
			sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
				t.Errorf("handler ran for %s an hour before its time", m.ID)
				return nil
			}))
		polls.under(t, 2) // both loops in their long polls
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			_ = r.w.Shutdown(context.Background())
		}()
		localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
		visible() // taken by one of the last long polls, its last receive
		<-stopped
		r.stop(30 * time.Second)
		if s := r.w.Stats(); s.Received != 1 || s.Held != 1 || s.Released != 0 {
			t.Errorf("stats %+v: want the message received once and held back, not released", s)
		}
		if n := q.count(q.dlq); n != 0 {
			t.Errorf("%d messages dead-lettered by the stop, want none", n)
		}
		if n := q.count(q.url); n != 1 {
			t.Errorf("%d messages in the queue, want the job, waiting for its time", n)
		}
	})
}

// refusingSends is a client whose SendMessage, once armed, is refused (or
// hangs until its context ends), as an SQS that is down.
type refusingSends struct {
	worker.API
	armed atomic.Bool
	hang  bool
	sends atomic.Int64
}

func (r *refusingSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if !r.armed.Load() {
		return r.API.SendMessage(ctx, in, opts...)
	}
	r.sends.Add(1)
	if r.hang {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, errors.New("dial tcp: connection refused")
}

// Should the copy's send be refused, or hang (SQS down during the stop),
// the message is released by its visibility, as before the copies: the
// stop ends (a hanging send is given up within seconds; refused sends are
// tried again until then), and the message is not lost (on the emulator,
// SQS moves it to the dead-letter queue on its next receive, as it did).
func TestShutdownReleaseCopyFails(t *testing.T) {
	t.Parallel()
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprint("hang=", hang), func(t *testing.T) {
			t.Parallel()
			eachQueue(t, "release-refused", func(t *testing.T, q relQueue) {
				api := &refusingSends{API: q.api, hang: hang}
				var begin time.Time
				r := stopAtSecondAttempt(t, api, worker.Config{QueueURL: q.url}, false, func() { q.send(t, "job") },
					func() { api.armed.Store(true); begin = time.Now() }, 60*time.Second)
				t.Logf("stopped in %s", time.Since(begin).Round(time.Millisecond))
				// A hanging send takes the whole stop bound; refused ones
				// are tried again within it.
				if s, n := r.w.Stats(), api.sends.Load(); s.Released != 1 || s.Requeued != 0 || s.RequeueFailures != 1 || (hang && n != 1) || (!hang && n < 2) {
					t.Errorf("stats %+v, %d sends: want 1 release, its copy given up (hanging: after one send; refused: after several)", s, n)
				}
				if n := q.count(q.url) + q.count(q.dlq); n != 1 {
					t.Errorf("%d messages in the queue and its dead-letter queue, want the job", n)
				}
			})
		})
	}
}

// crashAfterCopy is a client whose deletes, once a copy has been sent, are
// refused: as if the process died between the copy's send and the
// original's delete.
type crashAfterCopy struct {
	worker.API
	sent atomic.Bool
}

func (c *crashAfterCopy) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := c.API.SendMessage(ctx, in, opts...)
	if err == nil {
		c.sent.Store(true)
	}
	return out, err
}

func (c *crashAfterCopy) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	if c.sent.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	return c.API.DeleteMessageBatch(ctx, in, opts...)
}

// Should the original not be deleted once its copy was sent (the process
// killed between the two), both are in the queue: the original, come back,
// is moved to the dead-letter queue by SQS on its next receive (as it was
// before the copies), and the copy runs the job once, as its second
// attempt. The two share the job's key (idempotency.DefaultKey), so that
// the idempotency middleware applies the job's effect once, should the
// dead letter be replayed.
func TestEmulatorShutdownReleaseCrashAfterCopy(t *testing.T) {
	t.Parallel()
	localtest.Require(t)
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 4 * time.Second})
	api := &crashAfterCopy{API: c}
	r := stopAtSecondAttempt(t, api, worker.Config{QueueURL: q.URL}, false, func() { localtest.Send(t, c, q.URL, "", "job") }, nil, 60*time.Second)
	if s := r.w.Stats(); s.Requeued != 1 {
		t.Fatalf("stats %+v: want the copy sent", s)
	}
	var ran atomic.Int64
	keys := make(chan string, 10)
	attempts := make(chan int, 10)
	r2 := start(t, c, worker.Config{QueueURL: q.URL, WaitTime: time.Second, DisableDepth: true},
		sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			ran.Add(1)
			keys <- idempotency.DefaultKey(m)
			attempts <- m.ReceiveCount
			return nil
		}))
	localtest.Eventually(t, 90*time.Second, func() bool {
		v, i, d := localtest.Depth(t, c, q.URL)
		return ran.Load() >= 1 && v+i+d == 0
	}, "the copy did not run, or the original stayed")
	r2.stop(20 * time.Second)
	if n := ran.Load(); n != 1 {
		t.Errorf("the job ran %d times, want once (the copy)", n)
	}
	if a := <-attempts; a != 2 {
		t.Errorf("the copy ran as attempt %d, want 2", a)
	}
	dead := localtest.ReceiveAll(t, c, q.DLQURL, 2*time.Second, 30*time.Second)
	if len(dead) != 1 {
		t.Fatalf("%d messages dead-lettered, want the original", len(dead))
	}
	if got, want := idempotency.DefaultKey(sqsmsg.FromSDK(q.DLQURL, &dead[0])), <-keys; got != want {
		t.Errorf("the dead-lettered original's key is %q, the copy's %q: a replay would apply the job twice", got, want)
	}
}

// A message whose copy has no room for its time and prior attempts — ten
// message attributes already, or a body near SQS's size limit — still waits
// in a copy on its last receive, and runs once, never dead-lettered. With
// ten attributes the copy packs the job's own into one and keeps its prior
// attempts: it runs as its second attempt. Near the size limit it goes
// without them: its count of attempts starts again. Before, the copy was
// not sent, and SQS moved the job to the dead-letter queue on its next
// receive though no handler failed there.
func TestShutdownReleaseCopyDoesNotFit(t *testing.T) {
	t.Parallel()
	tenAttrs := map[string]types.MessageAttributeValue{}
	for i := range sqsworker.MaxMessageAttributes {
		tenAttrs[fmt.Sprint("a", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	big := strings.Repeat("x", sqsworker.MaxMessageSize-16)
	for name, c := range map[string]struct {
		in   sqs.SendMessageInput
		runs int // as attempt
	}{
		"ten-attributes": {sqs.SendMessageInput{MessageBody: aws.String("job"), MessageAttributes: tenAttrs}, 2},
		"size-limit":     {sqs.SendMessageInput{MessageBody: aws.String(big)}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			eachQueue(t, "release-nofit", func(t *testing.T, q relQueue) {
				in := c.in
				in.QueueUrl = &q.url
				r := stopAtSecondAttempt(t, q.api, worker.Config{QueueURL: q.url}, false, func() {
					if _, err := q.api.SendMessage(context.Background(), &in); err != nil {
						t.Fatal(err)
					}
				}, nil, 60*time.Second)
				if s := r.w.Stats(); s.Released != 1 || s.Requeued != 1 || s.RequeueFailures != 0 {
					t.Errorf("stats %+v: want 1 release, in a copy", s)
				}
				q.runCopyAs(t, c.runs)
			})
		})
	}
}

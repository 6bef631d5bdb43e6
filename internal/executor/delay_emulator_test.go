package executor_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/idemtest"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// On the emulator, SQS's limits are scaled down so that the logic runs in
// seconds: 15 minutes of message delay become 2s, 12 hours of visibility
// 8s, the executor's minute of slack 1s. The delays keep their proportions
// to those limits: "40 minutes" (2.7 message delays) is 5.5s, "30 hours"
// (2.5 visibility timeouts) 20.5s. The half second keeps every wait off
// the whole seconds SQS counts in, so that the latency of a receive does
// not change a step; the latencies of many, added up, can (see
// TestEmulatorDelaysOfAnyLength).
var (
	emuSteps = executor.Steps{MessageDelay: 2 * time.Second, Visibility: 8 * time.Second, Slack: time.Second}
	forty    = 5500 * time.Millisecond
	thirty   = 20500 * time.Millisecond
)

// emuStepsUsers counts the tests running with emuSteps: the first sets
// them, the last restores what was there before, so that the emulator tests,
// which all use the same steps, run in parallel with one another.
var emuStepsUsers struct {
	sync.Mutex
	n       int
	restore func()
}

// useEmuSteps sets the scaled limits, process-wide, until t (a top-level
// test, whose parallel subtests end before its cleanup) and every other
// test using them have ended. A parallel test calls it after t.Parallel,
// so that it runs only beside tests with the same steps: the tests that
// set steps of their own (SetStepsForTest) are not parallel, and run
// before the parallel ones start.
func useEmuSteps(t *testing.T) {
	t.Helper()
	emuStepsUsers.Lock()
	defer emuStepsUsers.Unlock()
	if emuStepsUsers.n == 0 {
		emuStepsUsers.restore = executor.SetStepsForTest(emuSteps)
	}
	emuStepsUsers.n++
	t.Cleanup(func() {
		emuStepsUsers.Lock()
		defer emuStepsUsers.Unlock()
		emuStepsUsers.n--
		if emuStepsUsers.n == 0 {
			emuStepsUsers.restore()
			emuStepsUsers.restore = nil
		}
	})
}

// counting is an SQS client that counts what a message costs: the messages
// receives brought, and the entries of sends, deletes and visibility
// changes (one message in the queue: one request each).
type counting struct {
	*sqs.Client
	mu sync.Mutex
	c  executor.Cost
	// failSends fails that many sends, after sendsBefore of them, before
	// SQS sees them; loseSends carries them out and loses the reply.
	sendsBefore, failSends, loseSends int
	// rec, if set, receives the runtimes' metrics.
	rec *metrics.Memory
	// sendVia, if set, carries the sends (through a test's fault proxy),
	// and afterSend, if set, sees each one's error.
	sendVia   *sqs.Client
	afterSend func(error)
	// receiveLag holds each receive that brought messages back that
	// long, as a loaded machine does.
	receiveLag time.Duration
	// steps adds up the delays of the sends that went and the visibility
	// timeouts set: the time the message's steps take, on time.
	steps time.Duration
}

// recorder is what the runtimes record into: c.rec, or none.
func (c *counting) recorder() metrics.Recorder {
	if c.rec == nil {
		return nil
	}
	return c.rec
}

func (c *counting) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := c.Client.ReceiveMessage(ctx, in, o...)
	if err == nil && len(out.Messages) > 0 && c.receiveLag > 0 {
		time.Sleep(c.receiveLag)
	}
	if err == nil {
		c.mu.Lock()
		c.c.Receives += len(out.Messages)
		c.mu.Unlock()
	}
	return out, err
}

func (c *counting) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.mu.Lock()
	c.c.Sends++
	fail, lose := false, false
	if c.c.Sends > c.sendsBefore {
		switch {
		case c.failSends > 0:
			c.failSends--
			fail = true
		case c.loseSends > 0:
			c.loseSends--
			lose = true
		}
	}
	c.mu.Unlock()
	if fail {
		return nil, errors.New("connection refused")
	}
	api := c.Client
	if c.sendVia != nil {
		api = c.sendVia
	}
	out, err := api.SendMessage(ctx, in, o...)
	if err == nil {
		c.mu.Lock()
		c.steps += time.Duration(in.DelaySeconds) * time.Second
		c.mu.Unlock()
	}
	if c.afterSend != nil {
		c.afterSend(err)
	}
	if lose && err == nil {
		return nil, errors.New("connection reset: reply lost")
	}
	return out, err
}

func (c *counting) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	c.mu.Lock()
	c.c.Deletes += len(in.Entries)
	c.mu.Unlock()
	return c.Client.DeleteMessageBatch(ctx, in, o...)
}

func (c *counting) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, o ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c.mu.Lock()
	c.c.Visibility += len(in.Entries)
	for _, e := range in.Entries {
		c.steps += time.Duration(e.VisibilityTimeout) * time.Second
	}
	c.mu.Unlock()
	return c.Client.ChangeMessageVisibilityBatch(ctx, in, o...)
}

func (c *counting) cost() executor.Cost {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.c
}

// stepTotal is the time the message's steps take, on time.
func (c *counting) stepTotal() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps
}

// costsWhenLate returns the costs the documentation's rules give for a job
// delayed by d whose copies come up to late after their steps: from some
// receive on, by any lateness up to late (to the millisecond), the receives
// before it on time. adjust turns each into what the runtime's requests
// count.
func costsWhenLate(d time.Duration, mrc int, late time.Duration, adjust func(executor.Cost) executor.Cost) map[executor.Cost]bool {
	costs := map[executor.Cost]bool{}
	onTime := executor.ExpectedCostWith(d, mrc, emuSteps.MessageDelay, emuSteps.Slack, emuSteps.Visibility)
	for from := 1; from <= onTime.Receives; from++ {
		for x := time.Duration(0); x <= late; x += time.Millisecond {
			c := executor.ExpectedCostLate(d, mrc, emuSteps.MessageDelay, emuSteps.Slack, emuSteps.Visibility, func(n int) time.Duration {
				if n < from {
					return 0
				}
				return x
			})
			costs[adjust(c)] = true
		}
	}
	return costs
}

// ran records the handler's calls.
type ran struct {
	mu   sync.Mutex
	runs []emuRun
}

type emuRun struct {
	at         time.Time
	attempt    int
	key, trace string
}

func (r *ran) handler(fail func(attempt int) error) sqsworker.Handler {
	return sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		run := emuRun{at: time.Now(), attempt: m.ReceiveCount}
		run.key, _ = m.Attribute("idempotency-key")
		run.trace, _ = m.Attribute("traceparent")
		r.mu.Lock()
		r.runs = append(r.runs, run)
		r.mu.Unlock()
		if fail != nil {
			return fail(m.ReceiveCount)
		}
		return nil
	})
}

func (r *ran) get() []emuRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]emuRun(nil), r.runs...)
}

// sendDelayed sends one job, delayed by d, with an idempotency key, a
// trace context and an X-Ray header, as the producer does (its 15 minutes
// scaled: the attribute and the first delay are set here), and returns the
// time it may run.
func sendDelayed(t *testing.T, api *counting, url string, d time.Duration) time.Time {
	t.Helper()
	nb := time.Now().Add(d)
	in := &sqs.SendMessageInput{
		QueueUrl: &url, MessageBody: aws.String(`{"order":42}`),
		DelaySeconds: int32(min(d, emuSteps.MessageDelay) / time.Second),
		MessageAttributes: map[string]types.MessageAttributeValue{
			producer.IdempotencyKeyAttribute: {DataType: aws.String("String"), StringValue: aws.String("order-42")},
			"traceparent":                    {DataType: aws.String("String"), StringValue: aws.String("00-trace-span-01")},
			sqsworker.AttrNotBefore:          {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli()+1, 10))},
		},
		MessageSystemAttributes: map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameForSendsAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1")},
		},
	}
	if _, err := api.SendMessage(context.Background(), in); err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(nb.UnixMilli() + 1)
}

func checkEmuRun(t *testing.T, runs []emuRun, nb time.Time) {
	t.Helper()
	if len(runs) != 1 {
		t.Fatalf("handler ran %d times, want once: %+v", len(runs), runs)
	}
	r := runs[0]
	if r.at.Before(nb) {
		t.Errorf("ran %s before its time", nb.Sub(r.at))
	}
	if r.attempt != 1 {
		t.Errorf("ran as attempt %d: waiting counted as attempts", r.attempt)
	}
	// The emulator does not return AWSTraceHeader: the fake's tests check
	// that copies keep it.
	if r.key != "order-42" || r.trace != "00-trace-span-01" {
		t.Errorf("key %q, trace %q: not kept across copies", r.key, r.trace)
	}
}

// runtimes runs a handler on a queue: the worker, or the Lambda adapter
// behind a loop that does what an event source mapping does.
var runtimes = map[string]func(t *testing.T, api *counting, q localtest.Queue, h sqsworker.Handler) (stop func()){
	"worker": func(t *testing.T, api *counting, q localtest.Queue, h sqsworker.Handler) func() {
		w, err := worker.New(api, worker.Config{QueueURL: q.URL, WaitTime: time.Second, Concurrency: 2,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: api.recorder()})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Run(context.Background(), h) }()
		return func() {
			_ = w.Shutdown(context.Background())
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	},
	"lambda": func(t *testing.T, api *counting, q localtest.Queue, h sqsworker.Handler) func() {
		fn, err := lambda.NewHandler(h, lambda.Config{Client: api, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: api.recorder(),
			QueueURL: func(string) (string, error) { return q.URL, nil }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			esmPoll(ctx, t, api, q, fn)
		}()
		return func() { cancel(); <-done }
	},
}

// esmPoll does what an event source mapping does: receive, invoke, delete
// the records not reported failed.
func esmPoll(ctx context.Context, t *testing.T, api *counting, q localtest.Queue, fn lambda.HandlerFunc) {
	for ctx.Err() == nil {
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"All"}})
		if err != nil || len(out.Messages) == 0 {
			continue
		}
		ictx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		resp, err := fn(ictx, sqstest.SQSEvent(q.ARN, out.Messages))
		cancel()
		if err != nil {
			t.Errorf("invocation: %v", err)
			continue
		}
		failed := map[string]bool{}
		for _, f := range resp.BatchItemFailures {
			failed[f.ItemIdentifier] = true
		}
		var del sqs.DeleteMessageBatchInput
		del.QueueUrl = &q.URL
		for i, m := range out.Messages {
			if !failed[aws.ToString(m.MessageId)] {
				del.Entries = append(del.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
			}
		}
		if len(del.Entries) > 0 {
			if _, err := api.DeleteMessageBatch(context.Background(), &del); err != nil {
				t.Errorf("deleting: %v", err)
			}
		}
	}
}

// A "40-minute" and a "30-hour" delay run once, not before their time,
// through the worker and the Lambda adapter on the emulator, keeping the
// idempotency key, the trace context and the X-Ray header, never
// dead-lettered (redrive maxReceiveCount 2 and 3: the waits need more
// receives than that), at the cost the documentation states — also when
// every receive comes 80ms late, as on a loaded machine (through the Lambda
// adapter): the "30 hours" then take one message step fewer, as the rules
// say for copies that late.
func TestEmulatorDelaysOfAnyLength(t *testing.T) {
	localtest.Require(t)
	t.Parallel()
	useEmuSteps(t)
	for name, start := range runtimes {
		for _, tc := range []struct {
			label string
			d     time.Duration
			mrc   int
			lag   time.Duration
		}{{"40m", forty, 3, 0}, {"40m", forty, 2, 0}, {"30h", thirty, 3, 0}, {"30h", thirty, 2, 0}, {"30h", thirty, 2, 80 * time.Millisecond}} {
			if tc.lag > 0 && name != "lambda" {
				continue // one runtime is enough to show it
			}
			label := fmt.Sprintf("%s/%s/maxReceiveCount=%d", name, tc.label, tc.mrc)
			if tc.lag > 0 {
				label += fmt.Sprintf("/receives %s late", tc.lag)
			}
			t.Run(label, func(t *testing.T) {
				t.Parallel()
				api := &counting{Client: localtest.NewSQS(t), receiveLag: tc.lag}
				q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: tc.mrc, VisibilityTimeout: 30 * time.Second})
				var r ran
				stop := start(t, api, q, r.handler(nil))
				nb := sendDelayed(t, api, q.URL, tc.d)
				localtest.Eventually(t, tc.d+30*time.Second, func() bool { return len(r.get()) > 0 }, "the job did not run")
				// The last delete lands; nothing else follows.
				localtest.Eventually(t, 10*time.Second, func() bool {
					v, i, d := localtest.Depth(t, api.Client, q.URL)
					return v+i+d == 0
				}, "the queue is not empty")
				time.Sleep(time.Second)
				stop()
				checkEmuRun(t, r.get(), nb)
				if v, i, d := localtest.Depth(t, api.Client, q.DLQURL); v+i+d != 0 {
					t.Errorf("%d messages dead-lettered", v+i+d)
				}
				adjust := func(c executor.Cost) executor.Cost {
					if name == "lambda" {
						// The adapter deletes each original whose copy it
						// sent at once, and the event source mapping once
						// more, in its delete of the batch.
						c.Deletes += c.Sends - 1
					}
					return c
				}
				want := adjust(executor.ExpectedCostWith(tc.d, tc.mrc, emuSteps.MessageDelay, emuSteps.Slack, emuSteps.Visibility))
				// Each step's copy comes some milliseconds after the step
				// (the receive, and the runtime's turn from it to the
				// next step), and the lateness adds up over the steps: by
				// the job's run, late, the time past what its steps add up
				// to from its send. On a loaded machine it passes the
				// half second the last step has (the "30 hours" take ten
				// message steps of 2s, then one of 0.5s): the copy before
				// it then comes within its time's message delay, is sent
				// to arrive on time and runs, one step fewer. So a cost
				// off the rules' on-time figure must be what the rules
				// give for copies that late, not merely fewer requests.
				late := max(r.get()[0].at.Sub(nb.Add(-tc.d-time.Millisecond))-api.stepTotal(), 0)
				got := api.cost()
				if got != want && !costsWhenLate(tc.d, tc.mrc, late, adjust)[got] {
					t.Errorf("cost %+v (%d requests), the documentation's rules say %+v (%d), or, with the copies up to %s late, one of %v",
						got, got.Total(), want, want.Total(), late.Round(time.Millisecond), slices.Collect(maps.Keys(costsWhenLate(tc.d, tc.mrc, late, adjust))))
				}
				if tc.lag > 0 && got == want {
					// Nine receives 80ms late at least leave the copy
					// before the last step under 2s of wait: it runs.
					t.Errorf("cost %+v with every receive %s late: the on-time figure, not one message step fewer", got, tc.lag)
				}
				t.Logf("ran %s after its time, %s after its steps; %d requests", r.get()[0].at.Sub(nb).Round(time.Millisecond), late.Round(time.Millisecond), api.cost().Total())
			})
		}
	}
}

// Faults on the emulator: the copy's send fails (the original is kept and
// sent again when it comes back), or its reply is lost (two copies, one
// key). The job runs on time, never before, never dead-lettered
// (maxReceiveCount 2).
func TestEmulatorDelayFaults(t *testing.T) {
	localtest.Require(t)
	t.Parallel()
	useEmuSteps(t)
	for _, fault := range []string{"send fails", "reply lost"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			api := &counting{Client: localtest.NewSQS(t), sendsBefore: 1, rec: metrics.NewMemory()}
			if fault == "send fails" {
				api.failSends = 1
			} else {
				api.loseSends = 1
			}
			q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: 2})
			var r ran
			stop := runtimes["worker"](t, api, q, r.handler(nil))
			nb := sendDelayed(t, api, q.URL, forty)
			localtest.Eventually(t, 40*time.Second, func() bool {
				v, i, d := localtest.Depth(t, api.Client, q.URL)
				return len(r.get()) > 0 && v+i+d == 0
			}, "the job did not run, or copies are left")
			time.Sleep(time.Second)
			stop()
			if api.failSends+api.loseSends != 0 {
				t.Fatal("the fault was not injected")
			}
			runs := r.get()
			want := 1
			if fault == "reply lost" {
				want = 2 // the copy SQS stored, and the one sent again
			}
			if len(runs) != want {
				t.Fatalf("handler ran %d times, want %d", len(runs), want)
			}
			// Either way the runtime saw the copy's send fail once.
			if n := api.rec.Total(metrics.RequeueFailures, metrics.Dims{}); n != 1 {
				t.Errorf("%s = %d, want 1", metrics.RequeueFailures, n)
			}
			for _, run := range runs {
				if run.at.Before(nb) || run.key != "order-42" || run.attempt != 1 {
					t.Errorf("run %+v: early, without the key, or not a first attempt", run)
				}
			}
			if v, i, d := localtest.Depth(t, api.Client, q.DLQURL); v+i+d != 0 {
				t.Errorf("%d messages dead-lettered", v+i+d)
			}
		})
	}
}

// A backoff of "24 hours" (two visibility timeouts, scaled) waits in a copy
// that carries the attempts made: the handler sees attempts 1, 2, 3, never
// sooner than the backoff; with a redrive maxReceiveCount of 3 the job is
// not dead-lettered while it succeeds on its third attempt, and is, with
// Attempts 3, when that fails too.
func TestEmulatorLongBackoff(t *testing.T) {
	localtest.Require(t)
	t.Parallel()
	useEmuSteps(t)
	day := 2 * emuSteps.Visibility
	for _, tc := range []struct {
		rt      string
		succeed bool
	}{{"worker", true}, {"lambda", true}, {"worker", false}} {
		t.Run(fmt.Sprintf("%s/third succeeds=%v", tc.rt, tc.succeed), func(t *testing.T) {
			t.Parallel()
			api := &counting{Client: localtest.NewSQS(t)}
			q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: 3})
			var r ran
			stop := runtimes[tc.rt](t, api, q, r.handler(func(attempt int) error {
				if tc.succeed && attempt == 3 {
					return nil
				}
				return sqsworker.RetryAfter(day, errors.New("webhook endpoint down"))
			}))
			sendDelayed(t, api, q.URL, 0)
			localtest.Eventually(t, 3*day+30*time.Second, func() bool {
				v, i, d := localtest.Depth(t, api.Client, q.URL)
				return len(r.get()) >= 3 && v+i+d == 0
			}, "three attempts did not run")
			time.Sleep(time.Second)
			stop()
			runs := r.get()
			if len(runs) != 3 {
				t.Fatalf("handler ran %d times, want 3", len(runs))
			}
			for i, run := range runs {
				if run.attempt != i+1 || run.key != "order-42" {
					t.Errorf("run %d: attempt %d, key %q", i, run.attempt, run.key)
				}
				if i > 0 && run.at.Sub(runs[i-1].at) < day {
					t.Errorf("run %d came %s after the one before, under the backoff of %s", i, run.at.Sub(runs[i-1].at), day)
				}
			}
			v, i, d := localtest.Depth(t, api.Client, q.DLQURL)
			switch {
			case tc.succeed && v+i+d != 0:
				t.Errorf("%d messages dead-lettered", v+i+d)
			case !tc.succeed:
				msgs := localtest.ReceiveAll(t, api.Client, q.DLQURL, 2*time.Second, 30*time.Second)
				if len(msgs) != 1 {
					t.Fatalf("%d messages dead-lettered, want 1", len(msgs))
				}
				a := msgs[0].MessageAttributes
				if got := aws.ToString(a[sqsworker.AttrFailureAttempts].StringValue); got != "3" {
					t.Errorf("dead-letter copy says %q attempts, want 3", got)
				}
				if _, ok := a[sqsworker.AttrPriorAttempts]; ok {
					t.Error("dead-letter copy carries the prior attempts: a replay would start from them")
				}
			}
		})
	}
}

// The duplicate a lost reply leaves (two copies, one key) runs the job's
// effect once under the idempotency middleware, on DynamoDB Local.
func TestEmulatorDelayDuplicateRunsOnceUnderIdempotency(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	t.Parallel()
	useEmuSteps(t)
	mw := idempotencyOnDynamoDB(t, localtest.NewDynamoDB(t))
	api := &counting{Client: localtest.NewSQS(t), sendsBefore: 1, loseSends: 1}
	q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: 2})
	var copies, effects ran
	inner := effects.handler(nil)
	h := copies.handler(nil)
	stop := runtimes["worker"](t, api, q, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		_ = h.HandleMessage(ctx, m)
		return mw(inner).HandleMessage(ctx, m)
	}))
	nb := sendDelayed(t, api, q.URL, forty)
	// The two copies come together: the second waits for the first in the
	// idempotency middleware, or, should the first outlast that wait (a
	// machine loaded by the other tests), is postponed for the first
	// claim's lease (the visibility timeout's 30 s and the 30 s grace).
	localtest.Eventually(t, forty+100*time.Second, func() bool {
		v, i, d := localtest.Depth(t, api.Client, q.URL)
		return len(copies.get()) >= 2 && v+i+d == 0
	}, "both copies did not come")
	time.Sleep(time.Second)
	stop()
	if n := len(effects.get()); n != 1 {
		t.Errorf("the effect ran %d times for %d copies, want once", n, len(copies.get()))
	}
	if e := effects.get(); len(e) > 0 && e[0].at.Before(nb) {
		t.Error("the effect ran before its time")
	}
	if v, i, d := localtest.Depth(t, api.Client, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered", v+i+d)
	}
}

// A job sent at the queue's size limit without an idempotency key (SQS's 1
// MiB, and a queue set to 64 KiB) waits in copies that still fit, through
// both runtimes on the emulator: it runs once, as its first attempt, not
// before its time, and is not dead-lettered for waiting (maxReceiveCount 2:
// a copy at each step).
func TestEmulatorDelayAtTheSizeLimit(t *testing.T) {
	localtest.Require(t)
	t.Parallel()
	useEmuSteps(t)
	for name, start := range runtimes {
		for _, limit := range []int{sqsworker.MaxMessageSize, 64 << 10} {
			t.Run(fmt.Sprintf("%s/MaximumMessageSize=%d", name, limit), func(t *testing.T) {
				t.Parallel()
				api := &counting{Client: localtest.NewSQS(t)}
				q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: 2})
				if _, err := api.Client.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: &q.URL,
					Attributes: map[string]string{"MaximumMessageSize": strconv.Itoa(limit)}}); err != nil {
					t.Fatal(err)
				}
				var r ran
				stop := start(t, api, q, r.handler(nil))
				nb := time.Now().Add(forty)
				attrs := map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: sqsworker.NotBeforeAttribute(nb)}
				body := strings.Repeat("x", limit-sqsworker.MessageSize("", attrs))
				if _, err := api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: &body,
					DelaySeconds:      int32(emuSteps.MessageDelay / time.Second),
					MessageAttributes: map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(attrs[sqsworker.AttrNotBefore].StringValue)}},
				}); err != nil {
					t.Fatal(err)
				}
				localtest.Eventually(t, forty+30*time.Second, func() bool {
					v, i, d := localtest.Depth(t, api.Client, q.URL)
					dv, di, dd := localtest.Depth(t, api.Client, q.DLQURL)
					return (len(r.get()) > 0 && v+i+d == 0) || dv+di+dd > 0
				}, "the job did not run, or copies are left")
				time.Sleep(time.Second)
				stop()
				if v, i, d := localtest.Depth(t, api.Client, q.DLQURL); v+i+d != 0 {
					t.Fatalf("%d messages dead-lettered", v+i+d)
				}
				runs := r.get()
				if len(runs) != 1 || runs[0].at.Before(nb) || runs[0].attempt != 1 {
					t.Errorf("runs %+v: want one first attempt, not before %s", runs, nb.Format(time.TimeOnly))
				}
			})
		}
	}
}

// A job failing for good with a backoff over the visibility's reach (a
// "day"), whose waiting copy has no room for its prior attempts (nine
// message attributes of its own), is dead-lettered after its third attempt
// (maxReceiveCount 3) through the worker on the emulator: it waits by its
// visibility, whose receives count, rather than in copies that start its
// attempts again. Before, every copy ran as attempt 1, and the job was
// never dead-lettered.
func TestEmulatorLongBackoffWithoutRoomIsDeadLettered(t *testing.T) {
	localtest.Require(t)
	t.Parallel()
	useEmuSteps(t)
	day := 2 * emuSteps.Visibility
	api := &counting{Client: localtest.NewSQS(t)}
	q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: 3})
	var r ran
	stop := runtimes["worker"](t, api, q, r.handler(func(int) error {
		return sqsworker.RetryAfter(day, errors.New("webhook endpoint down"))
	}))
	attrs := map[string]types.MessageAttributeValue{}
	for i := range 9 {
		attrs[fmt.Sprint("own-", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	if _, err := api.Client.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("job"),
		MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 3*day+30*time.Second, func() bool {
		v, i, d := localtest.Depth(t, api.Client, q.DLQURL)
		return v+i+d > 0 || len(r.get()) > 4
	}, "the job was not dead-lettered: %d attempts", len(r.get()))
	time.Sleep(time.Second)
	stop()
	var attempts []int
	for _, run := range r.get() {
		attempts = append(attempts, run.attempt)
	}
	if len(attempts) != 3 || attempts[2] != 3 {
		t.Errorf("attempts %v, want 1, 2, 3: the copies started the count again", attempts)
	}
	if msgs := localtest.ReceiveAll(t, api.Client, q.DLQURL, 2*time.Second, 30*time.Second); len(msgs) != 1 {
		t.Errorf("%d messages dead-lettered, want the job", len(msgs))
	}
	if v, i, d := localtest.Depth(t, api.Client, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue", v+i+d)
	}
}

// A job sent with ten message attributes, SQS's limit (nine of its own, a
// binary one among them, and its time), waits in copies that pack its own
// into one, through the worker and the Lambda adapter on the emulator,
// with the reply to the first copy's send lost (two copies): both run under
// the first message's key, so that the idempotency middleware (DynamoDB
// Local) applies the job's effect once, and the handler sees every
// attribute as it was sent. Nothing is dead-lettered (maxReceiveCount 2: a
// copy at each step).
func TestEmulatorCopiesOfTenAttributesRunOnce(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	t.Parallel()
	useEmuSteps(t)
	db := localtest.NewDynamoDB(t)
	for name, start := range runtimes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			mw := idempotencyOnDynamoDB(t, db)
			own := map[string]types.MessageAttributeValue{"blob": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1, 255}}}
			for i := range sqsworker.MaxMessageAttributes - 2 {
				own[fmt.Sprint("own-", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(fmt.Sprint("v", i))}
			}
			api := &counting{Client: localtest.NewSQS(t), sendsBefore: 1, loseSends: 1}
			q := localtest.NewQueue(t, api.Client, localtest.QueueOptions{MaxReceiveCount: 2})
			var (
				mu     sync.Mutex
				keys   []string
				wrong  []string
				effect ran
			)
			inner := effect.handler(nil)
			stop := start(t, api, q, sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				k, _ := m.Attribute("idempotency-key")
				mu.Lock()
				keys = append(keys, k)
				for n, a := range own {
					if g := m.MessageAttributes[n]; g.StringValue != aws.ToString(a.StringValue) || !slices.Equal(g.BinaryValue, a.BinaryValue) {
						wrong = append(wrong, n)
					}
				}
				mu.Unlock()
				return mw(inner).HandleMessage(ctx, m)
			}))
			nb := time.Now().Add(forty)
			in := &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String("job"), MessageAttributes: maps.Clone(own),
				DelaySeconds: int32(emuSteps.MessageDelay / time.Second)}
			in.MessageAttributes[sqsworker.AttrNotBefore] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))}
			out, err := api.SendMessage(ctx, in)
			if err != nil {
				t.Fatal(err)
			}
			var state string // what the queues held when last looked at
			done := func() bool {
				mu.Lock()
				n := len(keys)
				mu.Unlock()
				v, i, d := localtest.Depth(t, api.Client, q.URL)
				dv, di, dd := localtest.Depth(t, api.Client, q.DLQURL)
				api.mu.Lock()
				state = fmt.Sprintf("%d runs; queue %d visible, %d in flight, %d delayed; dead-letter queue %d; %d sends, %d lost replies left",
					n, v, i, d, dv+di+dd, api.c.Sends, api.loseSends)
				api.mu.Unlock()
				return n >= 2 && v+i+d == 0
			}
			// Both copies may run at once (one batch, or two receives
			// of one worker): the second waits for the first in the
			// idempotency middleware. Should the first outlast that
			// wait (a machine loaded by the other tests), the second is
			// postponed for the first claim's lease (the visibility or
			// the invocation's 30 s, and the 30 s grace), waiting in
			// copies, before it is acknowledged as a duplicate.
			for deadline := time.Now().Add(forty + 100*time.Second); !done(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("both copies did not come: %s", state)
				}
			}
			time.Sleep(time.Second)
			stop()
			mu.Lock()
			defer mu.Unlock()
			for _, k := range keys {
				if k != "message-id:"+aws.ToString(out.MessageId) {
					t.Errorf("a copy ran under key %q, want the first message's, message-id:%s", k, aws.ToString(out.MessageId))
				}
			}
			if len(wrong) > 0 {
				t.Errorf("the handler did not see these attributes as sent: %v", wrong)
			}
			if runs := effect.get(); len(runs) != 1 || runs[0].at.Before(nb) {
				t.Errorf("the effect ran %d times for %d copies (%+v), want once, not before its time", len(runs), len(keys), runs)
			}
			if v, i, d := localtest.Depth(t, api.Client, q.DLQURL); v+i+d != 0 {
				t.Errorf("%d messages dead-lettered", v+i+d)
			}
		})
	}
}

// idempotencyOnDynamoDB returns the idempotency middleware over a table of
// its own in DynamoDB Local (db), deleted when t ends.
func idempotencyOnDynamoDB(t *testing.T, db *dynamodb.Client) sqsworker.Middleware {
	t.Helper()
	mw, err := idempotency.Middleware(idemtest.NewStore(t, db, idempotency.StoreConfig{}), idempotency.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

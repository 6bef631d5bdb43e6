package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
)

// sim drives an executor against the in-memory fake on a fake clock, with
// SQS's real limits (15 minutes of message delay, 12 hours of visibility):
// it receives what is visible, settles it at once (the acker's requests
// one by one), and moves the clock a second at a time while nothing is
// visible. So a delay of 30 hours runs in a moment, and every request is
// counted.
type sim struct {
	t       *testing.T
	f       *sqstest.Fake
	api     *lossy // the executor's sends go through it
	clock   *sqstest.Clock
	url     string
	dlq     string
	ex      *Executor
	handler func(m *sqsworker.Message) error

	// receives counts the receives that brought a message: those a
	// message costs (empty long polls are paid for anyway).
	receives int
	runs     []run
	// crashOn, when > 0, drops the settling of that many received
	// messages, from the receive numbered crashAt on: a worker that died
	// holding them.
	crashAt, crashes int
	// runtime, when set, settles as the runtimes do: Hold, then Run
	// when it held nothing.
	runtime bool
}

// run is one handler call.
type run struct {
	at       time.Time
	attempt  int
	key      string
	trace    string
	traceHdr string
	id       string
	group    string
}

// lossy is the executor's SQS client: SendMessage may lose its reply
// after SQS carried it out.
type lossy struct {
	*sqstest.Fake
	mu       sync.Mutex
	loseNext int
}

func (l *lossy) SendMessage(ctx context.Context, in *sqs.SendMessageInput, o ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := l.Fake.SendMessage(ctx, in, o...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err == nil && l.loseNext > 0 {
		l.loseNext--
		return nil, errors.New("connection reset: reply lost")
	}
	return out, err
}

// newSim makes a queue whose redrive policy has maxReceiveCount mrc (none
// when 0) and an executor for it.
func newSim(t *testing.T, mrc int, handler func(m *sqsworker.Message) error) *sim {
	t.Helper()
	// On a whole second, as the costs stated assume: a time between
	// seconds may cost one more hop of a second at the end, SQS's delays
	// being whole seconds.
	start := time.Now().Truncate(time.Second)
	clock := sqstest.NewClock(start)
	f := sqstest.NewFake()
	f.Now = clock.Now
	t.Cleanup(SetStepsForTest(Steps{Now: clock.Now}))
	dlq := f.CreateQueue("jobs-dlq", nil)
	attrs := map[string]string{"VisibilityTimeout": "30"}
	if mrc > 0 {
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.QueueARN("jobs-dlq"), mrc)
	}
	url := f.CreateQueue("jobs", attrs)
	s := &sim{t: t, f: f, api: &lossy{Fake: f}, clock: clock, url: url, dlq: dlq, handler: handler}
	s.ex = &Executor{
		Handler: sqsworker.HandlerFunc(s.handle),
		Policy: outcome.Policy{Backoff: sqsworker.ExponentialBackoff{}, MaxReceiveCount: mrc, HasDLQ: true,
			RedriveMaxReceiveCount: mrc},
		Mover:    &queue.Mover{API: s.api, URL: dlq, Now: clock.Now},
		Counters: &Counters{},
		Metrics:  metrics.NewMemory(),
		Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
		Requeue:  Requeue{API: s.api, URL: url},
	}
	return s
}

// checkRequeueFailures checks the waiting copies that could not be sent,
// counted and as the requeue_failures metric.
func (s *sim) checkRequeueFailures(want int64) {
	s.t.Helper()
	if n := s.ex.Counters.RequeueFailures.Load(); n != want {
		s.t.Errorf("requeue failures %d, want %d", n, want)
	}
	if n := s.ex.Metrics.(*metrics.Memory).Total(metrics.RequeueFailures, metrics.Dims{}); n != want {
		s.t.Errorf("%s metric %d, want %d", metrics.RequeueFailures, n, want)
	}
}

func (s *sim) handle(_ context.Context, m *sqsworker.Message) error {
	r := run{at: s.clock.Now(), attempt: m.ReceiveCount, id: m.ID, traceHdr: m.Attributes[sqsworker.AttrAWSTraceHeader], group: m.GroupID}
	r.key, _ = m.Attribute("idempotency-key")
	r.trace, _ = m.Attribute("traceparent")
	s.runs = append(s.runs, r)
	if s.handler == nil {
		return nil
	}
	return s.handler(m)
}

// send sends a job as the producer does, with an idempotency key, a trace
// context and an X-Ray trace header.
func (s *sim) send(delay time.Duration) time.Time {
	s.t.Helper()
	p, err := producer.New(s.f, producer.Config{QueueURL: s.url, MaxMessageSize: producer.MaxMessageSize})
	if err != nil {
		s.t.Fatal(err)
	}
	nb := s.clock.Now().Add(delay)
	// The producer reads the real clock; the fake one starts with it.
	if _, err := p.Send(context.Background(), producer.Message{Body: `{"order":42}`, IdempotencyKey: "order-42", NotBefore: nb,
		Attributes: map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: "00-trace-span-01"}}}); err != nil {
		s.t.Fatal(err)
	}
	return nb
}

// runUntilIdle runs until the queue holds no message, or the clock has
// moved by limit.
func (s *sim) runUntilIdle(limit time.Duration) {
	s.t.Helper()
	if !s.runUntil(limit) {
		s.t.Fatalf("the queue still holds messages after %s", limit)
	}
}

// runUntil is runUntilIdle, reporting whether the queue emptied rather
// than failing the test.
func (s *sim) runUntil(limit time.Duration) bool {
	s.t.Helper()
	end := s.clock.Now().Add(limit)
	for s.clock.Now().Before(end) {
		visible, inFlight, delayed := s.f.Depth(s.url)
		if visible+inFlight+delayed == 0 {
			return true
		}
		if visible == 0 {
			s.clock.Advance(time.Second)
			continue
		}
		out, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(s.url), MaxNumberOfMessages: 10,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
			MessageAttributeNames:       []string{"All"},
		})
		if err != nil {
			s.t.Fatal(err)
		}
		for i := range out.Messages {
			s.receives++
			if s.crashes > 0 && s.receives >= s.crashAt {
				s.crashes--
				continue // the worker died holding it
			}
			now := s.clock.Now()
			j := &Job{Msg: sqsmsg.FromSDK(s.url, &out.Messages[i]), ReceivedAt: now, Ctx: context.Background()}
			if s.runtime {
				if held, _ := s.ex.Hold(j, s); held {
					continue
				}
			}
			s.ex.Run(j, s)
		}
	}
	return false
}

// The acker: each acknowledgement one request.

func (s *sim) Delete(j *Job) {
	_, err := s.f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &s.url, ReceiptHandle: &j.Msg.ReceiptHandle})
	if err != nil {
		s.t.Logf("delete failed: %v", err)
	}
	j.Done()
}

func (s *sim) Retry(j *Job, vis time.Duration) {
	secs := int32((min(vis, sqsworker.MaxVisibilityTimeout-time.Second) + time.Second - 1) / time.Second)
	_, err := s.f.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{
		QueueUrl: &s.url, ReceiptHandle: &j.Msg.ReceiptHandle, VisibilityTimeout: secs})
	if err != nil {
		s.t.Logf("visibility change failed: %v", err)
	}
}

func (s *sim) Abandon(*Job) {}

// cost is the requests a job cost: the receives that brought it, and the
// sends (the producer's included), deletes and visibility changes.
type cost struct{ Receives, Sends, Deletes, Visibility int }

func (c cost) total() int { return c.Receives + c.Sends + c.Deletes + c.Visibility }

func (s *sim) cost() cost {
	return cost{Receives: s.receives, Sends: s.f.Calls(sqstest.OpSendMessage), Deletes: s.f.Calls(sqstest.OpDeleteMessage),
		Visibility: s.f.Calls(sqstest.OpChangeMessageVisibility)}
}

// expectedCost is the cost the package documentation states for a job
// delayed by d on a queue whose redrive policy has maxReceiveCount mrc (0
// for none), with SQS's limits, worked out step by step from the rules
// (not from the code): the first copy arrives after 15 minutes; a copy
// received more than 16 minutes before its time takes a visibility step
// (ChangeMessageVisibility, up to 11h59m, landing 14 minutes before its
// time) while its receive count leaves a spare receive after the next,
// else is sent again with up to 15 minutes of delay (SendMessage and
// DeleteMessage); a copy received within 16 minutes is sent again to arrive
// on time, fresh; that one runs and is deleted.
func expectedCost(d time.Duration, mrc int) cost {
	return expectedCostWith(d, mrc, 15*time.Minute, time.Minute, 12*time.Hour)
}

// expectedCostWith is expectedCost with other limits: msgDelay for SQS's
// 15 minutes of message delay, slack for the executor's minute, maxVis for
// SQS's 12 hours of visibility. Visibility steps are whole seconds.
func expectedCostWith(d time.Duration, mrc int, msgDelay, slack, maxVis time.Duration) cost {
	return expectedCostLate(d, mrc, msgDelay, slack, maxVis, nil)
}

// expectedCostLate is expectedCostWith for copies that come late: the n-th
// receive (from 1) comes late(n) after the steps before it add up to (nil:
// on time), so that the rules see that much less of the wait left. Late
// receives are what a loaded machine gives: each step's receive, and the
// runtime's turn from it to its next step, take some milliseconds more than
// the step, and the lateness adds up over the steps.
func expectedCostLate(d time.Duration, mrc int, msgDelay, slack, maxVis time.Duration, late func(n int) time.Duration) cost {
	c := cost{Sends: 1}
	vis := maxVis - slack
	t, count := min(d, msgDelay), 0
	sentBefore := d // how long before its time the copy was sent
	for {
		c.Receives++
		count++
		wait := d - t
		if late != nil {
			wait -= late(c.Receives)
		}
		if wait <= 0 && sentBefore <= msgDelay+slack {
			c.Deletes++
			return c
		}
		if wait > msgDelay+slack && (mrc == 0 || count+2 <= mrc) {
			c.Visibility++
			t += (min(wait-(msgDelay-slack), vis) + time.Second - 1).Truncate(time.Second)
			continue
		}
		c.Sends++
		c.Deletes++
		step := (min(max(wait, 0), msgDelay) + time.Second - 1).Truncate(time.Second)
		sentBefore = wait
		t += step
		count = 0
	}
}

func TestExpectedCostTable(t *testing.T) {
	// The figures the documentation states.
	for _, tc := range []struct {
		d     time.Duration
		mrc   int
		total int
	}{
		{40 * time.Minute, 0, 8},
		{40 * time.Minute, 3, 8},
		{40 * time.Minute, 2, 9},
		{30 * time.Hour, 0, 12},
		{30 * time.Hour, 5, 12},
		{30 * time.Hour, 3, 18},
		{30 * time.Hour, 2, 360},
		{24 * time.Hour, 0, 10},
		{7 * 24 * time.Hour, 0, 6 + 2*14},
	} {
		if got := expectedCost(tc.d, tc.mrc).total(); got != tc.total {
			t.Errorf("delay %s, maxReceiveCount %d: %d requests, the documentation says %d", tc.d, tc.mrc, got, tc.total)
		}
	}
}

// A job delayed 40 minutes or 30 hours runs once, at its time (within the
// sim's second), keeps its idempotency key and trace, is never
// dead-lettered for waiting, and costs what the documentation states.
func TestHoldRunsOnTimeAtTheStatedCost(t *testing.T) {
	for _, tc := range []struct {
		d   time.Duration
		mrc int
	}{
		{40 * time.Minute, 0}, {40 * time.Minute, 3}, {40 * time.Minute, 2},
		{30 * time.Hour, 0}, {30 * time.Hour, 5}, {30 * time.Hour, 3}, {30 * time.Hour, 2},
	} {
		t.Run(fmt.Sprintf("%s/maxReceiveCount=%d", tc.d, tc.mrc), func(t *testing.T) {
			s := newSim(t, tc.mrc, nil)
			nb := s.send(tc.d)
			s.runUntilIdle(tc.d + time.Hour)
			s.checkRanOnce(nb)
			if got, want := s.cost(), expectedCost(tc.d, tc.mrc); got != want {
				t.Errorf("cost %+v (%d requests), want %+v (%d)", got, got.total(), want, want.total())
			}
			if c := s.ex.Counters; c.Failed.Load() != 0 || c.DeadLettered.Load() != 0 {
				t.Errorf("failed %d, dead-lettered %d", c.Failed.Load(), c.DeadLettered.Load())
			}
		})
	}
}

func (s *sim) checkRanOnce(nb time.Time) {
	s.t.Helper()
	if len(s.runs) != 1 {
		s.t.Fatalf("handler ran %d times, want once: %+v", len(s.runs), s.runs)
	}
	r := s.runs[0]
	if r.at.Before(nb) || r.at.After(nb.Add(2*time.Second)) {
		s.t.Errorf("ran at %s, its time is %s", r.at.Format(time.TimeOnly), nb.Format(time.TimeOnly))
	}
	if r.attempt != 1 {
		s.t.Errorf("ran as attempt %d, want 1: waiting counted as attempts", r.attempt)
	}
	if r.key != "order-42" || r.trace != "00-trace-span-01" {
		s.t.Errorf("idempotency key %q, trace context %q: not kept across copies", r.key, r.trace)
	}
	s.checkNotDeadLettered()
}

func (s *sim) checkNotDeadLettered() {
	s.t.Helper()
	if v, i, d := s.f.Depth(s.dlq); v+i+d != 0 {
		s.t.Errorf("%d messages dead-lettered", v+i+d)
	}
}

// A worker that dies holding a waiting message (it comes back after the
// queue's visibility timeout, one receive more) does not get it
// dead-lettered: visibility steps leave a spare receive.
func TestHoldSurvivesACrashWithoutDeadLettering(t *testing.T) {
	for _, mrc := range []int{2, 3, 4} {
		for crashAt := 1; crashAt <= 4; crashAt++ {
			t.Run(fmt.Sprintf("maxReceiveCount=%d/crash@receive%d", mrc, crashAt), func(t *testing.T) {
				s := newSim(t, mrc, nil)
				s.crashAt, s.crashes = crashAt, 1
				nb := s.send(30 * time.Hour)
				s.runUntilIdle(31 * time.Hour)
				if s.crashes != 0 {
					t.Fatal("no crash happened")
				}
				s.checkRanOnce(nb)
			})
		}
	}
}

// A copy that cannot be sent leaves the original, held by visibility until
// its time (no receive burnt per retry), and sent again when it comes back;
// the job runs once, on time, never dead-lettered.
func TestHoldCopySendFails(t *testing.T) {
	for _, mrc := range []int{0, 2, 3} {
		t.Run(fmt.Sprintf("maxReceiveCount=%d", mrc), func(t *testing.T) {
			s := newSim(t, mrc, nil)
			nb := s.send(40 * time.Minute)
			s.f.FailNext(sqstest.OpSendMessage, errors.New("connection reset"), 1)
			s.runUntilIdle(2 * time.Hour)
			s.checkRanOnce(nb)
			s.checkRequeueFailures(1)
		})
	}
}

// A delete that fails after the copy was sent, or a send whose reply is
// lost, leaves two copies: both keep the idempotency key, so the
// idempotency middleware applies the effect once; neither is
// dead-lettered.
func TestHoldDuplicateCopiesShareTheKey(t *testing.T) {
	for _, fault := range []string{"delete fails", "reply lost"} {
		t.Run(fault, func(t *testing.T) {
			effects := map[string]int{}
			s := newSim(t, 3, func(m *sqsworker.Message) error {
				k, _ := m.Attribute("idempotency-key")
				effects[k]++
				return nil
			})
			nb := s.send(40 * time.Minute)
			switch fault {
			case "delete fails":
				s.f.FailNext(sqstest.OpDeleteMessage, errors.New("connection reset"), 1)
			case "reply lost":
				s.api.loseNext = 1
			}
			s.runUntilIdle(2 * time.Hour)
			if len(s.runs) != 2 {
				t.Fatalf("the handler ran %d times, want twice (two copies)", len(s.runs))
			}
			for _, r := range s.runs {
				if r.key != "order-42" || r.at.Before(nb) {
					t.Errorf("run %+v: key not kept, or early", r)
				}
			}
			t.Logf("%s: the handler ran %d times, all under key order-42 (the idempotency middleware applies it once)", fault, len(s.runs))
			s.checkNotDeadLettered()
		})
	}
}

// A copy of a message without an idempotency key gets the key the
// idempotency middleware's DefaultKey gives the first message.
func TestHoldCopyGetsTheFirstMessagesKey(t *testing.T) {
	s := newSim(t, 0, nil)
	const xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
	id := s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
		in.DelaySeconds = 900
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameForSendsAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(xray)},
		}
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(s.clock.Now().Add(40*time.Minute).UnixMilli(), 10))},
		}
	})
	s.runUntilIdle(2 * time.Hour)
	if len(s.runs) != 1 || s.runs[0].key != "message-id:"+id || s.runs[0].id == id || s.runs[0].traceHdr != xray {
		t.Errorf("runs %+v: want one copy with key message-id:%s and the X-Ray header", s.runs, id)
	}
}

// A job sent with ten message attributes, SQS's limit (nine of its own and
// its time), waits in copies that pack its own into one (sqsworker.AttrPackedAttributes) beside
// the copy's key, time and prior attempts: a send whose reply is lost
// leaves two copies that share the first message's key, so that the
// idempotency middleware applies the job once; the handler sees every
// attribute the job was sent with, binary ones included, and not the packed
// one. Before, the copies had no room for the key and were each keyed by
// their own message ID: the job's effect ran twice.
func TestCopiesOfTenAttributesKeepTheKey(t *testing.T) {
	own := map[string]types.MessageAttributeValue{}
	for i := range sqsworker.MaxMessageAttributes - 2 {
		own[fmt.Sprint("own-", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(fmt.Sprint("v", i))}
	}
	own["blob"] = types.MessageAttributeValue{DataType: aws.String("Binary.gz"), BinaryValue: []byte{0, 1, 2, 255}}
	var seen []map[string]sqsworker.MessageAttribute
	// maxReceiveCount 2: no receive to spare for holding it by its
	// visibility, so a copy at each step.
	s := newSim(t, 2, func(m *sqsworker.Message) error {
		seen = append(seen, m.MessageAttributes)
		return nil
	})
	s.api.loseNext = 1
	id := s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
		in.DelaySeconds = 900
		in.MessageAttributes = maps.Clone(own)
		in.MessageAttributes[sqsworker.AttrNotBefore] = types.MessageAttributeValue{DataType: aws.String("Number"),
			StringValue: aws.String(strconv.FormatInt(s.clock.Now().Add(40*time.Minute).UnixMilli(), 10))}
	})
	s.runUntilIdle(2 * time.Hour)
	if len(s.runs) != 2 {
		t.Fatalf("the handler ran %d times, want twice (two copies)", len(s.runs))
	}
	for i, r := range s.runs {
		if r.key != "message-id:"+id {
			t.Errorf("copy %d runs under key %q, want message-id:%s: the job's effect would apply twice", i, r.key, id)
		}
		for name, a := range own {
			got := seen[i][name]
			if got.DataType != aws.ToString(a.DataType) || got.StringValue != aws.ToString(a.StringValue) || !bytes.Equal(got.BinaryValue, a.BinaryValue) {
				t.Errorf("copy %d: attribute %s is %+v, want what the job was sent with", i, name, got)
			}
		}
		if _, ok := seen[i][sqsworker.AttrPackedAttributes]; ok {
			t.Errorf("copy %d: the handler sees the packed attribute", i)
		}
	}
	s.checkNotDeadLettered()
}

// A copy packed for a job with ten attributes that SQS refuses (a queue's
// MaximumMessageSize below 1 MiB, which the message fit without the
// packing's JSON: values of characters JSON escapes) is sent again
// unpacked, as it was before packing: the job waits and runs once, on time,
// and is not dead-lettered. Before, the copy's retries kept the packed
// attribute, every send was refused, and the job was held by its
// visibility, spending its receives.
func TestRefusedPackedCopyGoesUnpacked(t *testing.T) {
	s := newSim(t, 2, nil)
	s.url = s.f.CreateQueue("jobs-small", map[string]string{"VisibilityTimeout": "30", "MaximumMessageSize": "2048",
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("jobs-dlq"))})
	s.ex.Requeue.URL = s.url
	nb := s.clock.Now().Add(40 * time.Minute)
	attrs := map[string]types.MessageAttributeValue{
		sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))},
	}
	for i := range 9 {
		attrs[fmt.Sprint("a", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String(strings.Repeat(`"`, 150))}
	}
	s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) { in.DelaySeconds = 900; in.MessageAttributes = attrs })
	s.runUntilIdle(2 * time.Hour)
	if len(s.runs) != 1 || s.runs[0].at.Before(nb) || s.runs[0].attempt != 1 {
		t.Errorf("runs %+v: want one first attempt, not before %s", s.runs, nb.Format(time.TimeOnly))
	}
	s.checkNotDeadLettered()
	s.checkRequeueFailures(0)
}

// A fair queue's message (a standard queue's, sent with a group: its
// tenant) waits in copies that keep its group, through a delay past SQS's
// 15 minutes and a backoff past its 12 hours, so that SQS goes on
// scheduling them among its tenant's messages. A message without a group
// gets copies without one.
func TestCopiesKeepTheirFairQueueGroup(t *testing.T) {
	for _, group := range []string{"tenant-a", ""} {
		t.Run(fmt.Sprintf("group=%q", group), func(t *testing.T) {
			s := newSim(t, 3, func(m *sqsworker.Message) error {
				if m.ReceiveCount == 1 {
					return sqsworker.RetryAfter(24*time.Hour, errors.New("webhook endpoint down"))
				}
				return nil
			})
			s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
				if group != "" {
					in.MessageGroupId = aws.String(group)
				}
				in.DelaySeconds = 900
				in.MessageAttributes = map[string]types.MessageAttributeValue{
					sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(s.clock.Now().Add(40*time.Minute).UnixMilli(), 10))},
				}
			})
			s.runUntilIdle(3 * 24 * time.Hour)
			if len(s.runs) != 2 {
				t.Fatalf("handler ran %d times, want twice: %+v", len(s.runs), s.runs)
			}
			for i, r := range s.runs {
				if r.group != group {
					t.Errorf("run %d (a copy) has group %q, want %q", i, r.group, group)
				}
			}
			if n := s.f.Calls(sqstest.OpSendMessage); n < 3 {
				t.Errorf("%d copies sent, want at least 3 (the delay's, the backoff's)", n)
			}
			s.checkNotDeadLettered()
		})
	}
}

// A backoff above 12 hours (a webhook's 24 hours) waits in a copy that
// carries the attempts made: the handler sees attempts 1, 2, 3, a day
// apart, and the job is not dead-lettered until its third real attempt
// fails — then with Attempts 3 and without the delay's attributes.
func TestLongBackoffCountsRealAttempts(t *testing.T) {
	for _, succeed := range []bool{true, false} {
		t.Run(fmt.Sprintf("third attempt succeeds=%v", succeed), func(t *testing.T) {
			s := newSim(t, 3, func(m *sqsworker.Message) error {
				if succeed && m.ReceiveCount == 3 {
					return nil
				}
				return sqsworker.RetryAfter(24*time.Hour, errors.New("webhook endpoint down"))
			})
			start := s.clock.Now()
			s.send(0)
			s.runUntilIdle(3 * 24 * time.Hour)
			if len(s.runs) != 3 {
				t.Fatalf("handler ran %d times, want 3: %+v", len(s.runs), s.runs)
			}
			for i, r := range s.runs {
				if r.attempt != i+1 {
					t.Errorf("run %d saw attempt %d", i, r.attempt)
				}
				if at := start.Add(time.Duration(i) * 24 * time.Hour); r.at.Before(at) || r.at.After(at.Add(2*time.Second)) {
					t.Errorf("run %d at %s, want %s", i, r.at.Sub(start), at.Sub(start))
				}
				if r.key != "order-42" {
					t.Errorf("run %d: key %q", i, r.key)
				}
			}
			v, _, _ := s.f.Depth(s.dlq)
			if succeed {
				s.checkNotDeadLettered()
				return
			}
			if v != 1 {
				t.Fatalf("%d messages dead-lettered, want 1", v)
			}
			out, _ := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.dlq, MessageAttributeNames: []string{"All"}})
			a := out.Messages[0].MessageAttributes
			if got := aws.ToString(a[sqsworker.AttrFailureAttempts].StringValue); got != "3" {
				t.Errorf("dead-letter copy says %s attempts, want 3", got)
			}
			for _, name := range []string{sqsworker.AttrNotBefore, sqsworker.AttrPriorAttempts} {
				if _, ok := a[name]; ok {
					t.Errorf("dead-letter copy has %s: a replay would wait or start from old attempts", name)
				}
			}
		})
	}
}

// Without copies (no queue URL to send them to), a job waits by visibility
// steps alone and runs at its time, on the same message.
func TestHoldWithoutCopies(t *testing.T) {
	s := newSim(t, 0, nil)
	s.ex.Requeue = Requeue{}
	nb := s.send(40 * time.Minute)
	s.runUntilIdle(2 * time.Hour)
	if len(s.runs) != 1 || s.runs[0].at.Before(nb) || s.runs[0].at.After(nb.Add(2*time.Second)) {
		t.Fatalf("runs %+v, want one at %s", s.runs, nb)
	}
	if c := s.cost(); c.Sends != 1 {
		t.Errorf("%d sends: copies were sent", c.Sends)
	}
}

// A copy that waited, due, whose fresh copy cannot be sent, runs on itself
// rather than wait again.
// Through a runtime, which holds before its circuit breaker and then runs,
// the fresh copy is tried once, not once more by Run.
func TestHoldDueCopySendFailsRunsOnThisCopy(t *testing.T) {
	for _, runtime := range []bool{false, true} {
		t.Run(fmt.Sprintf("Hold then Run=%v", runtime), func(t *testing.T) {
			s := newSim(t, 0, nil)
			s.runtime = runtime
			s.send(40 * time.Minute)
			// The copy's send fails at its time: let the waits pass first.
			s.clock.Advance(40 * time.Minute)
			s.f.FailNext(sqstest.OpSendMessage, errors.New("access denied"), 2)
			s.runUntilIdle(time.Hour)
			if len(s.runs) != 1 {
				t.Fatalf("ran %d times, want once", len(s.runs))
			}
			s.checkRequeueFailures(1)
			if c := s.cost(); c.Sends != 2 { // the producer's, the failed copy's
				t.Errorf("%d sends, want 2", c.Sends)
			}
		})
	}
}

// On a FIFO queue, which takes no per-message delay, a job sent for later
// waits by visibility steps, with a fresh copy (same group) when its receive
// count runs out and when its time comes: it runs once, on time, never
// dead-lettered, without a request a second.
func TestHoldFIFO(t *testing.T) {
	for _, mrc := range []int{0, 2, 3} {
		t.Run(fmt.Sprintf("maxReceiveCount=%d", mrc), func(t *testing.T) {
			s := newSim(t, mrc, nil)
			attrs := map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"}
			s.dlq = s.f.CreateQueue("jobs-dlq.fifo", map[string]string{"FifoQueue": "true"})
			s.ex.Mover = &queue.Mover{API: s.api, URL: s.dlq, FIFO: true, Now: s.clock.Now}
			if mrc > 0 {
				attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.QueueARN("jobs-dlq.fifo"), mrc)
			}
			s.url = s.f.CreateQueue("jobs.fifo", attrs)
			s.ex.Requeue = Requeue{API: s.api, URL: s.url, FIFO: true}
			nb := s.clock.Now().Add(30 * time.Hour)
			s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("d1")
				in.MessageAttributes = map[string]types.MessageAttributeValue{
					sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))},
					"idempotency-key":       {DataType: aws.String("String"), StringValue: aws.String("order-42")},
				}
			})
			s.runUntilIdle(31 * time.Hour)
			if len(s.runs) != 1 || s.runs[0].at.Before(nb) || s.runs[0].at.After(nb.Add(2*time.Second)) || s.runs[0].attempt != 1 {
				t.Fatalf("runs %+v, want one first attempt at %s", s.runs, nb)
			}
			s.checkNotDeadLettered()
			if c := s.cost(); c.total() > 40 {
				t.Errorf("cost %+v: %d requests", c, c.total())
			} else {
				t.Logf("cost %+v: %d requests", c, c.total())
			}
		})
	}
}

// A job sent at the queue's size limit, without an idempotency key, still
// has waiting copies that fit: the key a copy would be given does not push
// it over the limit (then it goes without), so the job is not left waiting
// on a message whose receives run out — never dead-lettered for waiting.
func TestHoldCopyOfAMessageAtTheSizeLimit(t *testing.T) {
	for _, tc := range []struct{ mrc, limit int }{{0, producer.MaxMessageSize}, {2, producer.MaxMessageSize}, {2, 64 << 10}} {
		t.Run(fmt.Sprintf("maxReceiveCount=%d/MaximumMessageSize=%d", tc.mrc, tc.limit), func(t *testing.T) {
			s := newSim(t, tc.mrc, nil)
			if tc.limit != producer.MaxMessageSize {
				s.url = s.f.CreateQueue("jobs-small", map[string]string{"VisibilityTimeout": "30", "MaximumMessageSize": strconv.Itoa(tc.limit),
					"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.QueueARN("jobs-dlq"), tc.mrc)})
				s.ex.Requeue.URL = s.url
			}
			p, err := producer.New(s.f, producer.Config{QueueURL: s.url, MaxMessageSize: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			nb := s.clock.Now().Add(30 * time.Hour)
			m := producer.Message{Body: "x", NotBefore: nb}
			m.Body = strings.Repeat("x", tc.limit-producer.Size(m)+1)
			if _, err := p.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			s.runUntilIdle(31 * time.Hour)
			if len(s.runs) != 1 || s.runs[0].at.Before(nb) || s.runs[0].at.After(nb.Add(2*time.Second)) || s.runs[0].attempt != 1 {
				t.Fatalf("runs %+v, want one first attempt at %s", s.runs, nb)
			}
			s.checkNotDeadLettered()
			s.checkRequeueFailures(0)
		})
	}
}

// A not-before further ahead than sqsworker.MaxDelay from the message's send
// (another producer's, or microseconds taken for milliseconds) holds the job
// back for MaxDelay at most, as the documentation says, not for ever: the
// copy sent carries the time cut to that.
func TestHoldFarFutureNotBeforeIsCut(t *testing.T) {
	s := newSim(t, 2, nil) // no room for visibility steps: a copy at once
	far := s.clock.Now().Add(50 * 365 * 24 * time.Hour)
	id := s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(far.UnixMilli(), 10))},
		}
	})
	sent := s.clock.Now()
	out, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.url, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	s.ex.Run(&Job{Msg: sqsmsg.FromSDK(s.url, &out.Messages[0]), ReceivedAt: s.clock.Now(), Ctx: context.Background()}, s)
	if len(s.runs) != 0 {
		t.Fatal("the handler ran before its time")
	}
	s.clock.Advance(sqsworker.MaxMessageDelay)
	out, err = s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.url, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageId) == id {
		t.Fatalf("receive of the copy: %v, %d messages", err, len(out.Messages))
	}
	v, _ := strconv.ParseInt(aws.ToString(out.Messages[0].MessageAttributes[sqsworker.AttrNotBefore].StringValue), 10, 64)
	if nb, limit := time.UnixMilli(v), sent.Add(sqsworker.MaxDelay); nb.After(limit) {
		t.Errorf("the copy waits until %s, more than %s after its send (%s)", nb.Format(time.RFC3339), sqsworker.MaxDelay, limit.Format(time.RFC3339))
	}
}

// A Backoff longer than sqsworker.MaxDelay (a custom one: ExponentialBackoff
// and RetryAfter cut theirs) waits MaxDelay, as the documentation says: the
// copy's time is cut to it.
func TestLongBackoffIsCutToMaxDelay(t *testing.T) {
	s := newSim(t, 0, func(*sqsworker.Message) error { return errors.New("down") })
	s.ex.Policy.Backoff = sqsworker.BackoffFunc(func(int, error) time.Duration { return 1000 * 24 * time.Hour })
	s.send(0)
	start := s.clock.Now()
	out, err := s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.url, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	s.ex.Run(&Job{Msg: sqsmsg.FromSDK(s.url, &out.Messages[0]), ReceivedAt: start, Ctx: context.Background()}, s)
	s.clock.Advance(sqsworker.MaxMessageDelay)
	out, err = s.f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &s.url, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive of the copy: %v, %d messages", err, len(out.Messages))
	}
	v, _ := strconv.ParseInt(aws.ToString(out.Messages[0].MessageAttributes[sqsworker.AttrNotBefore].StringValue), 10, 64)
	if nb, limit := time.UnixMilli(v), start.Add(sqsworker.MaxDelay); nb.After(limit) {
		t.Errorf("the copy waits until %s, after %s", nb.Format(time.RFC3339), limit.Format(time.RFC3339))
	}
}

// A short backoff after a handler that ran nearly 12 hours (the visibility
// left cannot hold even that) waits in a copy delayed by the backoff, not
// by the longest message delay: the retry comes on time.
func TestShortBackoffAfterALongRunComesOnTime(t *testing.T) {
	var s *sim
	var failedAt time.Time
	s = newSim(t, 0, func(m *sqsworker.Message) error {
		if m.ReceiveCount > 1 {
			return nil
		}
		s.clock.Advance(12*time.Hour - 30*time.Second) // a long run, kept by the heartbeat
		failedAt = s.clock.Now()
		return sqsworker.RetryAfter(2*time.Minute, errors.New("rate limited"))
	})
	s.send(0)
	s.runUntilIdle(13 * time.Hour)
	if len(s.runs) != 2 || s.runs[1].attempt != 2 {
		t.Fatalf("runs %+v, want 2, the second as attempt 2", s.runs)
	}
	if at, want := s.runs[1].at, failedAt.Add(2*time.Minute); at.Before(want) || at.After(want.Add(2*time.Second)) {
		t.Errorf("retried %s after the failure, want %s", at.Sub(failedAt), want.Sub(failedAt))
	}
}

// A queue whose attributes could not be read (the Lambda adapter goes on
// without them) may still have a redrive policy: a job waiting for its
// time must not spend receives on visibility steps that policy counts, so
// it waits in fresh copies, and is never dead-lettered for waiting.
func TestHoldWithRedriveUnknownWaitsInCopies(t *testing.T) {
	for _, d := range []time.Duration{40 * time.Minute, 30 * time.Hour} {
		t.Run(d.String(), func(t *testing.T) {
			s := newSim(t, 2, nil) // the queue's redrive policy: maxReceiveCount 2
			s.ex.Policy = outcome.Policy{Backoff: sqsworker.ExponentialBackoff{}, HasDLQ: true, RedriveUnknown: true}
			nb := s.send(d)
			s.runUntilIdle(d + time.Hour)
			s.checkRanOnce(nb)
			if c := s.cost(); c.Visibility != 0 {
				t.Errorf("%d visibility steps with the redrive policy unknown, want none: %+v", c.Visibility, c)
			}
		})
	}
}

// The same for a FIFO queue: a job waiting for its time 30 hours ahead
// takes visibility steps only as a redrive policy of maxReceiveCount 2, the
// least that lets a FIFO message wait at all, would allow them, so that no
// policy of 2 or more counts its waits to the dead-letter queue. Before, an
// unknown policy was taken for none: the job waited in visibility steps of
// 12 hours, and on the third receive SQS moved it to the dead-letter queue.
func TestHoldFIFOWithRedriveUnknown(t *testing.T) {
	for _, mrc := range []int{2, 3} {
		t.Run(fmt.Sprintf("maxReceiveCount=%d", mrc), func(t *testing.T) {
			s := newSim(t, mrc, nil)
			s.dlq = s.f.CreateQueue("jobs-dlq.fifo", map[string]string{"FifoQueue": "true"})
			s.ex.Mover = &queue.Mover{API: s.api, URL: s.dlq, FIFO: true, Now: s.clock.Now}
			s.url = s.f.CreateQueue("jobs.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30",
				"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, sqstest.QueueARN("jobs-dlq.fifo"), mrc)})
			s.ex.Requeue = Requeue{API: s.api, URL: s.url, FIFO: true}
			s.ex.Policy = outcome.Policy{Backoff: sqsworker.ExponentialBackoff{}, HasDLQ: true, RedriveUnknown: true}
			nb := s.clock.Now().Add(30 * time.Hour)
			s.f.Send(s.url, "job", func(in *sqs.SendMessageInput) {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String("d1")
				in.MessageAttributes = map[string]types.MessageAttributeValue{
					sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))},
					"idempotency-key":       {DataType: aws.String("String"), StringValue: aws.String("order-42")},
				}
			})
			if !s.runUntil(31 * time.Hour) {
				t.Errorf("the queue still holds the job after its time")
			}
			if len(s.runs) != 1 || s.runs[0].at.Before(nb) || s.runs[0].at.After(nb.Add(2*time.Second)) || s.runs[0].attempt != 1 {
				t.Errorf("runs %+v, want one first attempt at %s", s.runs, nb)
			}
			s.checkNotDeadLettered()
		})
	}
}

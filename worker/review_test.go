package worker_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A job without a key, with nine message attributes of its own, cut short
// at the shutdown deadline on its last receive waits in a copy that carries
// the job's key (its first message's ID), its prior attempts left out for
// it: a duplicate of the copy, or the original should its delete fail,
// runs under the same key, and the idempotency middleware applies the job
// once. Before, the copy kept its prior attempts and went without the key,
// and its own message ID became its key.
func TestShutdownReleaseCopyWithoutRoomKeepsTheKey(t *testing.T) {
	t.Parallel()
	eachQueue(t, "release-key", func(t *testing.T, q relQueue) {
		attrs := map[string]types.MessageAttributeValue{}
		for i := range 9 {
			attrs[fmt.Sprint("own-", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
		}
		var id string
		r := stopAtSecondAttempt(t, q.api, worker.Config{QueueURL: q.url}, false, func() {
			out, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: aws.String("job"),
				MessageAttributes: attrs})
			if err != nil {
				t.Fatal(err)
			}
			id = aws.ToString(out.MessageId)
		}, nil, 60*time.Second)
		if s := r.w.Stats(); s.Released != 1 || s.Requeued != 1 || s.RequeueFailures != 0 {
			t.Fatalf("stats %+v: want 1 release, in a copy", s)
		}
		var copies []types.Message
		localtest.Eventually(t, 90*time.Second, func() bool {
			out, err := q.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.url, MaxNumberOfMessages: 10,
				WaitTimeSeconds: 1, VisibilityTimeout: 300, MessageAttributeNames: []string{"All"}})
			if err != nil {
				t.Fatal(err)
			}
			copies = append(copies, out.Messages...)
			return len(copies) > 0
		}, "the copy did not come")
		if n := q.count(q.url) + q.count(q.dlq); len(copies) != 1 || n != 1 {
			t.Fatalf("%d messages received, %d in the queues; want the copy alone", len(copies), n)
		}
		c := sqsmsg.FromSDK(q.url, &copies[0])
		if c.ID == id {
			t.Fatal("the original is still in the queue")
		}
		if got, want := idempotency.DefaultKey(c), "message-id:"+id; got != want {
			t.Errorf("the copy's key is %q, want the job's %q", got, want)
		}
	})
}

// held is the number of jobs whose time has not come that the stopping
// worker's last long poll takes, in the test below.
const held = 3

// Jobs whose time has not come (ten minutes ahead: a hold by a copy, at
// any receive count) that one of the stopping worker's last long polls
// takes are held back in copies whose sends, as the copies of released
// messages, are given up after the stop's bound (5s) when SQS takes them
// and never answers: the jobs are then held by their visibility, none
// lost, none run, none dead-lettered. Before, the hold's copies were bound
// by the executor's MoveTimeout alone (30s), which the stop waited for.
// When the sends pass, the copies take the originals' place.
func TestStoppingHoldCopiesShareTheStopBound(t *testing.T) {
	eachHungSends(t, "stopping-hold-copies", 10*time.Second, 20*time.Second, holdCopiesWhileStopping)
}

// holdCopiesWhileStopping runs the test above on q through api: the stop
// must end within within of the jobs' release to the last long poll.
func holdCopiesWhileStopping(t *testing.T, q relQueue, api *hungSends, hang bool, within time.Duration) {
	t.Helper()
	nb := strconv.FormatInt(time.Now().Add(10*time.Minute).UnixMilli(), 10)
	for i := range held {
		if _, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: aws.String(fmt.Sprint("later-", i)),
			MessageAttributes: map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: &nb}}}); err != nil {
			t.Fatal(err)
		}
	}
	visible := q.firstAttempts(t, held)
	polls := &pollCount{API: api}
	r := start(t, polls, worker.Config{QueueURL: q.url, Concurrency: held, Pollers: 1, MaxMessages: held, WaitTime: 5 * time.Second, DisableDepth: true},
		sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
			t.Errorf("handler ran for %s ten minutes before its time", m.ID)
			return nil
		}))
	polls.under(t, 1) // the loop in its long poll
	stopped := make(chan error, 1)
	go func() { stopped <- r.w.Shutdown(context.Background()) }()
	localtest.Eventually(t, 10*time.Second, func() bool { return !r.w.Ready() }, "the worker does not stop")
	api.armed.Store(hang)
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
	t.Logf("stopped %s after the jobs were made visible", took.Round(time.Millisecond))
	r.stop(10 * time.Second)
	s := r.w.Stats()
	if s.Received != held || s.Held != held || s.Released != 0 || s.DeadLettered != 0 || s.AckFailures != 0 {
		t.Errorf("stats %+v: want the %d jobs received by the last long poll and held", s, held)
	}
	if hang {
		if took > within {
			t.Errorf("the stop took %s, want within %s: the hold's copies were not bound by the stop", took.Round(time.Millisecond), within)
		}
		if s.Requeued != 0 || s.RequeueFailures != held || api.sends.Load() != held {
			t.Errorf("stats %+v, %d sends: want each copy sent once and given up", s, api.sends.Load())
		}
	} else if s.Requeued != held || s.RequeueFailures != 0 {
		t.Errorf("stats %+v: want the %d copies sent", s, held)
	}
	if got := q.count(q.url); got != held {
		t.Errorf("%d messages in the queue after the stop, want %d", got, held)
	}
	if got := q.count(q.dlq); got != 0 {
		t.Errorf("%d messages dead-lettered, want none", got)
	}
}

// In a FIFO group, a message whose time has not come (ten minutes ahead)
// received behind one that fails, and released with the rest of its group,
// is released, not held back: held, it stayed in flight for ten minutes,
// and SQS hands out no message of a group with one in flight, so that the
// failed message, at the group's head, came back ten minutes late rather
// than after its backoff (1s). On sqstest.Fake, which, as SQS, hands out
// several messages of one group in one receive (the emulator hands out
// one, so that no message comes behind another in a receive).
func TestFIFOHeldMessageBehindAFailureDoesNotLockTheGroup(t *testing.T) {
	t.Parallel()
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		url := f.CreateQueue("held-behind.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"})
		nb := strconv.FormatInt(time.Now().Add(10*time.Minute).UnixMilli(), 10)
		for i, body := range []string{"first", "later"} {
			f.Send(url, body, func(in *sqs.SendMessageInput) {
				in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(fmt.Sprint(i))
				if body == "later" {
					in.MessageAttributes = map[string]types.MessageAttributeValue{sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: &nb}}
				}
			})
		}
		start0 := time.Now()
		var mu sync.Mutex
		runs := map[string][]time.Duration{}
		r := start(t, f, worker.Config{QueueURL: url, Concurrency: 2, MaxMessages: 10, WaitTime: time.Second, DisableDepth: true, Backoff: oneSecond},
			sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
				mu.Lock()
				defer mu.Unlock()
				runs[m.Body] = append(runs[m.Body], time.Since(start0))
				if m.Body == "first" && len(runs[m.Body]) == 1 {
					return errTransient
				}
				return nil
			}))
		time.Sleep(11 * time.Minute)
		r.stop(10 * time.Second)
		mu.Lock()
		defer mu.Unlock()
		if f := runs["first"]; len(f) != 2 || f[1] > time.Minute {
			t.Errorf("first ran at %v, want twice, the second within a minute (its backoff 1s)", f)
		}
		if l := runs["later"]; len(l) != 1 || l[0] < 10*time.Minute {
			t.Errorf("later ran at %v, want once, at its time (10m)", l)
		}
	})
}

// A job at the size limit of a queue whose MaximumMessageSize is below
// SQS's 1 MiB (64 KiB), cut short at the shutdown deadline on its last
// receive, still waits in a copy: SQS refuses the copy with its time and
// prior attempts, and it goes without them, its attempts starting again,
// rather than not at all (then SQS moved the job to the dead-letter queue
// on its next receive, though no handler failed there).
func TestShutdownReleaseCopyAtASmallQueueLimit(t *testing.T) {
	t.Parallel()
	const limit = 64 << 10
	small := func(t *testing.T, q relQueue) {
		body := strings.Repeat("x", limit-16)
		r := stopAtSecondAttempt(t, q.api, worker.Config{QueueURL: q.url}, false, func() {
			if _, err := q.api.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.url, MessageBody: &body}); err != nil {
				t.Fatal(err)
			}
		}, nil, 60*time.Second)
		if s := r.w.Stats(); s.Released != 1 || s.Requeued != 1 || s.RequeueFailures != 0 {
			t.Errorf("stats %+v: want 1 release, in a copy", s)
		}
		q.runCopyAs(t, 1)
	}
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		f := sqstest.NewFake()
		dlq := f.CreateQueue("release-small-dlq", nil)
		url := f.CreateQueue("release-small", map[string]string{"VisibilityTimeout": "30", "MaximumMessageSize": strconv.Itoa(limit),
			"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":2}`, sqstest.QueueARN("release-small-dlq"))})
		small(t, relQueue{api: f, url: url, dlq: dlq, count: func(url string) int { v, fl, d := f.Depth(url); return v + fl + d }})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		q := emuRelQueue(t)
		if _, err := q.api.(*sqs.Client).SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: &q.url,
			Attributes: map[string]string{"MaximumMessageSize": strconv.Itoa(limit)}}); err != nil {
			t.Fatal(err)
		}
		small(t, q)
	})
}

package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// receiveIDs is an HTTP client that records the ReceiveRequestAttemptId of
// every ReceiveMessage request it sends.
type receiveIDs struct {
	next *http.Client
	mu   sync.Mutex
	ids  []string
}

func (r *receiveIDs) Do(req *http.Request) (*http.Response, error) {
	if req.Header.Get("X-Amz-Target") == "AmazonSQS.ReceiveMessage" && req.Body != nil {
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		var in struct{ ReceiveRequestAttemptId string }
		_ = json.Unmarshal(b, &in)
		r.mu.Lock()
		r.ids = append(r.ids, in.ReceiveRequestAttemptId)
		r.mu.Unlock()
	}
	return r.next.Do(req)
}

func (r *receiveIDs) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// On a FIFO queue every receive carries an attempt ID of its own, and a
// receive the SDK sends again after its reply was lost carries the same
// one: SQS then answers it with the messages it handed the first, instead
// of hiding them and their group for a visibility timeout. (The local
// emulator ignores the ID: this checks what the worker sends.)
func TestFIFOReceiveSentAgainKeepsItsAttemptID(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true})
	p, _ := proxiedSQS(t)
	rec := &receiveIDs{next: &http.Client{}}
	pc := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL()); o.HTTPClient = rec })
	handled := make(chan string, 1)
	// No depth polling: the one reply lost below is a receive's.
	r := start(t, pc, worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second, DisableDepth: true}, sqsworker.HandlerFunc(
		func(_ context.Context, m *sqsworker.Message) error { handled <- m.Body; return nil }))
	localtest.Eventually(t, 60*time.Second, func() bool { return len(rec.seen()) >= 2 }, "the worker does not receive")
	before := rec.seen()
	if distinct(before) != len(before) || before[0] == "" {
		t.Fatalf("receives before any fault carry the attempt IDs %q; want one of its own each", before)
	}
	if err := p.LoseReplies(1); err != nil {
		t.Fatal(err)
	}
	localtest.Eventually(t, 60*time.Second, func() bool {
		ids := rec.seen()
		return p.Stats().LostReplies == 1 && len(ids) > len(before)+2
	}, "no reply lost, or no receive after it")
	ids := rec.seen()
	if distinct(ids) != len(ids)-1 {
		t.Errorf("attempt IDs %q: want exactly one sent twice, by the receive whose reply was lost", ids)
	}
	handledAfter(t, c, q.URL, handled, "the lost reply")
	r.stop(30 * time.Second)
}

// handledAfter sends a message to the FIFO queue at url and fails the test
// unless the worker hands it to its handler, which reports it on handled,
// within a minute: nothing is left blocking the group after what.
func handledAfter(t *testing.T, c *sqs.Client, url string, handled <-chan string, what string) {
	t.Helper()
	localtest.Send(t, c, url, "g", "after")
	select {
	case body := <-handled:
		if body != "after" {
			t.Errorf("handled %q", body)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("a message sent after %s was not handled", what)
	}
}

func distinct(ids []string) int {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return len(m)
}

// A FIFO receive whose replies are lost until it fails for good (as the SDK
// reports it once its own retries are spent) was handed messages all the
// same. The worker's next receive carries the failed one's attempt ID, so it
// gets them at once, received once, rather than after a visibility timeout
// (10 minutes here), a receive nearer the dead-letter queue, with their
// group blocked meanwhile. The Fake is called directly, without the SDK's
// retries: each lost reply fails a receive for good.
func TestFakeFIFOReceiveFailedForGoodIsSentAgain(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := fakeFIFO(f, "lost", map[string]string{"VisibilityTimeout": "600"})
	fakeGroup(f, url, "g", "g1", "g2")
	f.LoseReplies(sqstest.OpReceiveMessage, 3)
	var calls fakeCalls
	r := start(t, f, worker.Config{QueueURL: url}, sqsworker.HandlerFunc(
		func(_ context.Context, m *sqsworker.Message) error { calls.add(m); return nil }))
	waitFor(t, 60*time.Second, func() bool { return len(calls.of("g")) == 2 }, func() string {
		return fmt.Sprintf("the messages handed to the receives whose replies were lost were not handled (handled: %v; their visibility timeout is 10 minutes): the worker did not send the failed receive again with its attempt ID", calls.of(""))
	})
	// The group is not blocked: a message sent afterwards is handled.
	fakeGroup(f, url, "g", "g3")
	waitFor(t, 60*time.Second, func() bool { return len(calls.of("g")) == 3 }, func() string {
		return fmt.Sprintf("g3, sent afterwards, not handled (handled: %v)", calls.of(""))
	})
	if got, want := calls.of(""), []fakeCall{{"g1", 1}, {"g2", 1}, {"g3", 1}}; !slices.Equal(got, want) {
		t.Errorf("handled %v, want %v: each once, in order, received once", got, want)
	}
	if n := f.Calls(sqstest.OpReceiveMessage); n < 5 {
		t.Errorf("%d receives, want at least 5: 3 with lost replies, their retry, one for g3", n)
	}
	localtest.Eventually(t, 10*time.Second, func() bool { return r.w.Stats().Deleted == 3 }, "not all deleted: %+v", r.w.Stats())
	r.stop(10 * time.Second)
	if v, fl, d := f.Depth(url); v+fl+d != 0 {
		t.Errorf("queue depth %d %d %d, want empty", v, fl, d)
	}
}

// A receive whose replies are all lost, the SDK's retries included, fails
// for good; the worker's next receive carries its attempt ID, and then it
// forgets it. (The local emulator ignores the ID: this checks what the
// worker sends. The test above checks what SQS does with it, on the Fake.)
func TestFIFOReceiveFailedForGoodKeepsItsAttemptID(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true})
	p, _ := proxiedSQS(t)
	rec := &receiveIDs{next: &http.Client{}}
	pc := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL()); o.HTTPClient = rec })
	attempts := pc.Options().RetryMaxAttempts
	if attempts == 0 {
		attempts = retry.DefaultMaxAttempts
	}
	handled := make(chan string, 1)
	// Only receives go through the proxy (no depth polls), so that the
	// lost replies are all a receive's.
	r := start(t, pc, worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second, DisableDepth: true}, sqsworker.HandlerFunc(
		func(_ context.Context, m *sqsworker.Message) error { handled <- m.Body; return nil }))
	localtest.Eventually(t, 60*time.Second, func() bool { return len(rec.seen()) >= 2 }, "the worker does not receive")
	before := len(rec.seen())
	if err := p.LoseReplies(attempts); err != nil {
		t.Fatal(err)
	}
	// The receive's attempts, the worker's next receive, and one more.
	waitFor(t, 90*time.Second, func() bool {
		return p.Stats().LostReplies == int64(attempts) && len(rec.seen()) >= before+attempts+2
	}, func() string {
		return fmt.Sprintf("replies lost: %d of %d; receives after the fault: %d", p.Stats().LostReplies, attempts, len(rec.seen())-before)
	})
	if !strings.Contains(r.logs.String(), "receive failed, retrying") {
		t.Fatalf("no receive failed for good: logs:\n%s", r.logs.String())
	}
	// The receives that carry the same ID as the one before them: the
	// SDK's retries and the worker's next receive, one run of attempts+1
	// sends of one ID. (The receive that failed may have been sent before
	// the fault was set, while a long poll was under way.)
	ids := rec.seen()
	run, longest, lost := 1, 1, ""
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			run++
		} else {
			run = 1
		}
		if run > longest {
			longest, lost = run, ids[i]
		}
	}
	if longest != attempts+1 {
		t.Errorf("attempt IDs %q (the fault set after the %dth): want one sent %d times in a row (the %d attempts of the receive that failed for good, then the worker's next receive); the longest run is %d",
			ids, before, attempts+1, attempts, longest)
	}
	if n := len(ids) - distinct(ids); n != attempts {
		t.Errorf("attempt IDs %q: %d sent again, want %d, all of %s: the worker forgets an ID once a receive returned", ids, n, attempts, lost)
	}
	handledAfter(t, c, q.URL, handled, "the receive that failed for good")
	r.stop(30 * time.Second)
}

// waitFor waits until cond holds, or fails the test after timeout with the
// message msg returns then.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, msg())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

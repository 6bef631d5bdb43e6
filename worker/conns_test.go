package worker_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// A worker on an SQS client with the SDK's default HTTP client, which keeps
// 10 idle connections per host, uses more at once (8 receive loops and up to
// 8 acknowledgement batches at Concurrency 80). Without room for them in the
// pool, every call past the tenth closes its connection when it returns and
// the next opens one: hundreds of connections for a few thousand messages
// (over TLS, a handshake each). The worker makes its calls through a copy of
// the HTTP client with room enough, so it opens about as many connections
// as it uses at once, however many messages it handles.
func TestWorkerReusesConnections(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	const n = 5000
	sendNumbered(t, c, q.URL, n)
	p, pc := proxiedSQS(t)
	if _, ok := pc.Options().HTTPClient.(*awshttp.BuildableClient); !ok {
		t.Fatalf("the client's HTTP client is a %T, want the SDK's default", pc.Options().HTTPClient)
	}
	r := start(t, pc, worker.Config{QueueURL: q.URL, Concurrency: 80}, sqsworker.HandlerFunc(
		func(context.Context, *sqsworker.Message) error { return nil }))
	localtest.Eventually(t, 120*time.Second, func() bool { return r.w.Stats().Deleted == n }, "not all %d messages deleted", n)
	r.stop(30 * time.Second)
	// 8 receive loops and 8 acknowledgement batches at once (17 seen),
	// with room for connections the emulator closed when idle: what the
	// worker uses at once, not a number that grows with the messages
	// (without the wider pool: 46 for 3,000 messages).
	if got := p.Stats().Accepted; got > 32 {
		t.Errorf("the worker opened %d connections for %d messages, want at most 32", got, n)
	}
	t.Logf("%d connections for %d messages", p.Stats().Accepted, n)
}

// A client whose HTTP client is not the SDK's default kind is used as it
// is: its calls go through the caller's own HTTP client.
func TestWorkerKeepsCustomHTTPClient(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	localtest.Send(t, c, q.URL, "", "a", "b", "c")
	counted := &countingHTTP{next: &http.Client{}}
	cc := localtest.NewSQS(t, func(o *sqs.Options) { o.HTTPClient = counted })
	r := start(t, cc, worker.Config{QueueURL: q.URL, Concurrency: 80}, sqsworker.HandlerFunc(
		func(context.Context, *sqsworker.Message) error { return nil }))
	localtest.Eventually(t, 60*time.Second, func() bool { return r.w.Stats().Deleted == 3 }, "not all 3 messages deleted")
	r.stop(30 * time.Second)
	if counted.n.Load() == 0 {
		t.Error("the worker's calls did not go through the client's own HTTP client")
	}
}

// countingHTTP is an HTTP client of the caller's own that counts its calls.
type countingHTTP struct {
	next *http.Client
	n    atomic.Int64
}

func (c *countingHTTP) Do(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.Do(r)
}

// Dead-letter moves are made by the handler goroutines, up to Concurrency
// at once, besides the receives and acknowledgement batches: a burst of
// broken messages needs room for them too, or every move past the pool's
// room closes its connection for the next to open one.
func TestWorkerReusesConnectionsWhileDeadLettering(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	dlq := localtest.NewQueue(t, c, localtest.QueueOptions{})
	const n = 3000
	sendNumbered(t, c, q.URL, n)
	p, pc := proxiedSQS(t)
	r := start(t, pc, worker.Config{QueueURL: q.URL, DeadLetterQueueURL: dlq.URL, Concurrency: 80}, sqsworker.HandlerFunc(
		func(context.Context, *sqsworker.Message) error { return sqsworker.Permanent(errors.New("broken")) }))
	localtest.Eventually(t, 120*time.Second, func() bool { return r.w.Stats().Deleted == n }, "not all %d messages moved", n)
	r.stop(30 * time.Second)
	if s := r.w.Stats(); s.DeadLettered != n {
		t.Fatalf("%d of %d messages dead-lettered", s.DeadLettered, n)
	}
	// 80 moves, 8 receives, 8 acknowledgement batches and 4 heartbeat
	// calls at once (71 to 84 seen), with room for connections the
	// emulator closed when idle (without room for the moves: 591 to 690).
	if got := p.Stats().Accepted; got > 150 {
		t.Errorf("the worker opened %d connections for %d messages dead-lettered, want at most 150", got, n)
	}
	t.Logf("%d connections for %d messages dead-lettered", p.Stats().Accepted, n)
}

// sendNumbered sends n messages whose bodies are 0 to n-1.
func sendNumbered(t *testing.T, c *sqs.Client, queueURL string, n int) {
	t.Helper()
	bodies := make([]string, n)
	for i := range bodies {
		bodies[i] = strconv.Itoa(i)
	}
	localtest.Send(t, c, queueURL, "", bodies...)
}

// proxiedSQS returns a counting proxy in front of the local SQS, stopped
// when the test ends, and a client with the SDK's default HTTP client that
// goes through it.
func proxiedSQS(t *testing.T) (*faultproxy.Proxy, *sqs.Client) {
	t.Helper()
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL()) })
}

package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
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
	r := start(t, pc, worker.Config{QueueURL: q.URL, Concurrency: 1, WaitTime: time.Second}, sqsworker.HandlerFunc(
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
	localtest.Send(t, c, q.URL, "g", "after")
	select {
	case body := <-handled:
		if body != "after" {
			t.Errorf("handled %q", body)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("a message sent after the lost reply was not handled")
	}
	r.stop(30 * time.Second)
}

func distinct(ids []string) int {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return len(m)
}

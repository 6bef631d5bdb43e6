package ackbatch_test

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The local SQS out of reach for 15 s (its loopback proxy refusing
// connections) while 100 received messages are deleted: the deletes, valid
// while the messages' visibility timeout lasts, land once it is back; after
// the visibility timeout no message comes back.
func TestDeletesOutlastOutageOnLocalSQS(t *testing.T) {
	t.Parallel()
	const (
		total  = 100
		vis    = 45 * time.Second
		outage = 15 * time.Second
	)
	direct := localtest.NewSQS(t)
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{VisibilityTimeout: vis})
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = "job"
	}
	localtest.Send(t, direct, q.URL, "", bodies...)
	receivedAt := time.Now()
	msgs := localtest.ReceiveAll(t, direct, q.URL, time.Second, vis)
	if len(msgs) != total {
		t.Fatalf("received %d messages, want %d", len(msgs), total)
	}
	leaseEnd := receivedAt.Add(vis - 2*time.Second)

	u, err := url.Parse(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	proxy := localtest.StartProxy(t, u.Host)
	var calls localtest.Counter
	client := localtest.NewSQS(t, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(proxy.URL())
		o.APIOptions = append(o.APIOptions, calls.AddTo)
	})

	var mu sync.Mutex
	results := map[string]error{}
	b := ackbatch.New(client, ackbatch.Config{QueueURL: q.URL, Result: func(_ ackbatch.Kind, e ackbatch.Entry, err error) {
		mu.Lock()
		defer mu.Unlock()
		if _, dup := results[e.MessageID]; dup {
			t.Errorf("message %s finished twice", e.MessageID)
		}
		results[e.MessageID] = err
	}})
	finished := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(results)
	}

	proxy.Cut()
	for _, m := range msgs {
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: aws.ToString(m.ReceiptHandle), MessageID: aws.ToString(m.MessageId),
			Owner: owner{valid: func() bool { return time.Now().Before(leaseEnd) }}})
	}
	time.Sleep(outage)
	if n := finished(); n != 0 {
		t.Errorf("%d deletes finished while SQS was out of reach, want none given up", n)
	}
	if n := calls.Get("DeleteMessageBatch"); n <= total/ackbatch.MaxBatch {
		t.Errorf("%d delete attempts during the outage, want retries", n)
	}
	proxy.Restore()
	localtest.Eventually(t, time.Until(leaseEnd), func() bool { return finished() == total }, "not every delete finished after the outage")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
	mu.Lock()
	for id, err := range results {
		if err != nil {
			t.Errorf("message %s: %v", id, err)
		}
	}
	mu.Unlock()
	t.Logf("%d delete attempts in all", calls.Get("DeleteMessageBatch"))

	time.Sleep(time.Until(receivedAt.Add(vis + 2*time.Second)))
	if again := localtest.ReceiveAll(t, direct, q.URL, 2*time.Second, vis); len(again) != 0 {
		t.Errorf("%d messages came back after their visibility timeout", len(again))
	}
	if v, f, d := localtest.Depth(t, direct, q.URL); v+f+d != 0 {
		t.Errorf("queue holds %d visible, %d in flight, %d delayed; want none", v, f, d)
	}
}

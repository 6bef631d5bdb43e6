package idempotency_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// Jobs sent by the producer without an idempotency key, whose calls' answers
// are lost on the way back, on the emulators: the SDK sends each call again
// and the standard queue stores every message twice, under two message IDs;
// the key the producer generated is in both copies, so that the worker,
// under the idempotency middleware, runs each job once. Before the producer
// generated keys, each job's key was its message ID and every job ran twice.
func TestProducerLostReplyKeylessJobsRunOnceOnEmulator(t *testing.T) {
	t.Parallel()
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second})
	proxied := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
	p, err := producer.New(proxied, producer.Config{QueueURL: q.URL, MaxMessageSize: producer.MaxMessageSize})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	msgs := make([]producer.Message, 10)
	for i := range msgs {
		msgs[i].Body = fmt.Sprint("batch-", i)
		bodies = append(bodies, msgs[i].Body)
	}
	if err := proxy.LoseReplies(1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendBatch(context.Background(), msgs); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	if err := proxy.LoseReplies(1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), producer.Message{Body: "single"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	bodies = append(bodies, "single")
	if n := proxy.Stats().LostReplies; n != 2 {
		t.Fatalf("%d replies lost, want 2", n)
	}
	if v, _, _ := localtest.Depth(t, sq, q.URL); v != 2*len(bodies) {
		t.Fatalf("the queue holds %d messages, want each of the %d twice", v, len(bodies))
	}

	guard, err := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var eff effects
	h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		eff.add(m.Body)
		return nil
	}), guard.Middleware)
	runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 8}, h)
	localtest.Eventually(t, 120*time.Second, func() bool { return drained(t, sq, q.URL) }, "queue not drained")
	got := eff.snapshot()
	for _, b := range bodies {
		if got[b] != 1 {
			t.Errorf("%s: %d effects, want 1", b, got[b])
		}
	}
	if s := guard.Stats(); s.Duplicates != int64(len(bodies)) {
		t.Errorf("idempotency %+v, want %d duplicates", s, len(bodies))
	}
}

package producer_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// The answer to a SendMessageBatch call lost on the way back, on the
// emulator: SQS stored the messages, the SDK sent the call again, and
// SendBatch reports every message sent although a standard queue holds each
// twice, both copies under the message's idempotency key; a FIFO queue
// deduplicates the second call and holds each once. Result's documentation
// said that Err nil meant the message was stored once.
func TestSendBatchLostReply(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		name := "standard"
		if fifo {
			name = "fifo"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			direct := localtest.NewSQS(t)
			q := localtest.NewQueue(t, direct, localtest.QueueOptions{FIFO: fifo, ContentDedup: fifo})
			proxied := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
			// The queue's size given, the only call is the send.
			p, err := producer.New(proxied, producer.Config{QueueURL: q.URL, MaxMessageSize: producer.MaxMessageSize})
			if err != nil {
				t.Fatal(err)
			}
			msgs := []producer.Message{
				{Body: "a", IdempotencyKey: "job-a"}, {Body: "b", IdempotencyKey: "job-b"}, {Body: "c", IdempotencyKey: "job-c"},
			}
			if fifo {
				for i := range msgs {
					msgs[i].GroupID = "g"
				}
			}
			if err := proxy.LoseReplies(1); err != nil {
				t.Fatal(err)
			}
			res, err := p.SendBatch(context.Background(), msgs)
			if err != nil {
				t.Fatalf("SendBatch: %v", err)
			}
			for i, r := range res {
				if r.Err != nil || r.MessageID == "" {
					t.Errorf("message %d: %+v, want it reported sent", i, r)
				}
			}
			if n := proxy.Stats().LostReplies; n != 1 {
				t.Fatalf("%d replies lost, want 1", n)
			}
			copies := 2
			if fifo {
				copies = 1
			}
			var want []string
			for _, k := range []string{"job-a", "job-b", "job-c"} {
				for range copies {
					want = append(want, k)
				}
			}
			keys := drainKeys(t, copying(direct), q.URL, len(want))
			slices.Sort(keys)
			if !slices.Equal(keys, want) {
				t.Errorf("the queue holds %v, want %v", keys, want)
			}
		})
	}
}

// drainKeys receives and deletes a queue's messages until it has want of
// them (or a minute has passed), then for a further 2 s, and returns their
// idempotency keys; it fails the test on a message whose key is not "job-"
// and its body.
func drainKeys(t *testing.T, c *sqs.Client, url string, want int) []string {
	t.Helper()
	var keys []string
	deadline := time.Now().Add(time.Minute)
	var quietUntil time.Time
	for {
		now := time.Now()
		if len(keys) >= want && quietUntil.IsZero() {
			quietUntil = now.Add(2 * time.Second)
		}
		if now.After(deadline) || !quietUntil.IsZero() && now.After(quietUntil) {
			return keys
		}
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			k := aws.ToString(m.MessageAttributes[producer.IdempotencyKeyAttribute].StringValue)
			if w := "job-" + aws.ToString(m.Body); k != w {
				t.Errorf("a copy of %q has the key %q, want %q", aws.ToString(m.Body), k, w)
			}
			keys = append(keys, k)
			if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A send through a proxy that takes requests and never answers, on the
// local SQS, with no deadline of its own (context.Background): each
// attempt is given up at Config.RequestTimeout and sent again by the SDK,
// and the send fails, naming the wait, once the attempts are spent. It
// waited for ever. A send whose proxy passes traffic again before they are
// spent is stored, once, under its key.
func TestSendToASwallowingEndpointIsBounded(t *testing.T) {
	t.Parallel()
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	direct := localtest.NewSQS(t)
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{})
	proxied := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
	p, err := producer.New(proxied, producer.Config{QueueURL: q.URL, MaxMessageSize: producer.MaxMessageSize, RequestTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Blackhole(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Send(context.Background(), producer.Message{Body: "lost", IdempotencyKey: "job-lost"})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no answer within 500ms") {
			t.Errorf("send: %v, want the attempts' timeouts named", err)
		}
	case <-time.After(60 * time.Second):
		_ = proxy.Pass()
		<-done
		t.Fatal("the send still waited on an endpoint that never answers after 60s")
	}
	go func() {
		time.Sleep(700 * time.Millisecond)
		_ = proxy.Pass()
	}()
	if _, err := p.Send(context.Background(), producer.Message{Body: "kept", IdempotencyKey: "job-kept"}); err != nil {
		t.Fatalf("send once the proxy passes again: %v", err)
	}
	got := localtest.ReceiveAll(t, direct, q.URL, time.Second, 30*time.Second)
	if len(got) != 1 || aws.ToString(got[0].Body) != "kept" {
		t.Errorf("%d messages in the queue, want the one send that got through", len(got))
	}
}

package lambda_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
)

// lostExtensionReplies is a client whose visibility changes (the
// heartbeat's extensions), once armed, reach SQS, which applies them, but
// whose replies are lost: the call fails, as one given up on its timeout.
type lostExtensionReplies struct {
	lambda.API
	armed atomic.Bool
}

func (l *lostExtensionReplies) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out, err := l.API.ChangeMessageVisibilityBatch(ctx, in, opts...)
	if err == nil && l.armed.Load() {
		return nil, errors.New("read tcp: i/o timeout (the reply was lost)")
	}
	return out, err
}

// extensionsViaProxy is a client whose visibility changes (the heartbeat's
// extensions) go through another client, one behind a fault proxy; its
// other calls go straight to SQS.
type extensionsViaProxy struct {
	lambda.API
	via *sqs.Client
}

func (v extensionsViaProxy) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return v.via.ChangeMessageVisibilityBatch(ctx, in, opts...)
}

// leaseQueue is the queue of the test below, on the fake or the emulator:
// a 4s visibility timeout, and a redrive policy allowing 1 receive.
type leaseQueue struct {
	url, arn, dlq string
	api           lambda.API
	count         func(url string) int // the messages in url: visible, in flight, delayed
	// receive receives the queue's message as the event source mapping
	// does, with the queue's own visibility timeout; none if it has none.
	receive func() []types.Message
}

// A record whose handler succeeds once the adapter has taken its lease for
// lost, on the last receive its redrive policy allows (1): the heartbeat's
// extensions reached SQS, which applied them, but their replies were lost,
// so the heartbeat found the lease run out (4s visibility timeout) while
// SQS still held the message. The job is done: the record is reported
// done, not failed, and deleted at once, as a record whose copy was sent;
// nothing is dead-lettered or run again. Before, it was reported a batch
// item failure with its visibility left alone, and SQS moved it, on its
// next receive, to the dead-letter queue though its job was done. On the
// fake (in a synctest bubble) and on the emulator, whose extensions go
// through a fault proxy that loses their replies.
func TestSucceededPastItsLeaseDeleted(t *testing.T) {
	t.Parallel()
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		bubble.Test(t, func(t *testing.T) {
			f := sqstest.NewFake()
			dlq := f.CreateQueue("succeeded-dlq", nil)
			url := f.CreateQueue("succeeded", map[string]string{"VisibilityTimeout": "4",
				"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, sqstest.QueueARN("succeeded-dlq"))})
			api := &lostExtensionReplies{API: f}
			q := leaseQueue{url: url, arn: sqstest.QueueARN("succeeded"), dlq: dlq, api: api,
				count: func(url string) int { v, fl, d := f.Depth(url); return v + fl + d },
				receive: func() []types.Message {
					out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), WaitTimeSeconds: 1,
						MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
					if err != nil {
						t.Fatal(err)
					}
					return out.Messages
				}}
			f.Send(url, "job")
			succeededPastItsLease(t, q, func() { api.armed.Store(true) }, func() { api.armed.Store(false) })
		})
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		localtest.Require(t)
		sq := localtest.NewSQS(t)
		eq := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 1, VisibilityTimeout: 4 * time.Second})
		p, via := proxiedSQS(t)
		q := leaseQueue{url: eq.URL, arn: eq.ARN, dlq: eq.DLQURL, api: extensionsViaProxy{API: sq, via: via},
			count: func(url string) int { v, fl, d := localtest.Depth(t, sq, url); return v + fl + d },
			receive: func() []types.Message {
				out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(eq.URL), WaitTimeSeconds: 1,
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
				if err != nil {
					t.Fatal(err)
				}
				return out.Messages
			}}
		localtest.Send(t, sq, eq.URL, "", "job")
		succeededPastItsLease(t, q,
			func() {
				if err := p.LoseReplies(1000); err != nil {
					t.Error(err)
				}
			},
			func() {
				if err := p.Pass(); err != nil {
					t.Error(err)
				}
				if p.Stats().LostReplies == 0 {
					t.Error("no extension's reply was lost")
				}
			})
	})
}

// succeededPastItsLease runs the test above on q, whose one message was
// sent: lose makes the extensions' replies lost from then on, pass ends
// that.
func succeededPastItsLease(t *testing.T, q leaseQueue, lose, pass func()) {
	var calls, effects atomic.Int64
	var cause atomic.Value
	h := sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
		if calls.Add(1) > 1 {
			effects.Add(1)
			return nil
		}
		lose()
		<-ctx.Done() // the lease looks lost; the job's work is done all the same
		effects.Add(1)
		pass()
		cause.Store(context.Cause(ctx))
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: q.api})
	var msgs []types.Message
	for deadline := time.Now().Add(20 * time.Second); len(msgs) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the message was not received")
		}
		msgs = q.receive()
	}
	ev := sqstest.SQSEvent(q.arn, msgs)
	resp := invokeBy(t, fn, ev, 30*time.Second)
	if c, _ := cause.Load().(error); !errors.Is(c, visibility.ErrLeaseLost) {
		t.Fatalf("the handler's context ended with %v, want a lost lease", c)
	}
	if len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none: the job was done", failedIDs(resp))
	}
	if n := q.count(q.url); n != 0 {
		t.Errorf("%d messages in the queue once the function returned, want none: deleted at once", n)
	}
	esmDeletes(t, q, ev, resp)
	// Past any extension SQS applied: a message not deleted comes back,
	// and SQS moves it, on this receive, to the dead-letter queue.
	time.Sleep(6 * time.Second)
	if again := q.receive(); len(again) != 0 {
		t.Errorf("the message came back (receive count %s)", again[0].Attributes["ApproximateReceiveCount"])
	}
	if n := q.count(q.dlq); n != 0 {
		t.Errorf("%d messages dead-lettered, want none: the job was done", n)
	}
	if n := q.count(q.url); n != 0 {
		t.Errorf("%d messages left in the queue, want none", n)
	}
	if c, e := calls.Load(), effects.Load(); c != 1 || e != 1 {
		t.Errorf("the handler was called %d times, the effect applied %d times; want once each", c, e)
	}
}

// esmDeletes deletes the records of ev not reported failed in resp, as the
// event source mapping does once the function returns; a record deleted
// already is deleted again, as SQS allows.
func esmDeletes(t *testing.T, q leaseQueue, ev events.SQSEvent, resp events.SQSEventResponse) {
	t.Helper()
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, r := range ev.Records {
		if failed[r.MessageId] {
			continue
		}
		out, err := q.api.DeleteMessageBatch(context.Background(), &sqs.DeleteMessageBatchInput{QueueUrl: &q.url,
			Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: &r.ReceiptHandle}}})
		if err == nil && len(out.Failed) > 0 {
			err = errors.New(aws.ToString(out.Failed[0].Code))
		}
		if err != nil {
			t.Logf("the event source mapping's delete of %s: %v", r.MessageId, err)
		}
	}
}

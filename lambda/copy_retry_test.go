package lambda_test

// The waiting copy of a record postponed without an attempt on the last
// receive its redrive policy allows, when its send fails for a while: the
// adapter tries it again until the time the invocation's moves must end.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// countedSends is a fake that counts its SendMessage calls.
type countedSends struct {
	*sqstest.Fake
	n atomic.Int64
}

func (c *countedSends) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	c.n.Add(1)
	return c.Fake.SendMessage(ctx, in, opts...)
}

// A record whose dependency is down (Unavailable), or that its handler
// postpones (RetryAfter with a nil error), on the last receive its redrive
// policy allows waits in a fresh copy whose send SQS refuses three times:
// the send is tried again within the invocation, the copy takes the
// record's place, and nothing is dead-lettered. Before, the copy was
// given up after one send, the record reported failed, and SQS moved it to
// the dead-letter queue on its next receive though no handler failed.
func TestLastReceiveCopyRetriedWithinTheInvocation(t *testing.T) {
	for name, result := range map[string]error{
		"unavailable": sqsworker.Unavailable(errors.New("the dependency is down")),
		"postponed":   sqsworker.RetryAfter(time.Second, nil),
	} {
		t.Run(name, func(t *testing.T) {
			f := &countedSends{Fake: newFake("30")}
			h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return result })
			fn := newHandler(t, h, lambda.Config{Client: f, DisableHeartbeat: true})
			ev := lastAttempt(t, f.Fake, "orders", "job")
			f.FailNext(sqstest.OpSendMessage, errors.New("dial tcp: connection refused"), 3)
			resp := invokeBy(t, fn, ev, 20*time.Second)
			if got := failedIDs(resp); len(got) != 0 {
				t.Errorf("failures %v, want none: the record waits in its copy", got)
			}
			if n := f.n.Load(); n != 4 {
				t.Errorf("%d sends, want the copy sent on its fourth", n)
			}
			if n := receiveAgain(t, f.Fake, "orders"); n != "1" {
				t.Errorf("the job came back with receive count %q, want a fresh copy's 1", n)
			}
			if v, _, _ := f.Depth(sqstest.QueueURL("orders-dlq")); v != 0 {
				t.Errorf("%d messages dead-lettered, want none: no handler failed", v)
			}
		})
	}
}

// The sends end by the time the invocation's moves must end: with SQS
// refusing every send, the copy is sent again until then, and given up;
// the function returns before its deadline and reports the record failed.
func TestLastReceiveCopyRetriedUntilTheDeadline(t *testing.T) {
	f := &countedSends{Fake: newFake("30")}
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error {
		return sqsworker.Unavailable(errors.New("the dependency is down"))
	})
	fn := newHandler(t, h, lambda.Config{Client: f, DisableHeartbeat: true})
	ev := lastAttempt(t, f.Fake, "orders", "job")
	f.FailNext(sqstest.OpSendMessage, errors.New("dial tcp: connection refused"), 1<<20)
	resp := invokeBy(t, fn, ev, 3*time.Second)
	if got := failedIDs(resp); len(got) != 1 {
		t.Errorf("failures %v, want the record's", got)
	}
	if n := f.n.Load(); n < 2 {
		t.Errorf("%d sends, want the copy sent again until the deadline", n)
	}
}

// On the emulator, the function's SQS client going through a fault proxy:
// a record whose dependency is down on the last receive its redrive policy
// allows (2) waits in a fresh copy while SQS refuses connections for 3s,
// from the handler's start: the copy is sent once SQS answers, within the
// invocation (15s), the record's original deleted, and the job, back as
// the copy, runs once and is done; nothing is dead-lettered. Before, the
// copy was given up after the SDK's retries, and SQS moved the record to
// the dead-letter queue on its next receive.
func TestEmulatorLastReceiveCopyRetried(t *testing.T) {
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: 30 * time.Second})
	p, via := proxiedSQS(t)
	var calls, ran atomic.Int64
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if calls.Add(1) == 1 {
			refuseFor(t, p, 3*time.Second)
			return sqsworker.Unavailable(errors.New("the dependency is down"))
		}
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: via})
	localtest.Send(t, sq, q.URL, "", "job")
	last := receiveLast(t, sq, q.URL)
	if resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, last), 15*time.Second); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, want none: the record waits in its copy", failedIDs(resp))
	}
	again := receiveN(t, sq, q.URL, 1) // or dead-lettered by SQS on this receive
	if n := again[0].Attributes["ApproximateReceiveCount"]; n != "1" {
		t.Errorf("came back with receive count %s, want a fresh copy's 1", n)
	}
	if resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, again), 15*time.Second); len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none", failedIDs(resp))
	}
	if _, err := sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: again[0].ReceiptHandle}); err != nil {
		t.Fatal(err) // as the event source mapping does
	}
	if ran.Load() != 1 {
		t.Errorf("the job ran %d times, want once", ran.Load())
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

// sendsVia is an SQS client whose SendMessage calls go through another
// client (one behind a fault proxy); its other calls, the heartbeat's
// among them, go straight to SQS.
type sendsVia struct {
	*sqs.Client
	via *sqs.Client
}

func (s sendsVia) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return s.via.SendMessage(ctx, in, opts...)
}

// On the emulator, a queue whose visibility timeout is short (3s) with a
// redrive policy allowing one receive: a record its handler postpones
// (RetryAfter with a nil error) waits in a fresh copy, whose sends SQS
// refuses (through a fault proxy) for 8s, longer than the visibility
// timeout, well within the invocation (20s). The heartbeat extends the
// record's lease only when half of it is left (1.5s), about when the
// copy's retries would stop for the original's delete: the retries must
// wait for that extension, and go on while the heartbeat holds the record,
// until SQS takes the copy. The record is not reported failed, its copy
// runs the job once, and nothing is dead-lettered. Before, the copy was
// given up some 2s in, at the lease as it stood, the record reported
// failed, and SQS moved it to the dead-letter queue on its next receive
// though no handler failed.
func TestEmulatorCopyRetriesOutlastAShortVisibilityTimeout(t *testing.T) {
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 1, VisibilityTimeout: 3 * time.Second})
	p, via := proxiedSQS(t)
	client := sendsVia{Client: sq, via: via}
	var calls, ran atomic.Int64
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		if calls.Add(1) == 1 {
			refuseFor(t, p, 8*time.Second)
			return sqsworker.RetryAfter(time.Second, nil)
		}
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: client})
	localtest.Send(t, sq, q.URL, "", "job")
	out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %d messages, %v", len(out.Messages), err)
	}
	if resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, out.Messages), 20*time.Second); len(resp.BatchItemFailures) != 0 {
		t.Fatalf("failures %v, want none: the record waits in its copy", failedIDs(resp))
	}
	again := receiveN(t, sq, q.URL, 1) // or dead-lettered by SQS on this receive
	if n := again[0].Attributes["ApproximateReceiveCount"]; n != "1" {
		t.Errorf("came back with receive count %s, want a fresh copy's 1", n)
	}
	if resp := invokeBy(t, fn, sqstest.SQSEvent(q.ARN, again), 20*time.Second); len(resp.BatchItemFailures) != 0 {
		t.Errorf("failures %v, want none", failedIDs(resp))
	}
	if _, err := sq.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &q.URL, ReceiptHandle: again[0].ReceiptHandle}); err != nil {
		t.Fatal(err) // as the event source mapping does
	}
	if ran.Load() != 1 {
		t.Errorf("the job ran %d times, want once", ran.Load())
	}
	if v, i, d := localtest.Depth(t, sq, q.DLQURL); v+i+d != 0 {
		t.Errorf("%d messages dead-lettered, want none: no handler failed", v+i+d)
	}
	if v, i, d := localtest.Depth(t, sq, q.URL); v+i+d != 0 {
		t.Errorf("%d messages left in the queue, want none", v+i+d)
	}
}

// refuseFor has p refuse connections, then pass them again after d. The
// timer is stopped when t ends, should t end before.
func refuseFor(t *testing.T, p *faultproxy.Proxy, d time.Duration) {
	if err := p.Refuse(); err != nil {
		t.Error(err)
	}
	back := time.AfterFunc(d, func() {
		if err := p.Pass(); err != nil {
			t.Error(err)
		}
	})
	t.Cleanup(func() { back.Stop() })
}

// proxiedSQS returns a fault proxy in front of the emulator's SQS, closed
// when t ends, and an SQS client that goes through it.
func proxiedSQS(t *testing.T) (*faultproxy.Proxy, *sqs.Client) {
	t.Helper()
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(p.URL()) })
}

package sqstest_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/sqstest"
)

// recvAttempt receives up to max messages with the ReceiveRequestAttemptId
// id, without a long poll.
func recvAttempt(t *testing.T, f *sqstest.Fake, url, id string, max int32) []types.Message {
	t.Helper()
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: max, ReceiveRequestAttemptId: aws.String(id),
		MessageSystemAttributeNames: allSystem,
	})
	if err != nil {
		t.Fatalf("ReceiveMessage with attempt ID %s: %v", id, err)
	}
	return out.Messages
}

// received is what a test compares of received messages: body, receipt
// handle and receive count.
type received struct{ body, handle, count string }

func receivedOf(ms []types.Message) []received {
	out := make([]received, len(ms))
	for i, m := range ms {
		out[i] = received{aws.ToString(m.Body), aws.ToString(m.ReceiptHandle), m.Attributes["ApproximateReceiveCount"]}
	}
	return out
}

// attemptQueue is a FIFO queue with a visibility timeout of 30s and the
// messages a1 a2 in group a and b1 in group b.
func attemptQueue(t *testing.T) (*sqstest.Fake, *sqstest.Clock, string) {
	f, clock := newFake(t)
	url := f.CreateQueue("attempts.fifo", map[string]string{"FifoQueue": "true", "VisibilityTimeout": "30"})
	f.Send(url, "a1", group("a"))
	f.Send(url, "a2", group("a"))
	f.Send(url, "b1", group("b"))
	return f, clock, url
}

// A FIFO receive retried with the attempt ID of one whose reply was lost
// gets the same messages with the same receipt handles and receive counts,
// whatever it asks for, and their visibility timeout starts again; a receive
// with another ID gets none of them.
func TestFIFOReceiveAttemptIDRepeats(t *testing.T) {
	f, clock, url := attemptQueue(t)
	first := recvAttempt(t, f, url, "A", 2)
	if got := bodies(first); !slices.Equal(got, []string{"a1", "a2"}) {
		t.Fatalf("first receive got %q, want a1 a2", got)
	}
	clock.Advance(20 * time.Second)
	again := recvAttempt(t, f, url, "A", 10)
	if got, want := receivedOf(again), receivedOf(first); !slices.Equal(got, want) {
		t.Fatalf("the receive retried with the same attempt ID got %+v, want the first's %+v", got, want)
	}
	// 40s after the first receive, 20s after the retry: without the reset
	// a1 and a2 would be visible again.
	clock.Advance(20 * time.Second)
	other := recvAttempt(t, f, url, "B", 10)
	if got := bodies(other); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("a receive with another attempt ID got %q, want b1 only: a1 and a2 stay in flight 30s from the retry", got)
	}
	if v, fl, d := f.Depth(url); v != 0 || fl != 3 || d != 0 {
		t.Errorf("depth %d visible, %d in flight, %d delayed; want 0 3 0", v, fl, d)
	}
	// The handles of the retry are the first's, and valid.
	if out := deleteAll(t, f, url, first); len(out.Failed) != 0 {
		t.Errorf("deleting with the handles both receives returned: %+v", out.Failed)
	}
}

// A receive with an attempt ID is a new one once one of the messages it
// handed out was modified (deleted, its visibility changed, received
// again), once 5 minutes have passed, or on a standard queue.
func TestFIFOReceiveAttemptIDFresh(t *testing.T) {
	ctx := context.Background()
	t.Run("after a delete", func(t *testing.T) {
		f, _, url := attemptQueue(t)
		first := recvAttempt(t, f, url, "A", 1)
		if out := deleteAll(t, f, url, first); len(out.Failed) != 0 {
			t.Fatalf("delete: %+v", out.Failed)
		}
		if got := bodies(recvAttempt(t, f, url, "A", 1)); !slices.Equal(got, []string{"a2"}) {
			t.Errorf("after a1 was deleted, a receive with its attempt ID got %q, want a2", got)
		}
	})
	t.Run("after a visibility change", func(t *testing.T) {
		f, _, url := attemptQueue(t)
		first := recvAttempt(t, f, url, "A", 2)
		if _, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: first[1].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
		// a1 is still in flight, so group a is locked: only b1 is left.
		if got := bodies(recvAttempt(t, f, url, "A", 10)); !slices.Equal(got, []string{"b1"}) {
			t.Errorf("after a2's visibility changed, a receive with the attempt ID got %q, want b1 (a fresh receive)", got)
		}
	})
	t.Run("after another receive", func(t *testing.T) {
		f, clock, url := attemptQueue(t)
		first := recvAttempt(t, f, url, "A", 1)
		clock.Advance(31 * time.Second)
		if got := receivedOf(recvAttempt(t, f, url, "B", 1)); len(got) != 1 || got[0].body != "a1" || got[0].count != "2" {
			t.Fatalf("after the visibility timeout, another receive got %+v, want a1, second receive", got)
		}
		again := receivedOf(recvAttempt(t, f, url, "A", 1))
		if len(again) != 1 || again[0].body != "b1" {
			t.Errorf("a receive with the first's attempt ID after a1 was received again got %+v, want b1 (a fresh receive); first got %+v", again, receivedOf(first))
		}
	})
	t.Run("within 5 minutes", func(t *testing.T) {
		f, clock, url := attemptQueue(t)
		first := recvAttempt(t, f, url, "A", 1)
		clock.Advance(sqstest.DeduplicationInterval - time.Second)
		if got, want := receivedOf(recvAttempt(t, f, url, "A", 1)), receivedOf(first); !slices.Equal(got, want) {
			t.Errorf("a retry a second before the 5 minutes passed got %+v, want %+v", got, want)
		}
	})
	t.Run("after 5 minutes", func(t *testing.T) {
		f, clock, url := attemptQueue(t)
		first := recvAttempt(t, f, url, "A", 1)
		clock.Advance(sqstest.DeduplicationInterval)
		got := receivedOf(recvAttempt(t, f, url, "A", 1))
		if len(got) != 1 || got[0].body != "a1" || got[0].count != "2" || got[0].handle == aws.ToString(first[0].ReceiptHandle) {
			t.Errorf("a retry after 5 minutes got %+v, want a1 received a second time, with a new handle", got)
		}
	})
	t.Run("standard queue", func(t *testing.T) {
		f, _ := newFake(t)
		url := f.CreateQueue("standard", nil)
		f.Send(url, "m1")
		f.Send(url, "m2")
		recvAttempt(t, f, url, "A", 1)
		if got := bodies(recvAttempt(t, f, url, "A", 1)); !slices.Equal(got, []string{"m2"}) {
			t.Errorf("a standard queue's second receive with the same attempt ID got %q, want m2: standard queues ignore the ID", got)
		}
	})
	t.Run("invalid ID", func(t *testing.T) {
		f, _, url := attemptQueue(t)
		_, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, ReceiveRequestAttemptId: aws.String("white space")})
		var api smithy.APIError
		if !errors.As(err, &api) || api.ErrorCode() != "InvalidParameterValue" {
			t.Errorf("attempt ID with a space: %v, want InvalidParameterValue", err)
		}
	})
}

// A lost reply: the call is applied, and the caller gets a network error
// that no retry classification takes for fatal. Calls failed by FailNext
// lose no reply.
func TestLoseReplies(t *testing.T) {
	ctx := context.Background()
	f, _, url := attemptQueue(t)
	f.FailNext(sqstest.OpReceiveMessage, &smithy.GenericAPIError{Code: "RequestThrottled"}, 1)
	f.LoseReplies(sqstest.OpReceiveMessage, 2)
	in := &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1, ReceiveRequestAttemptId: aws.String("A"), MessageSystemAttributeNames: allSystem}
	if _, err := f.ReceiveMessage(ctx, in); err == nil || errors.As(err, new(*smithyhttp.RequestSendError)) {
		t.Fatalf("first receive: %v, want the throttling FailNext injected", err)
	}
	for i := range 2 {
		out, err := f.ReceiveMessage(ctx, in)
		var send *smithyhttp.RequestSendError
		var netErr net.Error
		var oe *smithy.OperationError
		if out != nil || !errors.As(err, &send) || !errors.As(err, &netErr) || !errors.As(err, &oe) || oe.Operation() != sqstest.OpReceiveMessage {
			t.Fatalf("receive %d with a lost reply: %v, %v; want a network error", i+2, out, err)
		}
		if awserr.IsFatal(err) {
			t.Errorf("a lost reply's error is fatal: %v", err)
		}
		if _, fl, _ := f.Depth(url); fl != 1 {
			t.Errorf("after receive %d with a lost reply, %d messages in flight, want 1: the receive was applied", i+2, fl)
		}
	}
	// The retry with the same attempt ID gets what the lost replies carried.
	out, err := f.ReceiveMessage(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if got := receivedOf(out.Messages); len(got) != 1 || got[0].body != "a1" || got[0].count != "1" {
		t.Errorf("the receive after the lost replies got %+v, want a1, received once", got)
	}
	if n := f.Calls(sqstest.OpReceiveMessage); n != 4 {
		t.Errorf("%d receives counted, want 4", n)
	}

	// Other operations: a delete applied, its reply lost.
	f.LoseReplies(sqstest.OpDeleteMessageBatch, 1)
	in2 := &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: out.Messages[0].ReceiptHandle}}}
	if _, err := f.DeleteMessageBatch(ctx, in2); err == nil {
		t.Error("a delete whose reply was lost succeeded")
	}
	if v, fl, _ := f.Depth(url); v+fl != 2 {
		t.Errorf("after the delete whose reply was lost: %d visible, %d in flight; want 2 messages left", v, fl)
	}

	// n <= 0 removes the replies still to lose.
	f.LoseReplies(sqstest.OpGetQueueUrl, 3)
	f.LoseReplies(sqstest.OpGetQueueUrl, 0)
	if _, err := f.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String("attempts.fifo")}); err != nil {
		t.Errorf("after removing the lost replies: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("no panic for an unknown operation")
		}
	}()
	f.LoseReplies("Nope", 1)
}

package dlq

import (
	"context"
	"fmt"
	"net"
	"sync"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
)

// fakeEnv is an in-memory SQS with two source queues, each with its own
// dead-letter queue: orders -> orders-dlq and billing -> billing-dlq (one
// receive each), and a queue without either, lonely.
type fakeEnv struct {
	f                                              *sqstest.Fake
	orders, ordersDLQ, billing, billingDLQ, lonely string
}

func newFakeEnv() *fakeEnv {
	f := sqstest.NewFake()
	e := &fakeEnv{f: f}
	e.ordersDLQ = f.CreateQueue("orders-dlq", nil)
	e.billingDLQ = f.CreateQueue("billing-dlq", nil)
	policy := func(dlq string) map[string]string {
		return map[string]string{"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, sqstest.QueueARN(dlq))}
	}
	e.orders = f.CreateQueue("orders", policy("orders-dlq"))
	e.billing = f.CreateQueue("billing", policy("billing-dlq"))
	e.lonely = f.CreateQueue("lonely", nil)
	return e
}

func (e *fakeEnv) urls() []string {
	return []string{e.orders, e.ordersDLQ, e.billing, e.billingDLQ, e.lonely}
}

// deadLetterJobs dead-letters n messages from orders into orders-dlq, with
// the bodies "job 0", "job 1", …
func (e *fakeEnv) deadLetterJobs(n int) {
	for i := range n {
		deadLetter(e.f, e.ordersDLQ, sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}, fmt.Sprint("job ", i))
	}
}

// wantDLQDepth reports an error unless orders-dlq holds visible messages
// and inFlight ones; what says when.
func (e *fakeEnv) wantDLQDepth(t *testing.T, what string, visible, inFlight int) {
	t.Helper()
	if v, f, _ := e.f.Depth(e.ordersDLQ); v != visible || f != inFlight {
		t.Errorf("%s: %d visible, %d in flight, want %d and %d", what, v, f, visible, inFlight)
	}
}

// openOrdersDLQ opens orders-dlq through api with the default Config.
func openOrdersDLQ(t *testing.T, api API) *Queue {
	t.Helper()
	q, err := Open(context.Background(), api, "orders-dlq", Config{})
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// deadLetter sends a message to a dead-letter queue as the runtimes do: a
// copy with failure metadata. It returns the copy's ID.
func deadLetter(f *sqstest.Fake, dlqURL string, fl sqsworker.Failure, body string) string {
	attrs, _ := fl.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}})
	return f.Send(dlqURL, body, func(in *sqs.SendMessageInput) { in.MessageAttributes = sdkAttributes(attrs) })
}

func sdkAttributes(attrs map[string]sqsworker.MessageAttribute) map[string]types.MessageAttributeValue {
	sdk := map[string]types.MessageAttributeValue{}
	for k, v := range attrs {
		sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
	}
	return sdk
}

// redrive sends a message to a source queue and makes SQS's redrive (the
// fake's) move it to the dead-letter queue: received once, released,
// received again past maxReceiveCount.
func redrive(t *testing.T, f *sqstest.Fake, source, body string, attrs map[string]sqsworker.MessageAttribute) {
	t.Helper()
	f.Send(source, body, func(in *sqs.SendMessageInput) { in.MessageAttributes = sdkAttributes(attrs) })
	ctx := context.Background()
	out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(source), MaxNumberOfMessages: 1})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receiving from %s: %v, %d messages", source, err, len(out.Messages))
	}
	if _, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(source), ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(source)}); err != nil || len(out.Messages) != 0 {
		t.Fatalf("receiving from %s again: %v, %d messages", source, err, len(out.Messages))
	}
}

// listing is the fake with the listing calls it lacks, answered from its
// queues' redrive policies: ListDeadLetterSourceQueues (or, with
// unsupported, the InvalidAction error of an emulator without it; with
// denied, AccessDenied) and ListQueues.
type listing struct {
	*sqstest.Fake
	urls        []string
	unsupported bool
	denied      bool
}

func (l *listing) ListDeadLetterSourceQueues(ctx context.Context, in *sqs.ListDeadLetterSourceQueuesInput, _ ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error) {
	switch {
	case l.unsupported:
		return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "ListDeadLetterSourceQueues",
			Err: &smithy.GenericAPIError{Code: "InvalidAction", Message: "Unknown action: ListDeadLetterSourceQueues"}}
	case l.denied:
		return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "ListDeadLetterSourceQueues",
			Err: &smithy.GenericAPIError{Code: "AccessDenied", Message: "not authorized"}}
	}
	arn, err := l.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: in.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return nil, err
	}
	out := &sqs.ListDeadLetterSourceQueuesOutput{}
	for _, u := range l.urls {
		a, err := l.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
		if err != nil {
			continue
		}
		if p, err := ParseRedrivePolicy(a.Attributes["RedrivePolicy"]); err == nil && p.DeadLetterTargetARN == arn.Attributes["QueueArn"] {
			out.QueueUrls = append(out.QueueUrls, u)
		}
	}
	return out, nil
}

func (l *listing) ListQueues(context.Context, *sqs.ListQueuesInput, ...func(*sqs.Options)) (*sqs.ListQueuesOutput, error) {
	return &sqs.ListQueuesOutput{QueueUrls: l.urls}, nil
}

// lossy is the fake with receives that lose their response: SQS hands the
// messages out (they are hidden for the visibility timeout), the caller
// gets a broken connection. lose[i] makes the i-th receive (from 1) lose
// its response; apiError makes it fail as a throttled request instead
// (an error response, with no message handed out).
type lossy struct {
	API
	mu       sync.Mutex
	n        int
	lose     map[int]bool
	apiError bool
}

func (l *lossy) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	l.mu.Lock()
	l.n++
	lose := l.lose[l.n]
	l.mu.Unlock()
	if lose && l.apiError {
		return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "ReceiveMessage", Err: &throttled{}}
	}
	out, err := l.API.ReceiveMessage(ctx, in, opts...)
	if lose && err == nil {
		return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "ReceiveMessage",
			Err: &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}}
	}
	return out, err
}

// throttled is an error response with an HTTP status, as the SDK reports
// one.
type throttled struct{}

func (*throttled) Error() string       { return "RequestThrottled: slow down" }
func (*throttled) ErrorCode() string   { return "RequestThrottled" }
func (*throttled) HTTPStatusCode() int { return 400 }

var _ error = (*throttled)(nil)

// redrivenOnSend is the fake whose SQS redrive moves back to the
// dead-letter queue the first copy a replay sends to source, as when the
// process handling it dies on its last receive: the copy itself, its
// message ID kept.
type redrivenOnSend struct {
	*sqstest.Fake
	t      *testing.T
	source string
	done   bool
}

func (r *redrivenOnSend) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	out, err := r.Fake.SendMessage(ctx, in, opts...)
	if err != nil || r.done || aws.ToString(in.QueueUrl) != r.source {
		return out, err
	}
	r.done = true
	got, rerr := r.Fake.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: in.QueueUrl, MaxNumberOfMessages: 1})
	if rerr != nil || len(got.Messages) != 1 || aws.ToString(got.Messages[0].MessageId) != aws.ToString(out.MessageId) {
		r.t.Errorf("receiving the copy: %v, %d messages", rerr, len(got.Messages))
		return out, err
	}
	if _, err := r.Fake.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: in.QueueUrl, ReceiptHandle: got.Messages[0].ReceiptHandle}); err != nil {
		r.t.Error(err)
	}
	if again, err := r.Fake.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: in.QueueUrl}); err != nil || len(again.Messages) != 0 {
		r.t.Errorf("the copy was not moved: %v, %d messages", err, len(again.Messages))
	}
	return out, err
}

package batch_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/sqstest"
)

// denyingCallbacks is SQS denying the role sends to one queue while deny
// is set, as for a callback queue whose policy or KMS key the role lacks.
type denyingCallbacks struct {
	*sqstest.Fake
	queue string
	deny  atomic.Bool
}

func (d *denyingCallbacks) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if d.deny.Load() && aws.ToString(in.QueueUrl) == d.queue {
		return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage",
			Err: &smithy.GenericAPIError{Code: "AccessDenied", Message: "Access to the resource is denied.", Fault: smithy.FaultClient}}
	}
	return d.Fake.SendMessage(ctx, in, opts...)
}

// A completion job SQS refuses for the callback queue (the role denied
// it, the queue's KMS key, a job over its MaximumMessageSize) is a fault
// of that batch's callback queue, not an outage: the completing chunk
// fails as partly unavailable, which the circuit breaker does not count
// (the other batches' chunks go on), naming the fix, and once fixed the
// job is sent, once. Before, it was unavailable: one batch's callback
// queue opened the breaker for every job.
func TestRefusedCompletionIsNoOutage(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	api := &denyingCallbacks{Fake: e.sqs, queue: e.callbacks}
	c, err := batch.New(context.Background(), e.db, api, batch.Config{Table: e.table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, e.spec("denied", 1)); err != nil {
		t.Fatal(err)
	}
	msgs := receive(t, e.sqs, e.work, 1)
	api.deny.Store(true)
	var fx effects
	h := c.Middleware(fx.handler(nil))
	err = h.HandleMessage(ctx, msgs[0])
	if !sqsworker.IsPartlyUnavailable(err) || !strings.Contains(err.Error(), "grant the role sqs:SendMessage on it") {
		t.Fatalf("a completion job refused for its queue: %v (partly unavailable %v); want partly unavailable, naming the fix", err, sqsworker.IsPartlyUnavailable(err))
	}
	api.deny.Store(false)
	if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
		t.Fatal(err)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
	if n := fx.get("denied#0"); n != 1 {
		t.Errorf("the chunk ran %d times, want once (it was counted before its completion)", n)
	}
}

// On the local SQS: an operator lowers the callback queue's
// MaximumMessageSize under the completion job's size after Create. The
// completing chunk fails as partly unavailable, naming the fix; once the
// size is raised again, the job is sent, once.
func TestRefusedCompletionIsNoOutageOnEmulator(t *testing.T) {
	t.Parallel()
	e := newEmulatorEnv(t, 5)
	ctx := context.Background()
	s := e.spec("shrunk", 1)
	s.Callback.Body = `{"batch":"shrunk","pad":"` + strings.Repeat("x", 2000) + `"}`
	if err := e.coord.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	setSize := func(n string) {
		if _, err := e.sqs.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(e.callbacks),
			Attributes: map[string]string{"MaximumMessageSize": n}}); err != nil {
			t.Fatal(err)
		}
	}
	setSize("1024")
	msgs := receive(t, e.sqs, e.work, 1)
	var fx effects
	h := e.coord.Middleware(fx.handler(nil))
	err := h.HandleMessage(ctx, msgs[0])
	if !sqsworker.IsPartlyUnavailable(err) || !strings.Contains(err.Error(), "raise its MaximumMessageSize") {
		t.Fatalf("a completion job over its queue's size: %v (partly unavailable %v); want partly unavailable, naming the fix", err, sqsworker.IsPartlyUnavailable(err))
	}
	setSize("1048576")
	if err := h.HandleMessage(ctx, again(msgs[0])); err != nil {
		t.Fatal(err)
	}
	if n := len(receive(t, e.sqs, e.callbacks, 10)); n != 1 {
		t.Errorf("%d completion jobs, want 1", n)
	}
	if n := fx.get("shrunk#0"); n != 1 {
		t.Errorf("the chunk ran %d times, want once", n)
	}
}

// missingCallbacks is SQS answering a send to one queue with the legacy
// spelling of a missing queue, which some endpoints still return.
type missingCallbacks struct {
	*sqstest.Fake
	queue string
}

func (d *missingCallbacks) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	if aws.ToString(in.QueueUrl) == d.queue {
		return nil, &smithy.OperationError{ServiceID: "SQS", OperationName: "SendMessage",
			Err: &smithy.GenericAPIError{Code: "AWS.SimpleQueueService.NonExistentQueue", Message: "The specified queue does not exist.", Fault: smithy.FaultClient}}
	}
	return d.Fake.SendMessage(ctx, in, opts...)
}

// A callback queue SQS reports missing under the legacy code is the
// missing queue it is (the chunk dead-lettered, naming the fix), not a
// refusal for the role.
func TestMissingCallbackQueueByTheLegacyCode(t *testing.T) {
	t.Parallel()
	e := newFakeEnv(t, batch.Config{})
	c, err := batch.New(context.Background(), e.db, &missingCallbacks{Fake: e.sqs, queue: e.callbacks}, batch.Config{Table: e.table, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Create(ctx, e.spec("gone", 1)); err != nil {
		t.Fatal(err)
	}
	var fx effects
	err = c.Middleware(fx.handler(nil)).HandleMessage(ctx, receive(t, e.sqs, e.work, 1)[0])
	if !isPermanent(err) || sqsworker.IsUnavailable(err) || !strings.Contains(err.Error(), "does not exist: create it again") {
		t.Errorf("a completion to a missing callback queue: %v; want permanent, naming the fix", err)
	}
}

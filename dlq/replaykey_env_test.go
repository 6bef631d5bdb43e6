package dlq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// On the emulator: a runtime copies a failed job (no idempotency key) to
// the dead-letter queue and dies before deleting it; the job comes back
// and SQS's redrive moves it to the dead-letter queue too. Both are
// replayed through the test's fault proxy, which loses the reply of the
// first send (the SDK sends it again: one copy more). Every copy in the
// source queue runs under the key DefaultKey gave the job, so that the
// idempotency middleware applies its effect once. Before, the copy of the
// message SQS moved was keyed by its own new ID.
func TestReplayKeepsTheOriginalsKeyOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2, VisibilityTimeout: time.Second})
	ctx := context.Background()
	localtest.Send(t, c, q.URL, "", `{"order":42}`)
	receive := func() *types.Message {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 3, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil || len(out.Messages) != 1 {
			t.Fatalf("receive: %v", err)
		}
		return &out.Messages[0]
	}
	first := sqsmsg.FromSDK(q.URL, receive())
	original := first.ID
	// Its last attempt fails: the runtime's dead-letter copy, then no
	// delete (the process died).
	mv := &queue.Mover{API: c, URL: q.DLQURL}
	if _, err := mv.Move(ctx, first, sqsworker.Permanent(errors.New("bad order"))); err != nil {
		t.Fatal(err)
	}
	// It comes back once more, and SQS moves it on the receive after.
	_ = receive()
	localtest.Eventually(t, 30*time.Second, func() bool {
		v, i, d := localtest.Depth(t, c, q.DLQURL)
		if v+i+d == 2 {
			return true
		}
		_, _ = c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &q.URL, WaitTimeSeconds: 1})
		return false
	}, "SQS's redrive did not move the job")

	pc, p := losingClient(t, 1, func(in any) bool { _, ok := in.(*sqs.SendMessageInput); return ok })
	dq, err := Open(ctx, pc, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := dq.Replay(ctx, ReplayConfig{To: q.URL}) // the emulator does not say where SQS moved a message from
	if err != nil || res.Moved != 2 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	msgs := localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 30*time.Second)
	if p.Stats().LostReplies != 1 || len(msgs) != 3 {
		t.Fatalf("%d replies lost, %d copies in the source queue, want 1 and 3", p.Stats().LostReplies, len(msgs))
	}
	for i := range msgs {
		m := sqsmsg.FromSDK(q.URL, &msgs[i])
		if k := idempotency.DefaultKey(m); k != "message-id:"+original {
			t.Errorf("copy %s runs under key %q, want message-id:%s: the job's effect would apply again", m.ID, k, original)
		}
	}
}

// On the emulator: a message with SQS's 10 attributes and no key has no
// room for the one its copy would get: the copy goes without a key. Its
// send's reply is lost (SQS applied it): the SDK does not send it again,
// which would leave two copies of a job nothing tells apart, run twice;
// the replay stops, saying that the copy may be in the queue already, and
// the message stays in the dead-letter queue. Before, the SDK sent it
// again and the replay counted one move.
func TestReplayOfAKeylessCopyIsNotSentTwiceOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	ctx := context.Background()
	attrs := map[string]types.MessageAttributeValue{}
	for i := range sqsworker.MaxMessageAttributes {
		attrs[fmt.Sprintf("a%d", i)] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("v")}
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &q.DLQURL, MessageBody: aws.String(`{"order":7}`), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	pc, p := losingClient(t, 1, func(in any) bool { _, ok := in.(*sqs.SendMessageInput); return ok })
	dq, err := Open(ctx, pc, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := dq.Replay(ctx, ReplayConfig{To: q.URL})
	if err == nil || !strings.Contains(err.Error(), "look for it there before you replay this message again") || res.Moved != 0 {
		t.Errorf("replay: %v, %+v; want it stopped, saying the copy may be there", err, res)
	}
	t.Logf("replay: %v", err)
	copies := localtest.ReceiveAll(t, c, q.URL, 2*time.Second, 30*time.Second)
	if p.Stats().LostReplies != 1 || len(copies) != 1 {
		t.Errorf("%d replies lost, %d copies in the source queue, want 1 and 1 (the send SQS applied, not sent again)", p.Stats().LostReplies, len(copies))
	}
	if v, i := depth(t, c, q.DLQURL); v+i != 1 {
		t.Errorf("%d messages in the dead-letter queue, want the original", v+i)
	}
}

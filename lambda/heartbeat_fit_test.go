package lambda_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
)

// A heartbeat setting that does not fit the queue's visibility timeout
// (made for 60 s, the queue since lowered to 20 s: Threshold 30 s) does
// not fail the invocation, which would fail every invocation alike and
// spend every record's receives toward the dead-letter queue: the records
// run without the heartbeat, and an error says what to fix.
func TestHeartbeatThatNoLongerFitsTheQueueRunsWithout(t *testing.T) {
	t.Parallel()
	f := newFake("20")
	var logs logBuffer
	var ran atomic.Int64
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		ran.Add(1)
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: f, Concurrency: 1,
		Heartbeat: visibility.Config{Threshold: 30 * time.Second, Extension: time.Minute},
		Logger:    slog.New(slog.NewTextHandler(&logs, nil))})
	ev := received(t, f, "orders", "a", "b")
	resp, err := fn(context.Background(), ev)
	if err != nil || len(resp.BatchItemFailures) != 0 || ran.Load() != 2 {
		t.Fatalf("invocation: %+v, %v, %d handled; want both records handled and none failed", resp, err, ran.Load())
	}
	if !strings.Contains(logs.String(), "Config.Heartbeat does not fit the queue's visibility timeout") {
		t.Errorf("no error naming the setting; logs:\n%s", logs.String())
	}
}

// With the heartbeat, a record settled early in an invocation that
// outlives the queue's visibility timeout (3 s here) stays invisible until
// the invocation ends: one done, until Lambda deletes it, else another
// poller would run it again; one failed, until its backoff is set, else it
// would come back before it. Then the failed record comes back after its
// backoff (1 s). On the fake and on the local SQS.
func TestSettledRecordsStayInvisibleUntilTheInvocationEnds(t *testing.T) {
	t.Parallel()
	t.Run("fake", func(t *testing.T) {
		t.Parallel()
		f := newFake("3")
		url := sqstest.QueueURL("orders")
		settledRecordsStayInvisible(t, f, url, received(t, f, "orders", "fail", "done", "slow"),
			func() int { v, _, _ := f.Depth(url); return v })
	})
	t.Run("emulator", func(t *testing.T) {
		t.Parallel()
		sq := localtest.NewSQS(t)
		q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: 3 * time.Second})
		localtest.Send(t, sq, q.URL, "", "fail", "done", "slow")
		var msgs []types.Message
		localtest.Eventually(t, 30*time.Second, func() bool {
			out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
			if err != nil {
				t.Fatal(err)
			}
			msgs = append(msgs, out.Messages...)
			return len(msgs) == 3
		}, "the three records did not come")
		ev := sqstest.SQSEvent(q.ARN, msgs)
		slices.SortFunc(ev.Records, func(a, b events.SQSMessage) int { return order[a.Body] - order[b.Body] })
		// What a receive finds, rather than the queue's approximate
		// counts: what another poller would be handed.
		settledRecordsStayInvisible(t, sq, q.URL, ev, func() int {
			out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, VisibilityTimeout: 1})
			if err != nil {
				t.Error(err)
				return -1
			}
			return len(out.Messages)
		})
	})
}

// deletingAPI is the adapter's SQS client that the test also deletes
// with, as Lambda would.
type deletingAPI interface {
	lambda.API
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// order is the order of the records of settledRecordsStayInvisible.
var order = map[string]int{"fail": 0, "done": 1, "slow": 2}

// settledRecordsStayInvisible runs ev's records "fail", "done" and "slow",
// in that order, one at a time, from the queue at url (visibility timeout
// 3 s) through api, and checks what TestSettledRecordsStayInvisibleUntilTheInvocationEnds says.
func settledRecordsStayInvisible(t *testing.T, api deletingAPI, url string, ev events.SQSEvent, visible func() int) {
	seen := -1
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		switch m.Body {
		case "fail":
			return sqsworker.RetryAfter(time.Second, errors.New("rate limited"))
		case "slow":
			select {
			case <-time.After(5 * time.Second):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			seen = visible()
		}
		return nil
	})
	fn := newHandler(t, h, lambda.Config{Client: api, Concurrency: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := fn(ctx, ev)
	if err != nil || len(resp.BatchItemFailures) != 1 || resp.BatchItemFailures[0].ItemIdentifier != ev.Records[0].MessageId {
		t.Fatalf("invocation: %v, failed %v; want the first record failed alone", err, failedIDs(resp))
	}
	if seen != 0 {
		t.Errorf("%d records visible 5 s into a 3 s visibility timeout, want none: the settled records kept invisible until the invocation ends", seen)
	}
	// What Lambda does: delete the records not reported failed.
	for _, r := range ev.Records[1:] {
		if _, err := api.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: &r.ReceiptHandle}); err != nil {
			t.Fatalf("deleting %s: %v", r.Body, err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for v := visible(); v != 1; v = visible() {
		if time.Now().After(deadline) {
			t.Fatalf("%d records visible 10 s after the invocation, want the failed one back after its 1 s backoff", v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A heartbeat setting wrong whatever the queue fails at once, when the
// handler is made (the cold start), not at each invocation.
func TestHeartbeatSettingWrongForEveryQueueFailsAtOnce(t *testing.T) {
	t.Parallel()
	_, err := lambda.NewHandler(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		lambda.Config{Client: newFake("30"), Heartbeat: visibility.Config{Threshold: -time.Second, Extension: 1500 * time.Millisecond}})
	if err == nil || !strings.Contains(err.Error(), "Threshold -1s is negative") || !strings.Contains(err.Error(), "Extension 1.5s") {
		t.Errorf("NewHandler: %v, want the negative Threshold and the Extension not in whole seconds named", err)
	}
	if _, err := lambda.NewHandler(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }),
		lambda.Config{Client: newFake("30"), DisableHeartbeat: true, Heartbeat: visibility.Config{Threshold: -time.Second}}); err != nil {
		t.Errorf("with DisableHeartbeat: %v, want the heartbeat's settings unread", err)
	}
}

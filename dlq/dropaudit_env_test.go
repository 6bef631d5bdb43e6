package dlq

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// On the emulator: two copies of one job in the dead-letter queue, and an
// audit log that fails once the first message is recorded. The kept copy
// moves; the other is not deleted, as it could not be recorded first.
func TestDropDuplicateRecordedBeforeDeleteOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	attrs, _ := sqsworker.Failure{ErrorClass: "c", Error: "boom", Attempts: 1, SourceQueue: q.URL,
		MessageID: "orig-1", FailedAt: time.Now()}.AddTo(nil)
	for range 2 {
		if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL),
			MessageBody: aws.String("job 1"), MessageAttributes: sdkAttributes(attrs)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	dq, err := Open(ctx, c, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	full := errors.New("disk full")
	first := ""
	var actions []string
	res, err := dq.Replay(ctx, ReplayConfig{Visibility: 5 * time.Second, Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		if first == "" {
			first = r.DLQMessageID
		}
		if r.DLQMessageID != first {
			return full
		}
		actions = append(actions, r.Action)
		return nil
	}}})
	if !errors.Is(err, full) || res.Moved != 1 || res.Duplicates != 0 {
		t.Errorf("replay: %v, moved %d, %d duplicates dropped; want the audit log's error, 1 and 0", err, res.Moved, res.Duplicates)
	}
	if v, f, _ := localtest.Depth(t, c, q.DLQURL); v+f != 1 {
		t.Errorf("the dead-letter queue holds %d messages, want the copy that could not be recorded", v+f)
	}
	if v, f, _ := localtest.Depth(t, c, q.URL); v+f != 1 {
		t.Errorf("the source queue holds %d messages, want the job once", v+f)
	}
	t.Logf("records of the kept copy: %v", actions)
}

// On the emulator: two copies of a job that its source queue no longer
// takes (its MaximumMessageSize lowered since): SQS refuses the first
// copy's send, so the second is not dropped; both stay, and the job is
// not lost.
func TestDuplicatesOfRefusedCopyStayOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	attrs, _ := sqsworker.Failure{ErrorClass: "c", Error: "boom", Attempts: 1, SourceQueue: q.URL,
		MessageID: "orig-1", FailedAt: time.Now()}.AddTo(nil)
	for range 2 {
		if _, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(q.DLQURL),
			MessageBody: aws.String(strings.Repeat("x", 2000)), MessageAttributes: sdkAttributes(attrs)}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if _, err := c.SetQueueAttributes(ctx, &sqs.SetQueueAttributesInput{QueueUrl: aws.String(q.URL),
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	dq, err := Open(ctx, c, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	var drops int
	res, err := dq.Replay(ctx, ReplayConfig{Visibility: 5 * time.Second, Audit: Audit{Record: func(_ context.Context, r AuditRecord) error {
		if r.Action == ActionDropDuplicate {
			drops++
		}
		return nil
	}}})
	if err != nil || res.Moved != 0 || res.Unsent != 2 || res.Duplicates != 0 || drops != 0 {
		t.Errorf("replay: %v, moved %d, %d unsent, %d duplicates (%d audited); want 0, 2, 0", err, res.Moved, res.Unsent, res.Duplicates, drops)
	}
	if v, f, _ := localtest.Depth(t, c, q.DLQURL); v+f != 2 {
		t.Errorf("the dead-letter queue holds %d messages, want both copies", v+f)
	}
}

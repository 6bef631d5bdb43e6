package dlq

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A fair queue's dead letters (a standard queue's messages with a group:
// their tenant) are replayed with their group, so that SQS goes on
// scheduling them among their tenant's messages; a dead letter without a
// group is replayed without one.
func TestReplayKeepsAFairQueuesGroup(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	ctx := context.Background()
	fl := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}
	for body, group := range map[string]string{"tenant job": "tenant-a", "plain job": ""} {
		attrs, _ := fl.AddTo(nil)
		e.f.Send(e.ordersDLQ, body, func(in *sqs.SendMessageInput) {
			in.MessageAttributes = sdkAttributes(attrs)
			if group != "" {
				in.MessageGroupId = aws.String(group)
			}
		})
	}
	if res, err := openOrdersDLQ(t, e.f).Replay(ctx, ReplayConfig{}); err != nil || res.Moved != 2 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	out, err := e.f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.orders), MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 2 {
		t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
	}
	want := map[string]string{"tenant job": "tenant-a", "plain job": ""}
	for i := range out.Messages {
		m := sqsmsg.FromSDK(e.orders, &out.Messages[i])
		if m.GroupID != want[m.Body] {
			t.Errorf("replayed %q has group %q, want %q", m.Body, m.GroupID, want[m.Body])
		}
	}
}

// On the emulator, a fair queue's dead letter is replayed to its standard
// source queue with its group, which the emulator accepts as SQS does. The
// emulator returns no MessageGroupId for a standard queue's messages:
// TestReplayKeepsAFairQueuesGroup checks on the fake that the group is kept.
func TestReplayFairQueueOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	jobs := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	ctx := context.Background()
	attrs, _ := sqsworker.Failure{ErrorClass: "c", Error: "boom", Attempts: 3, SourceQueue: jobs.URL, MessageID: "orig-1", FailedAt: time.Now()}.AddTo(nil)
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(jobs.DLQURL), MessageBody: aws.String("tenant job"),
		MessageGroupId: aws.String("tenant-a"), MessageAttributes: sdkAttributes(attrs)}); err != nil {
		t.Fatalf("sending a fair queue's dead letter: %v", err)
	}
	q, err := Open(ctx, c, jobs.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := q.Replay(ctx, ReplayConfig{})
	if err != nil || res.Moved != 1 {
		t.Fatalf("replay: %v, %+v", err, res)
	}
	got := localtest.ReceiveAll(t, c, jobs.URL, time.Second, 30*time.Second)
	if len(got) != 1 || aws.ToString(got[0].Body) != "tenant job" {
		t.Fatalf("source queue holds %d messages after the replay, want the one replayed", len(got))
	}
	if v, f := depth(t, c, jobs.DLQURL); v+f != 0 {
		t.Errorf("dead-letter queue holds %d visible, %d in flight after the replay, want none", v, f)
	}
}

// A dead letter whose job waited in a copy that packed its own attributes
// (sqsworker.AttrPackedAttributes) is matched by them, shown with them, and
// replayed as it is stored: the runtimes unpack it again. Before, a filter
// on one of the job's own attributes passed it over.
func TestPackedDeadLetterMatchesItsOwnAttributes(t *testing.T) {
	t.Parallel()
	e := newFakeEnv()
	ctx := context.Background()
	own := map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "acme"}, "region": {DataType: "String", StringValue: "eu"}}
	packed, ok := sqsmsg.Pack(own, func(string) bool { return false })
	if !ok {
		t.Fatal("nothing packed")
	}
	attrs, _ := sqsworker.Failure{ErrorClass: "c", SourceQueue: e.orders}.AddTo(packed)
	e.f.Send(e.ordersDLQ, "job", func(in *sqs.SendMessageInput) { in.MessageAttributes = sdkAttributes(attrs) })
	q := openOrdersDLQ(t, e.f)
	filter := Filter{Attributes: []Attribute{{Name: "tenant", Value: "acme"}}}
	res, err := q.Scan(ctx, ScanConfig{Filter: filter})
	if err != nil || len(res.Messages) != 1 {
		t.Fatalf("scan for tenant=acme: %v, %d messages; want the packed dead letter", err, len(res.Messages))
	}
	if v, _ := res.Messages[0].Attribute("region"); v != "eu" {
		t.Errorf("listed with region %q, want its own attribute, eu", v)
	}
	if rr, err := q.Replay(ctx, ReplayConfig{Filter: filter}); err != nil || rr.Moved != 1 {
		t.Fatalf("replay of tenant=acme: %v, %+v", err, rr)
	}
	out, err := e.f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.orders), MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receive: %v", err)
	}
	if _, stored := out.Messages[0].MessageAttributes[sqsworker.AttrPackedAttributes]; !stored {
		t.Errorf("replayed with attributes %v, want them as stored, packed", out.Messages[0].MessageAttributes)
	}
	if v, _ := sqsmsg.Unpacked(sqsmsg.FromSDK(e.orders, &out.Messages[0])).Attribute("tenant"); v != "acme" {
		t.Errorf("the replayed job's tenant, unpacked: %q", v)
	}
}

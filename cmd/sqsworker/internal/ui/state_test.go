package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
)

// TestQueuesKeptOncePerQueue checks that the server keeps one entry, and
// one lock, per dead-letter queue however a request names it (its name,
// its URL, its ARN, or any of the addresses SQS accepts for it): the
// queues it keeps do not grow with each distinct text asked. The oldest
// failure a complete listing saw is shown on the queues page, and a
// complete listing of the emptied queue clears it.
func TestQueuesKeptOncePerQueue(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	src := f.CreateQueue("jobs", nil)
	dlqURL := f.CreateQueue("jobs-dlq", nil)
	arn := queueARN(t, f, dlqURL)
	f.SetAttribute(src, "RedrivePolicy", `{"deadLetterTargetArn":"`+arn+`","maxReceiveCount":3}`)
	failedAt := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	fail := sqsworker.Failure{Error: "no", ErrorClass: "validation", Attempts: 3, FailedAt: failedAt, SourceQueue: src, MessageID: "orig-1"}
	attrs, _ := fail.AddTo(nil)
	f.Send(dlqURL, `{}`, withAttributes(attrs))
	stats := func(context.Context) ([]QueueStats, error) {
		return []QueueStats{{Queue: "jobs", URL: src, DLQ: &DLQStats{Queue: "jobs-dlq", URL: dlqURL, MaxReceiveCount: 3}}}, nil
	}
	s, base := newTestServer(t, Config{SQS: f, Stats: stats, AllowActions: true})

	asked := []string{"jobs-dlq", dlqURL, arn}
	for i := range 3 { // the Fake, as SQS, finds a queue by its URL's path
		asked = append(asked, fmt.Sprintf("https://sqs-%d.example/000000000000/jobs-dlq", i))
	}
	for _, q := range asked {
		code, body := get(t, base+"/api/dlq/messages?"+url.Values{"queue": {q}}.Encode(), nil)
		if code != http.StatusOK {
			t.Fatalf("listing %s: %d %s", q, code, body)
		}
	}
	s.mu.Lock()
	n := len(s.queues)
	s.mu.Unlock()
	if n != 1 {
		t.Errorf("%d queues kept after %d listings of one queue named %d ways, want 1", n, len(asked), len(asked))
	}

	oldest := func() time.Time {
		t.Helper()
		code, body := get(t, base+"/api/queues", nil)
		var snap struct {
			Queues []queueView `json:"queues"`
		}
		if err := json.Unmarshal([]byte(body), &snap); code != http.StatusOK || err != nil || len(snap.Queues) != 1 {
			t.Fatalf("queues: %d %v %s", code, err, body)
		}
		return snap.Queues[0].OldestFailure
	}
	if got := oldest(); !got.Equal(failedAt) {
		t.Errorf("oldest failure %v after complete listings, want %v", got, failedAt)
	}
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &dlqURL, MaxNumberOfMessages: 10})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receiving the dead-lettered message: %v, %d messages", err, len(out.Messages))
	}
	if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &dlqURL, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, base+"/api/dlq/messages?queue=jobs-dlq", nil); code != http.StatusOK {
		t.Fatalf("listing the emptied queue: %d %s", code, body)
	}
	if got := oldest(); !got.IsZero() {
		t.Errorf("oldest failure %v after a complete listing of the emptied queue, want none", got)
	}
}

// TestPlansBounded checks that the dry runs kept for their confirmation are
// bounded in number, not only in age: past maxPlans the oldest go first, and
// the newest stay confirmable.
func TestPlansBounded(t *testing.T) {
	s := newUnserved(t, Config{})
	start := time.Now()
	var ids []string
	for i := range maxPlans + 10 {
		ids = append(ids, s.keepPlan(&plan{queue: "jobs-dlq", ids: []string{"m"}, created: start.Add(time.Duration(i) * time.Millisecond)}))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.plans); n != maxPlans {
		t.Errorf("%d plans kept after %d dry runs, want %d", n, len(ids), maxPlans)
	}
	for i, id := range ids {
		if _, kept := s.plans[id]; kept != (i >= len(ids)-maxPlans) {
			t.Errorf("dry run %d of %d kept: %v", i, len(ids), kept)
		}
	}
}

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

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
)

// sharedEnv is fakeEnv with a second source queue, payments, whose dead
// letters go to orders-dlq too: a dead-letter queue shared by two sources.
func sharedEnv() (*fakeEnv, string) {
	e := newFakeEnv()
	payments := e.f.CreateQueue("payments", map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":1}`, sqstest.QueueARN("orders-dlq")),
	})
	return e, payments
}

// A replay with To one of the sources of a shared dead-letter queue moves
// only the messages that failed in that source: a job that failed in the
// other source stays, saying where it belongs, instead of running in a
// queue whose handler is not its own. Messages whose source is not one of
// the dead-letter queue's (unverified metadata, none at all) go to To, as
// before, and so does everything with To a queue that is not a source.
func TestReplayToOneSourceOfASharedDLQ(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		api  func(e *fakeEnv, payments string) API
	}{
		{"sources unknown: redrive policies", func(e *fakeEnv, _ string) API { return e.f }},
		{"sources listed", func(e *fakeEnv, p string) API { return &listing{Fake: e.f, urls: append(e.urls(), p)} }},
		{"sources found", func(e *fakeEnv, p string) API {
			return &listing{Fake: e.f, urls: append(e.urls(), p), unsupported: true}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e, payments := sharedEnv()
			fail := func(src, id string) sqsworker.Failure {
				return sqsworker.Failure{ErrorClass: "c", SourceQueue: src, MessageID: id, FailedAt: time.Now()}
			}
			deadLetter(e.f, e.ordersDLQ, fail(e.orders, "o-1"), "order")
			paymentID := deadLetter(e.f, e.ordersDLQ, fail(payments, "p-1"), "payment")
			redrive(t, e.f, payments, "payment moved by SQS", nil)
			deadLetter(e.f, e.ordersDLQ, fail(e.billing, "b-1"), "unverified: billing")
			e.f.Send(e.ordersDLQ, "no metadata")
			q := openOrdersDLQ(t, tc.api(e, payments))

			plan, err := q.Plan(ctx, ReplayConfig{To: "orders"})
			if err != nil || plan.Matched != 3 || plan.OtherSource != 2 || len(plan.Stayed) != 2 {
				t.Fatalf("plan: %v, %+v", err, plan)
			}
			for _, s := range plan.Stayed {
				if !strings.Contains(s.Reason, "it failed in payments, which sends its dead letters to orders-dlq too, not in orders (the destination)") ||
					!strings.Contains(s.Reason, "replay it without a destination, which sends it back to payments") {
					t.Errorf("stays: %+v", s)
				}
			}
			res, err := q.Replay(ctx, ReplayConfig{To: "orders"})
			if err != nil || res.Moved != 3 || res.OtherSource != 2 || res.Stayed[0].MessageID == "" {
				t.Fatalf("replay: %v, %+v", err, res)
			}
			got := receiveJobs(t, e.f, e.orders)
			for _, body := range []string{"order", "unverified: billing", "no metadata"} {
				if got[body] == nil {
					t.Errorf("%q not replayed to orders: %v", body, got)
				}
			}
			if len(got) != 3 {
				t.Errorf("orders holds %d messages, want 3", len(got))
			}
			e.wantDLQDepth(t, "after the replay to orders", 2, 0)
			// Without To, each goes back to its own source.
			res, err = q.Replay(ctx, ReplayConfig{})
			if err != nil || res.Moved != 2 {
				t.Fatalf("replay to the sources: %v, %+v", err, res)
			}
			if got := receiveJobs(t, e.f, payments); len(got) != 2 || got["payment"] == nil || got["payment"].MessageAttributes[sqsworker.AttrFailureMessageID].StringValue != "p-1" {
				t.Errorf("payments holds %v (the copy of %s)", got, paymentID)
			}
			// A destination that is not one of the sources takes everything.
			deadLetter(e.f, e.ordersDLQ, fail(payments, "p-2"), "payment 2")
			if res, err := q.Replay(ctx, ReplayConfig{To: "lonely"}); err != nil || res.Moved != 1 || res.OtherSource != 0 {
				t.Errorf("replay to lonely: %v, %+v", err, res)
			}
		})
	}
}

// A message move task moves every message of the dead-letter queue: to one
// of the sources of a shared dead-letter queue, it would move the other
// sources' dead letters there too. The redrive refuses before starting
// anything, naming the fix; to a queue that is not a source, or without a
// destination, it starts.
func TestRedriveToOneSourceOfASharedDLQ(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, payments := sharedEnv()
	redrive(t, e.f, e.orders, "order", nil)
	redrive(t, e.f, payments, "payment", nil)
	q := openOrdersDLQ(t, &listing{Fake: e.f, urls: append(e.urls(), payments)})
	var recs []AuditRecord
	audit := Audit{Record: func(_ context.Context, r AuditRecord) error { recs = append(recs, r); return nil }}
	for _, start := range []bool{false, true} {
		var err error
		if start {
			_, err = q.StartRedrive(ctx, RedriveConfig{To: "orders", Audit: audit})
		} else {
			_, err = q.PlanRedrive(ctx, RedriveConfig{To: "orders"})
		}
		if !errors.Is(err, ErrSharedDestination) || !strings.Contains(err.Error(), "orders is one of the 2 source queues of orders-dlq (orders, payments)") ||
			!strings.Contains(err.Error(), "would move the dead letters of payments there too") {
			t.Errorf("start %v: %v", start, err)
		}
	}
	if n := e.f.Calls(sqstest.OpStartMessageMoveTask); n != 0 || len(recs) != 0 {
		t.Fatalf("%d move task(s) started, %d audit record(s)", n, len(recs))
	}
	e.wantDLQDepth(t, "after the refusal", 2, 0)
	if _, err := q.StartRedrive(ctx, RedriveConfig{Audit: audit}); err != nil {
		t.Fatal(err)
	}
	for src, body := range map[string]string{e.orders: "order", payments: "payment"} {
		out, err := e.f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(src)})
		if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].Body) != body {
			t.Errorf("%s: %v, %+v", src, err, out)
		}
	}
}

// The warning before a purge of a dead-letter queue shared by two sources
// names both, in order of name, with the queue's counts; a queue of one
// source is named alone, and "every message" stands for counts that could
// not be read.
func TestPurgeWarningNamesEverySource(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, payments := sharedEnv()
	e.deadLetterJobs(3)
	if _, err := e.f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.ordersDLQ), MaxNumberOfMessages: 1, VisibilityTimeout: 60}); err != nil {
		t.Fatal(err)
	}
	shared := openOrdersDLQ(t, &listing{Fake: e.f, urls: append([]string{payments}, e.urls()...)})
	want := "Purging deletes about 2 visible and 1 in-flight message(s) of orders-dlq, the dead letters of all 2 of its source queues (orders, payments), for good."
	if got := shared.PurgeWarning(ctx); got != want {
		t.Errorf("shared:\n got %q\nwant %q", got, want)
	}
	one := newFakeEnv()
	alone := openOrdersDLQ(t, &listing{Fake: one.f, urls: one.urls()})
	one.f.FailNext("GetQueueAttributes", errors.New("connection reset"), 1)
	if got, want := alone.PurgeWarning(ctx), "Purging deletes every message of orders-dlq for good."; got != want {
		t.Errorf("one source, counts not read:\n got %q\nwant %q", got, want)
	}
}

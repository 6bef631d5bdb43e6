package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// SQS stopped for 5 s mid-run and restarted: the worker recovers and every
// message is processed.
func TestRecoversFromSQSOutage(t *testing.T) {
	t.Parallel()
	fq := localtest.StartFauxqs(t)
	c := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(fq.Endpoint()) })
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 5 * time.Second})
	const total = 200
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 10}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			time.Sleep(20 * time.Millisecond)
			rec.add(m.Body)
			return nil
		}))
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	localtest.Eventually(t, 30*time.Second, func() bool { return rec.total() >= total/4 }, "no progress before the outage")
	fq.Stop()
	time.Sleep(5 * time.Second)
	fq.Start()
	localtest.Eventually(t, 120*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return v+f+d == 0
	}, "queue not drained after the outage")
	for _, b := range bodies {
		if rec.count(b) == 0 {
			t.Errorf("message %s never processed", b)
		}
	}
	dups := rec.total() - total
	t.Logf("processed %d messages, %d duplicates; stats %+v", total, dups, r.w.Stats())
	_ = context.Background
}

// SQS unreachable for 15 s mid-run: the deletes of the messages handled
// meanwhile are retried until they land, and the heartbeat keeps those
// messages invisible until then, so none is delivered and handled twice.
func TestAcksOutliveSQSOutage(t *testing.T) {
	t.Parallel()
	direct := localtest.NewSQS(t)
	proxy := localtest.StartProxy(t, strings.TrimPrefix(localtest.Endpoint(), "http://"))
	c := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) })
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{VisibilityTimeout: 30 * time.Second})
	const total = 300
	var rec recorder
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 16, WaitTime: time.Second}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			time.Sleep(50 * time.Millisecond)
			rec.add(m.Body)
			return nil
		}))
	bodies := make([]string, total)
	for i := range bodies {
		bodies[i] = fmt.Sprint(i)
	}
	localtest.Send(t, direct, q.URL, "", bodies...)
	localtest.Eventually(t, 60*time.Second, func() bool { return rec.total() >= total/3 }, "no progress before the outage")
	proxy.Cut()
	time.Sleep(15 * time.Second)
	proxy.Restore()
	emptyEventually(t, direct, q.URL, 2*time.Minute)
	for _, b := range bodies {
		if n := rec.count(b); n != 1 {
			t.Errorf("message %s handled %d times, want once", b, n)
		}
	}
	if s := r.w.Stats(); s.AckFailures != 0 {
		t.Errorf("stats %+v, want no acknowledgement given up", s)
	}
}

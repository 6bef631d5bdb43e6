package dlq

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// outage is how long SQS is down in TestReplayThroughAnOutageOnEmulator.
const outage = 60 * time.Second

// outageClient returns a client of the local SQS through a fault proxy
// that starts fault when the nth call that hit picks is about to be sent,
// and passes again outage later; ended is closed then.
func outageClient(t *testing.T, nth int32, hit func(in any) bool, fault func(*faultproxy.Proxy) error) (c *sqs.Client, p *faultproxy.Proxy, ended <-chan struct{}) {
	t.Helper()
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	done := make(chan struct{})
	var seen atomic.Int32
	c = localtest.NewSQS(t, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("outage",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if hit(in.Parameters) && seen.Add(1) == nth {
						if err := fault(p); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
						time.AfterFunc(outage, func() {
							if err := p.Pass(); err != nil {
								t.Errorf("ending the outage: %v", err)
							}
							close(done)
						})
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	})
	return c, p, done
}

// SQS goes down for 60 s as a replay sends its third copy: refused (every
// connection refused or reset) or swallowed (requests read and never
// answered). The replay stops with an error that names the copy and says
// the job stays, within its own bounds rather than the outage's; it moves
// nothing twice and loses nothing. Once SQS is back and the messages it held
// are visible again, a replay moves the rest: each job is in the
// source queue once, and the dead-letter queue is empty.
func TestReplayThroughAnOutageOnEmulator(t *testing.T) {
	if testing.Short() {
		t.Skip("an outage of 60 s")
	}
	t.Parallel()
	const jobs = 12
	for _, mode := range []struct {
		name  string
		fault func(*faultproxy.Proxy) error
		// says is what the replay's error says of the copy: a connection
		// refused sent nothing; a request swallowed may have been applied.
		says []string
	}{
		{"refused", (*faultproxy.Proxy).Refuse, []string{"connection refused", "replay it again once SQS answers"}},
		{"swallowed", (*faultproxy.Proxy).Blackhole, []string{"(SQS did not answer within 30s)", "its copy may be in QUEUE all the same", "the same job key"}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			c := localtest.NewSQS(t)
			orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
			sendDeadLetters(t, c, orders.DLQURL, orders.URL, jobs)
			isSend := func(in any) bool { _, ok := in.(*sqs.SendMessageInput); return ok }
			pc, p, ended := outageClient(t, 3, isSend, mode.fault)
			ctx := context.Background()
			q, err := Open(ctx, pc, orders.DLQURL, Config{})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			res, err := q.Replay(ctx, ReplayConfig{Visibility: 10 * time.Second})
			t.Logf("the first replay ended after %v, the proxy in mode %v: moved %d; %v", time.Since(start).Round(time.Second), p.Mode(), res.Moved, err)
			if err == nil || !strings.Contains(err.Error(), "sending the copy of message") || !strings.Contains(err.Error(), "it stays in "+q.Name) {
				t.Errorf("the first replay: %v; want the copy that failed named, and that it stays", err)
			}
			for _, says := range mode.says {
				if says = strings.ReplaceAll(says, "QUEUE", queueName(orders.URL)); err != nil && !strings.Contains(err.Error(), says) {
					t.Errorf("the first replay's error does not say %q: %v", says, err)
				}
			}
			if res.Moved != 2 || res.NotDeleted != 0 {
				t.Errorf("the first replay moved %d, not deleted %d; want the 2 copied before the outage", res.Moved, res.NotDeleted)
			}
			<-ended
			// What the first replay held comes back once its visibility
			// timeout is over, whether or not its release got through; a
			// replay moves what it finds visible (the local SQS counts a
			// message in flight until a receive finds its timeout over).
			q2, err := Open(ctx, c, orders.DLQURL, Config{})
			if err != nil {
				t.Fatal(err)
			}
			moved := res.Moved
			localtest.Eventually(t, 2*time.Minute, func() bool {
				res2, err := q2.Replay(ctx, ReplayConfig{})
				if err != nil || res2.NotDeleted != 0 {
					t.Fatalf("a replay after the outage: moved %d, not deleted %d: %v", res2.Moved, res2.NotDeleted, err)
				}
				moved += res2.Moved
				return moved >= jobs
			}, "the jobs moved after the outage")
			if moved != jobs {
				t.Errorf("the replays moved %d in all, want %d", moved, jobs)
			}
			if v, f := depth(t, c, orders.DLQURL); v+f != 0 {
				t.Errorf("the dead-letter queue holds %d visible, %d in flight; want none", v, f)
			}
			count := map[string]int{}
			for _, m := range localtest.ReceiveAll(t, c, orders.URL, time.Second, time.Minute) {
				count[aws.ToString(m.Body)]++
			}
			for i := range jobs {
				if n := count[fmt.Sprint("job ", i)]; n != 1 {
					t.Errorf("job %d is in the source queue %d times, want once", i, n)
				}
			}
			if len(count) != jobs {
				t.Errorf("the source queue holds %d distinct bodies, want %d: %v", len(count), jobs, count)
			}
		})
	}
}

// A copy that SQS took only without the job's key (the destination's
// MaximumMessageSize left no room for it), and whose send then got no
// answer, may be in the destination keyless: the replay's error says so,
// and warns that replaying the message again runs its job twice, rather
// than promising the same key. On the local SQS, the keyless send
// swallowed by a fault proxy.
func TestReplayKeylessCopyNotAnsweredOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	orders := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 2})
	if _, err := c.SetQueueAttributes(context.Background(), &sqs.SetQueueAttributesInput{QueueUrl: aws.String(orders.URL),
		Attributes: map[string]string{"MaximumMessageSize": "1024"}}); err != nil {
		t.Fatal(err)
	}
	// No failure metadata and no key (a message SQS's own redrive moved):
	// its copy needs the key the replay adds, which does not fit.
	localtest.Send(t, c, orders.DLQURL, "", strings.Repeat("x", 1000))
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	pc := localtest.NewSQS(t, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("swallowKeyless",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if send, ok := in.Parameters.(*sqs.SendMessageInput); ok {
						if _, keyed := send.MessageAttributes["idempotency-key"]; !keyed {
							if err := p.Blackhole(); err != nil {
								return middleware.InitializeOutput{}, middleware.Metadata{}, err
							}
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	})
	q, err := Open(context.Background(), pc, orders.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	q.moveTimeout = 3 * time.Second
	_, err = q.Replay(context.Background(), ReplayConfig{To: orders.URL})
	if err == nil || !strings.Contains(err.Error(), "without the job's key") || !strings.Contains(err.Error(), "or its job runs twice") ||
		strings.Contains(err.Error(), "the same job key") {
		t.Errorf("the replay: %v; want the keyless copy's risk said", err)
	}
}

package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// Two copies of one job running at once in one process (a producer's send
// retried after its reply was lost, or SQS delivering a message twice) have
// one effect, and the second is not postponed for the first's claim, which
// would hold it for the claim's lease (the visibility timeout and 30 s) and
// spend a receive: it waits for the first to finish, and is acknowledged.
// The worker on the local SQS, the claims on DynamoDB Local; each handler
// run takes 3 s, so that the two overlap.
func TestWorkerDuplicateWaitsForItsHolder(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2})
	guard, err := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	idempotency.SetLocalWait(guard, time.Minute) // not the claim's time on a loaded machine
	var eff effects
	var deliveries, again atomic.Int64
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		deliveries.Add(1)
		if m.ReceiveCount > 1 {
			again.Add(1)
		}
		return guard.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			time.Sleep(3 * time.Second)
			k, _ := m.Attribute(idempotency.KeyAttribute)
			eff.add(k)
			return nil
		})).HandleMessage(ctx, m)
	})
	runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2}, h)
	sendKeyed(t, sq, q.URL, []string{"order-7", "order-7"})
	localtest.Eventually(t, 120*time.Second, func() bool { return deliveries.Load() >= 2 && drained(t, sq, q.URL) },
		"the queue was not drained")
	if n := eff.snapshot()["order-7"]; n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
	s := guard.Stats()
	t.Logf("idempotency %+v", s)
	if s.InProgress != 0 || s.Waited != 1 || again.Load() != 0 || deliveries.Load() != 2 {
		t.Errorf("%d deliveries, %d of them a second receive; %d waited, %d postponed: want 2 deliveries, each received once, one waited, none postponed",
			deliveries.Load(), again.Load(), s.Waited, s.InProgress)
	}
	if !drained(t, sq, q.DLQURL) {
		t.Error("a message was dead-lettered")
	}
}

// The same through the Lambda adapter, both copies in one batch of the
// local SQS: the invocation reports no failure (the copy that would have
// been postponed is not handed back to the event source mapping).
func TestLambdaDuplicateInTheBatchWaitsForItsHolder(t *testing.T) {
	var eff effects
	sq, q, guard, fn := lambdaWithGuard(t, func(ctx context.Context, m *sqsworker.Message) error {
		time.Sleep(time.Second)
		k, _ := m.Attribute(idempotency.KeyAttribute)
		eff.add(k)
		return nil
	})
	sendKeyed(t, sq, q.URL, []string{"payment-77", "payment-77"})
	batch := receiveBoth(t, sq, q.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // the function's timeout
	defer cancel()
	resp, err := fn(ctx, sqstest.SQSEvent(queueARN(t, sq, q.URL), batch))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Errorf("invocation: %+v, %v: want no failure", resp, err)
	}
	if n := eff.snapshot()["payment-77"]; n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
	if s := guard.Stats(); s.Claimed != 1 || s.Duplicates != 1 || s.Waited != 1 || s.InProgress != 0 {
		t.Errorf("stats %+v: want one claim, one duplicate that waited, none postponed", s)
	}
}

// In a Lambda function whose job outlasts the invocation (8 s), a
// duplicate in the batch waits for its holder no more than half of the
// time left, then meets the holder's claim on DynamoDB Local and is
// postponed for its lease, as a duplicate of a job still running: the store
// answered in time, no store error is counted (nothing for the circuit
// breaker). Waiting to the handlers' deadline, it would have been released
// to come back at once, and spent a receive.
func TestLambdaShortTimeoutDuplicateIsPostponed(t *testing.T) {
	sq, q, guard, fn := lambdaWithGuard(t, func(ctx context.Context, m *sqsworker.Message) error {
		select {
		case <-time.After(time.Minute):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	sendKeyed(t, sq, q.URL, []string{"payment-78", "payment-78"})
	batch := receiveBoth(t, sq, q.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	resp, err := fn(ctx, sqstest.SQSEvent(queueARN(t, sq, q.URL), batch))
	if err != nil || len(resp.BatchItemFailures) != 2 {
		t.Errorf("invocation: %+v, %v: want both handed back, the job cut by the deadline, its duplicate postponed", resp, err)
	}
	if s := guard.Stats(); s.Claimed != 1 || s.InProgress != 1 || s.StoreErrors != 0 || s.Waited != 0 {
		t.Errorf("stats %+v: want one claim, one duplicate postponed, no store error", s)
	}
}

// receiveBoth receives the two messages sent to url, for one batch.
func receiveBoth(t *testing.T, sq *sqs.Client, url string) []types.Message {
	t.Helper()
	var batch []types.Message
	localtest.Eventually(t, 30*time.Second, func() bool {
		out, err := sq.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10,
			WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, out.Messages...)
		return len(batch) >= 2
	}, "the two copies did not come")
	return batch
}

// queueARN returns the ARN of the queue at url.
func queueARN(t *testing.T, sq *sqs.Client, url string) string {
	t.Helper()
	attrs, err := sq.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatal(err)
	}
	return attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// lambdaWithGuard returns the Lambda adapter's function over job behind a
// Guard (on a table of DynamoDB Local), for a queue of the local SQS, with
// the SQS client, the queue and the Guard. It skips the test without the
// local stack, and runs it in parallel.
func lambdaWithGuard(t *testing.T, job sqsworker.HandlerFunc) (*sqs.Client, localtest.Queue, *idempotency.Guard, lambda.HandlerFunc) {
	t.Helper()
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	t.Parallel()
	sq := localtest.NewSQS(t)
	q := localtest.NewQueue(t, sq, localtest.QueueOptions{})
	guard, err := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{})
	if err != nil {
		t.Fatal(err)
	}
	idempotency.SetLocalWait(guard, time.Minute) // not the claim's time on a loaded machine
	fn, err := lambda.NewHandler(sqsworker.Chain(job, guard.Middleware), lambda.Config{Client: sq,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), QueueURL: func(string) (string, error) { return q.URL, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return sq, q, guard, fn
}

// A duplicate waiting for its holder while DynamoDB goes away, refusing
// connections or leaving requests unanswered, for 20 s: the holder's job
// ran, and its commit (the effect, in one transaction with the completion)
// is retried until DynamoDB is back; the duplicate waits for the holder
// until its wait's bound, then its claim fails as an outage, so it is
// retried, not run, and not dead-lettered, though its queue allows two
// receives; once DynamoDB is back it finds the key completed and is
// acknowledged. One effect, both copies deleted, nothing dead-lettered.
// The worker on the local SQS, the store on DynamoDB Local behind a fault
// proxy. The wait's bound is 8 s rather than 5 s, counted from before the
// holder's claim: on a loaded machine that claim alone can take seconds,
// and the duplicate must still be waiting when the outage begins. The
// outage outlasts the wait and a claim's 5 s attempt.
func TestWorkerDuplicateWaitsThroughAStoreOutage(t *testing.T) {
	localtest.Require(t)
	localtest.RequireDynamoDB(t)
	t.Parallel()
	const wait, outageFor = 8 * time.Second, 20 * time.Second
	for _, mode := range []string{"refused", "black-holed"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			store, db, proxy := storeBehindProxy(t)
			effects := newEffectsTable(t, db)
			sq := localtest.NewSQS(t)
			q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 2})
			guard, err := idempotency.New(store, idempotency.Config{Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			idempotency.SetLocalWait(guard, wait)
			outage := func() error {
				if mode == "refused" {
					return proxy.Refuse()
				}
				return proxy.Blackhole()
			}
			var restore atomic.Pointer[time.Timer]
			passErr := make(chan error, 1)
			t.Cleanup(func() {
				if tm := restore.Load(); tm != nil {
					tm.Stop()
				}
			})
			var runs atomic.Int64
			var ran sync.Map // the IDs of the messages that ran the job
			inner := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				ran.Store(m.ID, true)
				if runs.Add(1) == 1 {
					// Claimed; DynamoDB goes away while the job runs and
					// its duplicate waits.
					if err := outage(); err != nil {
						return err
					}
					restore.Store(time.AfterFunc(outageFor, func() { passErr <- proxy.Pass() }))
					time.Sleep(2 * time.Second)
				}
				key, _ := idempotency.KeyFromContext(ctx)
				return idempotency.AddWrites(ctx, effectWrite(effects, key))
			})
			// What each delivery did: when it began, and the error of
			// those that ran no job.
			var mu sync.Mutex
			var first time.Time
			var unavailable []time.Duration // after the first delivery began
			var deliveries int
			h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				began := time.Now()
				mu.Lock()
				deliveries++
				if first.IsZero() {
					first = began
				}
				mu.Unlock()
				err := guard.Middleware(inner).HandleMessage(ctx, m)
				if _, job := ran.Load(m.ID); sqsworker.IsUnavailable(err) && !job {
					mu.Lock()
					unavailable = append(unavailable, time.Since(first))
					mu.Unlock()
				}
				return err
			})
			runWorker(t, sq, worker.Config{QueueURL: q.URL, Concurrency: 2}, h)
			sendKeyed(t, sq, q.URL, []string{"outage-1", "outage-1"})
			select {
			case err := <-passErr:
				if err != nil {
					t.Fatalf("ending the outage: %v", err)
				}
			case <-time.After(outageFor + 120*time.Second):
				t.Fatal("the job did not run: no outage")
			}
			localtest.Eventually(t, 180*time.Second, func() bool { return drained(t, sq, q.URL) },
				"the queue was not drained after the outage")
			if n := applied(t, db, effects, "outage-1"); n != 1 || runs.Load() != 1 {
				t.Errorf("effect applied %d times, the job ran %d times: want once each", n, runs.Load())
			}
			mu.Lock()
			t.Logf("%d deliveries; failed as an outage, without running, at %v; idempotency %+v", deliveries, unavailable, guard.Stats())
			if deliveries < 3 || len(unavailable) == 0 || unavailable[0] < wait {
				t.Errorf("%d deliveries, failures as an outage at %v: want the duplicate to wait %v, fail as an outage, and come again",
					deliveries, unavailable, wait)
			}
			mu.Unlock()
			if s := guard.Stats(); s.Duplicates != 1 {
				t.Errorf("stats %+v: want the copy acknowledged as a duplicate", s)
			}
			if !drained(t, sq, q.DLQURL) {
				t.Error("a message was dead-lettered")
			}
		})
	}
}

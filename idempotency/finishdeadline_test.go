package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// In the worker, a handler that succeeds just before its context's deadline
// (Config.HandlerTimeout; with heartbeats off, the lease less the ack's
// margin) has its claim completed even when DynamoDB answers slowly (here
// 600ms a request, as throttled requests retried by the SDK take): the
// worker process goes on after the handler's deadline, and a completion cut
// short would leave the record in progress, its job acknowledged, so that a
// duplicate sent by the producer would wait for the claim's lease, then run
// the effect again.
func TestWorkerCompletionOutlivesHandlerDeadline(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		cfg  worker.Config
		vis  time.Duration
	}{
		{"handler-timeout", worker.Config{HandlerTimeout: time.Second}, 4 * time.Second},
		{"heartbeat-off", worker.Config{DisableHeartbeat: true}, 3 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := startFaultProxy(t)
			db := localtest.NewDynamoDB(t)
			store, _ := proxiedStore(t, p, db)
			guard, err := idempotency.New(store, idempotency.Config{ClaimGrace: 2 * time.Second, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			sq := localtest.NewSQS(t)
			q := localtest.NewQueue(t, sq, localtest.QueueOptions{VisibilityTimeout: c.vis})
			var eff effects
			var runs atomic.Int64
			h := sqsworker.Chain(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
				runs.Add(1)
				d, ok := ctx.Deadline()
				if !ok {
					t.Error("handler's context has no deadline")
				}
				// Done 50ms before the deadline; DynamoDB slows down.
				time.Sleep(time.Until(d) - 50*time.Millisecond)
				p.setRule(func(op string, _ int) fault {
					if op == "UpdateItem" {
						return slow
					}
					return forward
				})
				k, _ := m.Attribute(idempotency.KeyAttribute)
				eff.add(k)
				return nil
			}), guard.Middleware)
			cfg := c.cfg
			cfg.QueueURL, cfg.Concurrency, cfg.Logger = q.URL, 2, quiet()
			runWorker(t, sq, cfg, h)
			sendKeyed(t, sq, q.URL, []string{"late-" + c.name})
			localtest.Eventually(t, 60*time.Second, func() bool { return runs.Load() == 1 && drained(t, sq, q.URL) }, "job not acknowledged")
			p.setRule(nil)
			sendKeyed(t, sq, q.URL, []string{"late-" + c.name}) // the producer's duplicate
			localtest.Eventually(t, 60*time.Second, func() bool { return drained(t, sq, q.URL) }, "duplicate not acknowledged")
			if got := eff.snapshot()["late-"+c.name]; got != 1 {
				t.Errorf("%d effects, want 1 (guard %+v)", got, guard.Stats())
			}
		})
	}
}

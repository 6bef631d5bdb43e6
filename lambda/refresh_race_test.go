package lambda_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/lambda"
)

// Invocations that run at the same time in one execution environment
// re-read their queue's attributes once QueueRefresh has passed: one
// invocation's refresh must not race with another's check of its age (run
// with -race). Before, the age was read outside the adapter's lock, and
// written under it.
func TestConcurrentInvocationsRefreshQueue(t *testing.T) {
	f := newFake("30")
	fn := newHandler(t, jobs, lambda.Config{Client: f, QueueRefresh: 300 * time.Microsecond, DisableHeartbeat: true})
	ev := received(t, f, "orders", "ok")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				if resp, err := fn(context.Background(), ev); err != nil || len(resp.BatchItemFailures) != 0 {
					t.Errorf("invocation: %v, failed %v", err, failedIDs(resp))
					return
				}
			}
		})
	}
	wg.Wait()
}

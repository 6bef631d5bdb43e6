package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// FIFO: messages of one group are handled in order, also when some fail and
// are retried; groups run in parallel.
func TestFIFOOrderPerGroupUnderFailures(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 10})
	const groups, perGroup = 4, 15
	var mu sync.Mutex
	done := map[string][]int{}   // group -> indexes handled successfully, in order
	tries := map[string]int{}    // body -> attempts
	running := map[string]bool{} // groups with a handler running
	maxParallel := 0
	for g := range groups {
		group := fmt.Sprintf("g%d", g)
		bodies := make([]string, perGroup)
		for i := range bodies {
			bodies[i] = fmt.Sprintf("%s-%d", group, i)
		}
		localtest.Send(t, c, q.URL, group, bodies...)
	}
	r := start(t, c, worker.Config{QueueURL: q.URL, Concurrency: 20, Backoff: noDelay}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			mu.Lock()
			if running[m.GroupID] {
				mu.Unlock()
				return fmt.Errorf("two handlers of group %s at once", m.GroupID)
			}
			running[m.GroupID] = true
			maxParallel = max(maxParallel, len(running))
			tries[m.Body]++
			n := tries[m.Body]
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			var i int
			fmt.Sscanf(m.Body[len(m.GroupID)+1:], "%d", &i)
			mu.Lock()
			defer mu.Unlock()
			delete(running, m.GroupID)
			if i%5 == 2 && n == 1 { // every fifth message fails once
				return errTransient
			}
			done[m.GroupID] = append(done[m.GroupID], i)
			return nil
		}))
	localtest.Eventually(t, 60*time.Second, func() bool { return r.w.Stats().Deleted == groups*perGroup }, "not all messages deleted")
	mu.Lock()
	defer mu.Unlock()
	for g := range groups {
		group := fmt.Sprintf("g%d", g)
		got := done[group]
		if len(got) != perGroup {
			t.Errorf("group %s: %d handled, want %d: %v", group, len(got), perGroup, got)
			continue
		}
		for i, v := range got {
			if v != i {
				t.Errorf("group %s handled out of order: %v", group, got)
				break
			}
		}
	}
	if maxParallel < 2 {
		t.Errorf("groups never ran in parallel")
	}
	if s := r.w.Stats(); s.Failed != groups*3 {
		t.Errorf("stats = %+v, want %d failures", s, groups*3)
	}
}

// FIFO dead-lettering keeps the message group.
func TestFIFOPermanentKeepsGroup(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 3})
	start(t, c, worker.Config{QueueURL: q.URL}, sqsworker.HandlerFunc(
		func(ctx context.Context, m *sqsworker.Message) error {
			if m.Body == "bad" {
				return sqsworker.Permanent(fmt.Errorf("bad"))
			}
			return nil
		}))
	localtest.Send(t, c, q.URL, "orders-7", "ok-1", "bad", "ok-2")
	got := dlqMessages(t, c, q, 1)[0]
	if g := got.Attributes["MessageGroupId"]; g != "orders-7" || aws.ToString(got.Body) != "bad" {
		t.Errorf("dead-lettered %q in group %q", aws.ToString(got.Body), g)
	}
	emptyEventually(t, c, q.URL, 10*time.Second)
}

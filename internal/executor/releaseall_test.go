package executor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/metrics"
)

// recorder is an Acker that records the visibility each message was
// released with, in order; while gate is set, its Retry waits on it.
type recorder struct {
	gate chan struct{}

	mu      sync.Mutex
	retries []string // "id:held" (a visibility ahead) or "id:now"
	now     int      // Retry calls under way
	most    int      // the most under way at once
}

func (r *recorder) Delete(*Job)  {}
func (r *recorder) Abandon(*Job) {}

func (r *recorder) Retry(j *Job, vis time.Duration) {
	r.mu.Lock()
	how := "now"
	if vis > 0 {
		how = "held"
	}
	r.retries = append(r.retries, j.Msg.ID+":"+how)
	r.now++
	r.most = max(r.most, r.now)
	r.mu.Unlock()
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	r.now--
	r.mu.Unlock()
}

func releaseExecutor(fifo bool) *Executor {
	return &Executor{Counters: &Counters{}, Metrics: metrics.Nop{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Requeue: Requeue{FIFO: fifo}}
}

// A standard queue's unrun messages are released concurrently, at most
// ReleaseSends at once: with every release held up (an SQS that does not
// answer), 40 messages have 32 releases under way, then the rest once
// those end.
func TestReleaseAllBoundsConcurrentReleases(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		e := releaseExecutor(false)
		ack := &recorder{gate: make(chan struct{})}
		jobs := make([]*Job, 40)
		for i := range jobs {
			jobs[i] = &Job{Msg: &sqsworker.Message{ID: fmt.Sprint(i)}, Ctx: context.Background()}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			ReleaseAll(len(jobs), false, false, func(i int) (*Executor, *Job, Acker) { return e, jobs[i], ack })
		}()
		synctest.Wait()
		ack.mu.Lock()
		under := ack.now
		ack.mu.Unlock()
		if under != ReleaseSends {
			t.Errorf("%d releases under way at once, want %d", under, ReleaseSends)
		}
		close(ack.gate)
		<-done
		if len(ack.retries) != len(jobs) || ack.most != ReleaseSends {
			t.Errorf("%d released, at most %d at once; want %d, at most %d", len(ack.retries), ack.most, len(jobs), ReleaseSends)
		}
		if n := e.Counters.Released.Load(); n != int64(len(jobs)) {
			t.Errorf("%d counted released, want %d", n, len(jobs))
		}
	})
}

// A FIFO queue's unrun messages, their time an hour ahead, are released in
// order: the first of each group (queue and group ID) held back until its
// time, by its visibility; those behind it in their group released at once
// (ReleaseBehind), to be held when their turn comes; a message without a
// group is a group of its own. With behind set, every message of a group
// is behind.
func TestReleaseAllFIFOInOrder(t *testing.T) {
	nb := sqsworker.NotBeforeAttribute(time.Now().Add(time.Hour))
	msg := func(id, queue, group string) *Job {
		return &Job{Msg: &sqsworker.Message{ID: id, QueueURL: queue, GroupID: group,
			MessageAttributes: map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: nb}},
			ReceivedAt: time.Now(), Ctx: context.Background()}
	}
	for _, tc := range []struct {
		behind bool
		want   []string
	}{
		{false, []string{"a1:held", "b1:held", "a2:now", "a1-other-queue:held", "std:held", "b2:now", "a3:now"}},
		{true, []string{"a1:now", "b1:now", "a2:now", "a1-other-queue:now", "std:held", "b2:now", "a3:now"}},
	} {
		t.Run(fmt.Sprintf("behind=%v", tc.behind), func(t *testing.T) {
			e := releaseExecutor(true)
			ack := &recorder{}
			jobs := []*Job{msg("a1", "q", "a"), msg("b1", "q", "b"), msg("a2", "q", "a"), msg("a1-other-queue", "q2", "a"),
				msg("std", "q", ""), msg("b2", "q", "b"), msg("a3", "q", "a")}
			ReleaseAll(len(jobs), true, tc.behind, func(i int) (*Executor, *Job, Acker) { return e, jobs[i], ack })
			if fmt.Sprint(ack.retries) != fmt.Sprint(tc.want) {
				t.Errorf("released %v, want %v", ack.retries, tc.want)
			}
		})
	}
}

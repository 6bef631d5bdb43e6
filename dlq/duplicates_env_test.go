package dlq

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// End to end on the emulator: a worker dead-letters a job whose handler
// fails for good, and the reply to its send to the (standard) dead-letter
// queue is lost: SQS applied it, the SDK sends it again, and the
// dead-letter queue holds two copies of the job, which a listing shows as
// such. A replay moves one and deletes the other: the job runs once more,
// successfully, once; the dead-letter queue is left empty.
func TestReplayAfterLostDeadLetterReplyRunsOnce(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{MaxReceiveCount: 3})
	wc, p := losingClient(t, 1, func(in any) bool {
		s, ok := in.(*sqs.SendMessageInput)
		return ok && aws.ToString(s.QueueUrl) == q.DLQURL
	})
	var mu sync.Mutex
	failing := true
	runs := map[string]int{} // successful runs, by body
	h := sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if failing {
			return sqsworker.Permanent(errors.New("malformed payload"))
		}
		runs[m.Body]++
		return nil
	})
	w, err := worker.New(wc, worker.Config{QueueURL: q.URL, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), h) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	localtest.Send(t, c, q.URL, "", "job 1")
	localtest.Eventually(t, 60*time.Second, func() bool { return w.Stats().DeadLettered == 1 }, "not dead-lettered: %+v", w.Stats())
	if n := p.Stats().LostReplies; n != 1 {
		t.Fatalf("%d replies lost, want the dead-letter send's", n)
	}
	localtest.Eventually(t, 30*time.Second, func() bool { v, f, d := localtest.Depth(t, c, q.URL); return v+f+d == 0 }, "the original was not deleted")

	ctx := context.Background()
	dq, err := Open(ctx, c, q.DLQURL, Config{})
	if err != nil {
		t.Fatal(err)
	}
	scan, err := dq.Scan(ctx, ScanConfig{Visibility: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one dead-letter move with a lost reply left %d copies (%d marked duplicates)", len(scan.Messages), scan.Duplicates)
	if len(scan.Messages) != 2 || scan.Duplicates != 1 {
		t.Fatalf("the dead-letter queue holds %d messages, %d marked duplicates; want the job's two copies, one marked", len(scan.Messages), scan.Duplicates)
	}

	mu.Lock()
	failing = false // the handler is fixed
	mu.Unlock()
	res, err := dq.Replay(ctx, ReplayConfig{Visibility: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Moved != 1 || res.Duplicates != 1 {
		t.Errorf("replay: moved %d, %d duplicates dropped; want 1 and 1", res.Moved, res.Duplicates)
	}
	// Every copy the replay sent is in the queue once it returns: when the
	// queue is drained, each has run.
	localtest.Eventually(t, 60*time.Second, func() bool {
		v, f, d := localtest.Depth(t, c, q.URL)
		return v+f+d == 0 && w.Stats().Succeeded >= 1
	}, "the replayed job did not run: %+v", w.Stats())
	mu.Lock()
	if n := runs["job 1"]; n != 1 {
		t.Errorf("the job ran %d times after the replay, want once", n)
	}
	mu.Unlock()
	if v, f, d := localtest.Depth(t, c, q.DLQURL); v+f+d != 0 {
		t.Errorf("the dead-letter queue holds %d messages after the replay, want none", v+f+d)
	}
}

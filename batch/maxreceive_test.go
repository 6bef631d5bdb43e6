package batch_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// Config.MaxReceiveCount above the maxReceiveCount of the chunks' queue's
// redrive policy (5 against 2, on the local SQS): SQS dead-letters a
// failing chunk after its second receive, and the batch records it failed
// then. Before, it waited for a fifth attempt that never came, and showed
// the dead-lettered chunk pending. So too for a chunk whose handler the
// worker cuts at its HandlerTimeout, with the policy not yet read: its
// context is over when the policy is read.
func TestMaxReceiveCountAboveThePolicy(t *testing.T) {
	t.Parallel()
	for name, h := range map[string]sqsworker.HandlerFunc{
		"failing": func(context.Context, *sqsworker.Message) error { return errors.New("upstream 503") },
		"timing out": func(ctx context.Context, _ *sqsworker.Message) error {
			<-ctx.Done()
			return ctx.Err()
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEmulatorEnv(t, 2)
			logs := &logBuffer{}
			c, err := batch.New(context.Background(), e.db, e.sqs, batch.Config{Table: e.table, MaxReceiveCount: 5, Logger: logs.logger()})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Create(context.Background(), e.spec("above", 1)); err != nil {
				t.Fatal(err)
			}
			w, err := worker.New(e.sqs, worker.Config{QueueURL: e.work, WaitTime: time.Second, DisableDepth: true,
				HandlerTimeout: 500 * time.Millisecond, Backoff: sqsworker.ExponentialBackoff{Base: time.Second, Cap: time.Second},
				Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Run(ctx, c.Middleware(h)) }()
			localtest.Eventually(t, 2*time.Minute, func() bool {
				v, f, d := localtest.Depth(t, e.sqs, e.chunks.DLQURL)
				return v+f+d == 1 && progress(t, c, "above").Failed == 1
			}, "the dead-lettered chunk recorded failed")
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			p := progress(t, c, "above")
			if p.Pending != 0 || len(p.FailedChunks) != 1 || p.FailedChunks[0].Attempts != 2 {
				t.Errorf("progress %+v, want the chunk failed on its 2nd attempt", p)
			}
			if !logs.contains("Config.MaxReceiveCount is above the maxReceiveCount") {
				t.Error("the mistake was not logged")
			}
		})
	}
}

// logBuffer keeps what a logger writes, for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

func (l *logBuffer) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Contains(l.b.String(), s)
}

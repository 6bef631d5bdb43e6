package worker

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// A MultiWorker's pool has room for every queue's receives, acknowledgement
// batches and heartbeat calls, and for the calls of the handlers of the
// whole shared pool (dead-letter moves, delayed copies).
func TestNewMultiConnsCountHandlers(t *testing.T) {
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	m, err := NewMulti(c, MultiConfig{Concurrency: 20, Queues: []QueueConfig{
		{Config: Config{QueueURL: "https://sqs.us-east-1.amazonaws.com/1/a"}, Priority: 1},
		{Config: Config{QueueURL: "https://sqs.us-east-1.amazonaws.com/1/b", Pollers: 6, DisableHeartbeat: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// a: 1 receive loop, 4 acknowledgement batches, 4 heartbeat calls;
	// b: 6 and 6, no heartbeat; 20 handlers.
	hc, ok := sdkhttp.HTTPClient(m.workers[0].api)
	if !ok {
		t.Fatalf("the workers call a %T, want their calls through their own HTTP client", m.workers[0].api)
	}
	bc := hc.(*sdkhttp.Client).Next.(*awshttp.BuildableClient)
	if got, want := bc.GetTransport().MaxIdleConnsPerHost, 1+4+4+6+6+20; got != want {
		t.Errorf("the workers' HTTP client keeps %d idle connections per host, want %d", got, want)
	}
}

// The heartbeat makes as many calls at once as the worker has receive
// loops (at least 4): the messages of one receive of each loop fall due in
// one round, and a round of 1,000 leases at 4 calls at once, SQS answering
// in a second, outlasted their time left. Heartbeat.MaxInFlight, when set,
// wins.
func TestHeartbeatCallsFollowThePollers(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want int
	}{
		{Config{Concurrency: 1000}, 100},
		{Config{Concurrency: 10}, 4},
		{Config{Concurrency: 1000, Heartbeat: visibility.Config{MaxInFlight: 7}}, 7},
	} {
		f := sqstest.NewFake()
		c.cfg.QueueURL = f.CreateQueue("q", nil)
		c.cfg.Logger, c.cfg.WaitTime = slog.New(slog.NewTextHandler(io.Discard, nil)), time.Second
		w, err := New(f, c.cfg)
		if err != nil {
			t.Fatal(err)
		}
		ran := make(chan error, 1)
		go func() {
			ran <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
		}()
		deadline := time.Now().Add(30 * time.Second)
		for w.ext.Load() == nil && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got := -1 // no heartbeat
		if ext := w.ext.Load(); ext != nil {
			got = ext.Config().MaxInFlight
		}
		if got != c.want {
			t.Errorf("Concurrency %d, Heartbeat.MaxInFlight %d: the heartbeat's MaxInFlight is %d, want %d", c.cfg.Concurrency, c.cfg.Heartbeat.MaxInFlight, got, c.want)
		} else if got := conns(c.cfg.withDefaults()); got != c.cfg.withDefaults().Pollers+max(4, c.cfg.withDefaults().Pollers)+c.want {
			t.Errorf("conns = %d, not counting the heartbeat's %d calls", got, c.want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := w.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		cancel()
		if err := <-ran; err != nil {
			t.Error(err)
		}
	}
}

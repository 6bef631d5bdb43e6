package main

// The priority benchmark (-priority): what a critical queue's jobs wait
// under a flood of low-priority jobs, with three ways of consuming both:
//
//   - one worker.MultiWorker over a critical and a low queue, a pool of
//     -prio-pool slots of which -prio-reserved only the critical queue may
//     use;
//   - two worker.Workers, one per queue, the same slots split by hand
//     (-prio-reserved for the critical queue, the rest for the low one);
//   - one worker.Worker over one shared queue that holds both kinds of job.
//
// Each run preloads -prio-flood low jobs (the handler sleeps -prio-work),
// starts the consumers, then sends a critical job every 100 ms for
// -prio-trickle; a critical job's latency is from its send to its handler's
// start, measured on this machine's clock. SQS requests are counted (SDK
// middleware) over the trickle, per message handled.
//
// Then the idle cost (-idle): four empty queues for -idle (a minute) at the
// default long-poll wait of 20 s, consumed by one MultiWorker and by four
// Workers of Concurrency 16 at once: ReceiveMessage calls per queue per
// minute, counted from the middle of the first long polls.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// prioSettings are the priority benchmark's flags.
type prioSettings struct {
	pool, reserved int
	flood          int
	work           time.Duration
	trickle        time.Duration
	wait           time.Duration
	idle           time.Duration
}

// prioResult is one consumer's run.
type prioResult struct {
	name          string
	lat           []time.Duration // sorted
	lowDone       int64           // low jobs done during the trickle
	window        time.Duration   // the trickle, until the last critical job started
	requests      int
	byOp          map[string]int
	handled       int64
	criticalTotal int
}

// prioQueue is a queue created for the benchmark.
func prioQueue(ctx context.Context, c *sqs.Client, suffix string) (string, func(), error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "sqsbench-prio-" + hex.EncodeToString(b) + "-" + suffix
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{"VisibilityTimeout": "60"}})
	if err != nil {
		return "", nil, fmt.Errorf("creating queue %s: %w", name, err)
	}
	url := aws.ToString(out.QueueUrl)
	return url, func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url}) }, nil
}

// consumerSet is what one scenario runs: start, then stop.
type consumerSet interface {
	Run(ctx context.Context, h sqsworker.Handler) error
	Shutdown(ctx context.Context) error
}

func priority(ctx context.Context, cfg aws.Config, p prioSettings) error {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	scenarios := []struct {
		name   string
		shared bool
		build  func(c *sqs.Client, crit, low string) (consumerSet, error)
	}{
		{fmt.Sprintf("MultiWorker: pool %d, %d reserved for critical", p.pool, p.reserved), false,
			func(c *sqs.Client, crit, low string) (consumerSet, error) {
				return worker.NewMulti(c, worker.MultiConfig{Concurrency: p.pool, Logger: quiet, Queues: []worker.QueueConfig{
					{Config: worker.Config{QueueURL: crit, WaitTime: p.wait}, Priority: 1, Reserved: p.reserved},
					{Config: worker.Config{QueueURL: low, WaitTime: p.wait}},
				}})
			}},
		{fmt.Sprintf("two Workers by hand: %d + %d", p.reserved, p.pool-p.reserved), false,
			func(c *sqs.Client, crit, low string) (consumerSet, error) {
				a, err := worker.New(c, worker.Config{QueueURL: crit, Concurrency: p.reserved, WaitTime: p.wait, Logger: quiet})
				if err != nil {
					return nil, err
				}
				b, err := worker.New(c, worker.Config{QueueURL: low, Concurrency: p.pool - p.reserved, WaitTime: p.wait, Logger: quiet})
				return workers{a, b}, err
			}},
		{fmt.Sprintf("one Worker (%d) over one shared queue", p.pool), true,
			func(c *sqs.Client, crit, _ string) (consumerSet, error) {
				w, err := worker.New(c, worker.Config{QueueURL: crit, Concurrency: p.pool, WaitTime: p.wait, Logger: quiet})
				return workers{w}, err
			}},
	}
	var results []prioResult
	for _, sc := range scenarios {
		fmt.Fprintf(os.Stderr, "priority: %s\n", sc.name)
		r, err := prioRun(ctx, cfg, p, sc.name, sc.shared, sc.build)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		results = append(results, r)
	}
	fmt.Printf("### Critical jobs under a flood of low-priority jobs\n\n")
	fmt.Printf("%d low jobs preloaded (handler sleeps %s), a critical job every 100 ms for %s; pool of %d handler slots; long-poll wait %s.\n"+
		"Latency: the critical job's send to its handler's start.\n\n", p.flood, p.work, p.trickle, p.pool, p.wait)
	fmt.Println("| consumer | critical jobs | p50 | p99 | max | low jobs/s meanwhile | SQS requests per message |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range results {
		fmt.Printf("| %s | %d of %d | %s | %s | %s | %.0f | %.2f |\n", r.name, len(r.lat), r.criticalTotal,
			fmtDur(pctile(r.lat, 0.5)), fmtDur(pctile(r.lat, 0.99)), fmtDur(pctile(r.lat, 1)),
			float64(r.lowDone)/r.window.Seconds(), float64(r.requests)/float64(max(r.handled, 1)))
	}
	fmt.Println()
	for _, r := range results {
		fmt.Fprintf(os.Stderr, "priority: %s: requests by operation %v\n", r.name, r.byOp)
	}
	if p.idle > 0 {
		return idleCost(ctx, cfg, p, quiet)
	}
	return nil
}

// workers runs Workers side by side.
type workers []*worker.Worker

func (ws workers) Run(ctx context.Context, h sqsworker.Handler) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.Run(ctx, h) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (ws workers) Shutdown(ctx context.Context) error {
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Go(func() { errs[i] = w.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func prioRun(ctx context.Context, cfg aws.Config, p prioSettings, name string, shared bool,
	build func(c *sqs.Client, crit, low string) (consumerSet, error)) (prioResult, error) {
	res := prioResult{name: name, criticalTotal: int(p.trickle / (100 * time.Millisecond))}
	var counter localtest.Counter
	c := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, counter.AddTo) })
	plain := sqs.NewFromConfig(cfg)
	crit, del1, err := prioQueue(ctx, plain, "critical")
	if err != nil {
		return res, err
	}
	defer del1()
	low := crit
	if !shared {
		var del2 func()
		if low, del2, err = prioQueue(ctx, plain, "low"); err != nil {
			return res, err
		}
		defer del2()
	}
	if err := fill(ctx, plain, low, p.flood); err != nil {
		return res, err
	}
	cs, err := build(c, crit, low)
	if err != nil {
		return res, err
	}
	var mu sync.Mutex
	var lat []time.Duration
	var lowDone, critDone atomic.Int64
	h := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		if ns, ok := strings.CutPrefix(m.Body, "critical:"); ok {
			n, _ := strconv.ParseInt(ns, 10, 64)
			d := time.Since(time.Unix(0, n))
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
			critDone.Add(1)
			return nil
		}
		time.Sleep(p.work)
		lowDone.Add(1)
		return nil
	})
	runErr := make(chan error, 1)
	go func() { runErr <- cs.Run(context.WithoutCancel(ctx), h) }()
	warm := int64(min(100, p.flood/4))
	for lowDone.Load() < warm { // warmed up: the flood is being consumed
		select {
		case err := <-runErr:
			return res, fmt.Errorf("run ended: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	counter.Reset()
	lowAt := lowDone.Load()
	began := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	for range res.criticalTotal {
		body := "critical:" + strconv.FormatInt(time.Now().UnixNano(), 10)
		if _, err := plain.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &crit, MessageBody: &body}); err != nil {
			tick.Stop()
			return res, err
		}
		<-tick.C
	}
	tick.Stop()
	// The shared queue's critical jobs wait behind the flood: give them
	// time, up to two minutes.
	deadline := time.Now().Add(2 * time.Minute)
	for critDone.Load() < int64(res.criticalTotal) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	res.window = time.Since(began)
	res.lowDone = lowDone.Load() - lowAt
	res.handled = res.lowDone + critDone.Load()
	res.requests = counter.Total()
	res.byOp = counter.ByOperation()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_ = cs.Shutdown(sctx)
	if err := <-runErr; err != nil {
		return res, err
	}
	mu.Lock()
	res.lat = slices.Sorted(slices.Values(lat))
	mu.Unlock()
	return res, nil
}

// idleCost counts the receives of four idle queues for p.idle, consumed by
// one MultiWorker and by four Workers at once.
func idleCost(ctx context.Context, cfg aws.Config, p prioSettings, log *slog.Logger) error {
	fmt.Fprintf(os.Stderr, "priority: idle cost, %s\n", p.idle)
	const queues, perWorker = 4, 16
	var multiCount, splitCount localtest.Counter
	mc := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, multiCount.AddTo) })
	sc := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, splitCount.AddTo) })
	plain := sqs.NewFromConfig(cfg)
	var mq, sq []string
	for i := range queues {
		u, del, err := prioQueue(ctx, plain, "idle-m"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		defer del()
		mq = append(mq, u)
		u, del, err = prioQueue(ctx, plain, "idle-s"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		defer del()
		sq = append(sq, u)
	}
	var qcs []worker.QueueConfig
	var split workers
	for i := range queues {
		qcs = append(qcs, worker.QueueConfig{Config: worker.Config{QueueURL: mq[i]}, Priority: i})
		w, err := worker.New(sc, worker.Config{QueueURL: sq[i], Concurrency: perWorker, Logger: log})
		if err != nil {
			return err
		}
		split = append(split, w)
	}
	multi, err := worker.NewMulti(mc, worker.MultiConfig{Concurrency: queues * perWorker, Queues: qcs, Logger: log})
	if err != nil {
		return err
	}
	nop := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	done := make(chan error, 2)
	go func() { done <- multi.Run(context.WithoutCancel(ctx), nop) }()
	go func() { done <- split.Run(context.WithoutCancel(ctx), nop) }()
	for !multi.Ready() || !split[0].Ready() || !split[queues-1].Ready() {
		time.Sleep(20 * time.Millisecond)
	}
	// Counted from the middle of the first long polls, so that every loop
	// ends the same number of them in the window whatever its phase.
	time.Sleep(worker.DefaultWaitTime / 2)
	multiCount.Reset()
	splitCount.Reset()
	time.Sleep(p.idle)
	m, s := multiCount.Get("ReceiveMessage"), splitCount.Get("ReceiveMessage")
	mt, st := multiCount.Total(), splitCount.Total()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { _ = multi.Shutdown(sctx) })
	wg.Go(func() { _ = split.Shutdown(sctx) })
	wg.Wait()
	if err := errors.Join(<-done, <-done); err != nil {
		return err
	}
	perMin := func(n int) float64 { return float64(n) / queues / p.idle.Minutes() }
	fmt.Printf("### Idle cost\n\n%d empty queues for %s, long-poll wait 20 s (the default).\n\n", queues, p.idle)
	fmt.Println("| consumer | receives per queue per idle minute | all requests per queue per idle minute |")
	fmt.Println("|---|---:|---:|")
	fmt.Printf("| MultiWorker, pool %d, 1 receive loop per queue | %.1f | %.1f |\n", queues*perWorker, perMin(m), perMin(mt))
	fmt.Printf("| %d Workers of Concurrency %d (%d receive loops each) | %.1f | %.1f |\n\n", queues, perWorker, (perWorker+9)/10, perMin(s), perMin(st))
	return nil
}

func pctile(s []time.Duration, p float64) time.Duration {
	if len(s) == 0 {
		return 0
	}
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}

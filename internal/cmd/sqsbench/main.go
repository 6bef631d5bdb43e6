// Command sqsbench measures the worker against the local SQS emulator: its
// throughput with a no-op handler beside a hand-tuned raw SDK loop (8
// goroutines of ReceiveMessage(10) + DeleteMessageBatch) in the same run, the
// ratio of the two, and the SQS requests made per processed message.
//
// Run it with `make bench`. Rounds alternate raw and worker runs on fresh
// queues so that both see the same emulator state; the median of the rounds
// is reported.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/testenv"
	"github.com/sqsworker/sqsworker/worker"
)

var profile string

type result struct {
	elapsed  time.Duration // from the lo to the hi mark
	messages int64         // deleted between the marks
	total    int           // messages in the run
	requests int           // SQS requests in the whole run
}

func (r result) rate() float64       { return float64(r.messages) / r.elapsed.Seconds() }
func (r result) perMessage() float64 { return float64(r.requests) / float64(r.total) }

type markSet struct{ lo, hi int64 }

// marks are the deleted counts between which throughput is timed.
func marks(n int) markSet { return markSet{lo: int64(n / 20), hi: int64(n - n/20)} }

func main() {
	n := flag.Int("messages", 20000, "messages per run")
	rounds := flag.Int("rounds", 5, "rounds of raw + worker runs")
	goroutines := flag.Int("raw-goroutines", 8, "goroutines of the raw loop")
	concurrency := flag.Int("concurrency", 80, "worker Config.Concurrency")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the worker runs to this file")
	flag.Parse()
	profile = *cpuprofile
	if e := testenv.Endpoint(); e == "" || !testenv.IsLoopback(e) {
		log.Fatalf("sqsbench: set AWS_ENDPOINT_URL_SQS to the local emulator (make bench does), got %q", e)
	}
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	var count testenv.Counter
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, count.AddTo) })

	var raws, asyncs, workers []result
	for round := 1; round <= *rounds; round++ {
		raws = append(raws, measure(ctx, client, &count, *n, "raw", func(url string) time.Duration { return rawLoop(ctx, client, url, *n, *goroutines, false) }))
		asyncs = append(asyncs, measure(ctx, client, &count, *n, "raw-async", func(url string) time.Duration { return rawLoop(ctx, client, url, *n, *goroutines, true) }))
		workers = append(workers, measure(ctx, client, &count, *n, "worker", func(url string) time.Duration { return runWorker(ctx, client, url, *n, *concurrency) }))
		fmt.Fprintf(os.Stderr, "round %d: raw %.0f msg/s, raw with async deletes %.0f msg/s, worker %.0f msg/s\n",
			round, raws[round-1].rate(), asyncs[round-1].rate(), workers[round-1].rate())
	}
	raw, async, wk := median(raws), median(asyncs), median(workers)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "consumer\tmessages\tmsg/s (median of %d)\tSQS requests/msg\t\n", *rounds)
	fmt.Fprintf(tw, "raw SDK loop (%d goroutines)\t%d\t%.0f\t%.3f\t\n", *goroutines, raw.total, raw.rate(), raw.perMessage())
	fmt.Fprintf(tw, "raw SDK loop, deletes in parallel\t%d\t%.0f\t%.3f\t\n", async.total, async.rate(), async.perMessage())
	fmt.Fprintf(tw, "worker (Concurrency %d)\t%d\t%.0f\t%.3f\t\n", *concurrency, wk.total, wk.rate(), wk.perMessage())
	tw.Flush()
	fmt.Printf("worker / raw loop: %.2f, worker / raw loop with parallel deletes: %.2f (target >= 0.90)\n", wk.rate()/raw.rate(), wk.rate()/async.rate())
	fmt.Printf("worker requests per message: %.3f (target <= 0.25)\n", wk.perMessage())
}

func median(rs []result) result {
	sort.Slice(rs, func(i, j int) bool { return rs[i].rate() < rs[j].rate() })
	return rs[len(rs)/2]
}

// measure creates a queue, fills it with n messages, and lets consume drain
// it, counting the requests it makes. consume returns the steady-state time:
// from the 5% to the 95% deleted mark, leaving out start-up and the tail.
func measure(ctx context.Context, c *sqs.Client, count *testenv.Counter, n int, name string, consume func(url string) time.Duration) result {
	qn := fmt.Sprintf("bench-%s-%d", name, time.Now().UnixNano())
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &qn})
	if err != nil {
		log.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	defer c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &url})
	fill(ctx, c, url, n)
	count.Reset()
	elapsed := consume(url)
	r := result{elapsed: elapsed, messages: marks(n).hi - marks(n).lo, total: n, requests: count.Total()}
	if os.Getenv("SQSBENCH_VERBOSE") != "" {
		fmt.Fprintln(os.Stderr, name, count.ByOperation())
	}
	return r
}

func fill(ctx context.Context, c *sqs.Client, url string, n int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for {
				start := int(next.Add(10)) - 10
				if start >= n {
					return
				}
				in := &sqs.SendMessageBatchInput{QueueUrl: &url}
				for i := start; i < min(start+10, n); i++ {
					in.Entries = append(in.Entries, types.SendMessageBatchRequestEntry{
						Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(`{"job":` + strconv.Itoa(i) + `}`),
					})
				}
				if _, err := c.SendMessageBatch(ctx, in); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
}

// rawLoop is the ceiling: receive ten, delete them in one batch, repeat.
// With async, each batch delete runs in its own goroutine while the loop
// receives again.
func rawLoop(ctx context.Context, c *sqs.Client, url string, n, goroutines int, async bool) time.Duration {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m := marks(n)
	start := time.Now()
	var loAt, hiAt atomic.Int64 // ns after start when the marks were passed
	var done, received atomic.Int64
	var wg, deletes sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for received.Load() < int64(n) {
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					log.Fatal(err)
				}
				if len(out.Messages) == 0 {
					continue
				}
				received.Add(int64(len(out.Messages)))
				in := &sqs.DeleteMessageBatchInput{QueueUrl: &url}
				for i, m := range out.Messages {
					in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
				}
				del := func() {
					if _, err := c.DeleteMessageBatch(ctx, in); err != nil {
						log.Fatal(err)
					}
					d := done.Add(int64(len(in.Entries)))
					if d >= m.lo {
						loAt.CompareAndSwap(0, int64(time.Since(start)))
					}
					if d >= m.hi {
						hiAt.CompareAndSwap(0, int64(time.Since(start)))
					}
					if d >= int64(n) {
						cancel() // stop the receives still waiting
					}
				}
				if async {
					deletes.Go(del)
				} else {
					del()
				}
			}
		})
	}
	wg.Wait()
	deletes.Wait()
	return time.Duration(hiAt.Load() - loAt.Load())
}

func runWorker(ctx context.Context, c *sqs.Client, url string, n, concurrency int) time.Duration {
	w, err := worker.New(c, worker.Config{
		QueueURL: url, Concurrency: concurrency, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		log.Fatal(err)
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	m := marks(n)
	var loAt time.Time
	for {
		d := w.Stats().Deleted
		if d >= m.lo && loAt.IsZero() {
			loAt = time.Now()
		}
		if d >= m.hi {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	elapsed := time.Since(loAt)
	for w.Stats().Deleted < int64(n) {
		time.Sleep(time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	return elapsed
}

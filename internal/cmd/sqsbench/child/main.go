// Command child is the consumer process that sqsbench (`make bench`) times
// from exec to exit: it drains exactly -messages messages, preloaded by
// sqsbench, from -queue-url and exits 0 once SQS has confirmed all their
// deletes.
//
// With -mode raw it is the raw SDK loop: -raw-goroutines goroutines, each
// ReceiveMessage(10) then DeleteMessageBatch of what it received; the
// receives still waiting are cancelled once the last delete has landed, or,
// with -raw-let-polls-end, left to end as the worker leaves them (a long
// poll cut short stays open at SQS, which hands it the next message that
// comes; see the worker's Shutdown). -raw-attributes has it ask for every
// attribute, as the worker does; -raw-deletes-beside has each receiving
// goroutine hand its batch to one of as many deleting goroutines, so that
// the deletes go on beside the receives, as the worker's do.
// With -mode worker it is a worker.Worker (worker.New + Run) with a no-op
// handler, or one that sleeps -sleep; it calls Shutdown once SQS has
// confirmed the last delete, and exits when Run returns.
//
// Both load their AWS configuration the standard way; the SQS endpoint, from
// AWS_ENDPOINT_URL_SQS, must be on the loopback interface. Both count their
// own SQS requests (every attempt, with SDK middleware) and the deletes SQS
// confirmed, and print one JSON object on stdout when done: the wall-clock
// times (Unix nanoseconds) of their start, first confirmed delete, the 5%
// and 95% marks and the last delete, the requests by operation, and their
// own peak RSS (VmHWM of /proc/self/status; the parent's ru_maxrss of the
// child is not usable, see sqsbench). Errors go to stderr, exit 1; bad flags
// exit 2.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/worker"
)

// Report is what the child prints; sqsbench reads the same fields.
type Report struct {
	Start     int64          `json:"start_ns"`     // main started
	First     int64          `json:"first_ns"`     // first delete confirmed
	Lo        int64          `json:"lo_ns"`        // 5% of the messages' deletes confirmed
	Hi        int64          `json:"hi_ns"`        // 95%
	Done      int64          `json:"done_ns"`      // all
	LoCount   int64          `json:"lo_count"`     // deletes confirmed at Lo
	HiCount   int64          `json:"hi_count"`     // and at Hi
	Deleted   int64          `json:"deleted"`      // deletes confirmed (worker: Stats().Deleted)
	Requests  map[string]int `json:"requests"`     // SQS requests by operation, retries included
	PeakRSSKB int64          `json:"peak_rss_kib"` // VmHWM at exit
	Extended  int64          `json:"extensions"`   // heartbeat extensions (worker)
	Received  int64          `json:"received"`     // messages received
	Nonempty  int64          `json:"nonempty"`     // receives that brought messages
	GC        GCStats        `json:"gc"`           // the collector's work, at exit
}

// GCStats is the collector's work over the run, from runtime/metrics: what
// a consumer's CPU beyond its own code goes to.
type GCStats struct {
	Cycles     uint64 `json:"cycles"`     // completed cycles
	Allocated  uint64 `json:"allocated"`  // heap bytes allocated in all
	HeapScan   uint64 `json:"heap_scan"`  // heap bytes scanned by the last cycle
	StackScan  uint64 `json:"stack_scan"` // stack bytes scanned by the last cycle
	Goroutines uint64 `json:"goroutines"` // live at exit
}

type settings struct {
	mode       string
	queueURL   string
	messages   int64
	goroutines int
	attributes bool
	letEnd     bool
	split      bool
	worker     worker.Config
	sleep      time.Duration
	cpuprofile string
	memprofile string
}

func main() {
	s, err := parseSettings(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	if err := run(s); err != nil {
		slog.Error("child failed", "mode", s.mode, "error", err)
		os.Exit(1)
	}
}

func parseSettings(args []string) (settings, error) {
	var s settings
	fs := flag.NewFlagSet("child", flag.ContinueOnError)
	fs.StringVar(&s.mode, "mode", "", "raw or worker")
	fs.StringVar(&s.queueURL, "queue-url", "", "queue to drain")
	fs.Int64Var(&s.messages, "messages", 0, "messages in the queue: the child exits once it has deleted them all")
	fs.IntVar(&s.goroutines, "raw-goroutines", 8, "goroutines of the raw loop")
	fs.BoolVar(&s.attributes, "raw-attributes", false, "raw loop: receive every system and message attribute, as the worker does")
	fs.BoolVar(&s.split, "raw-deletes-beside", false, "raw loop: deletes beside the receives, as the worker makes them: each receiving goroutine hands its batch to one of as many deleting goroutines and receives again at once (connection pool widened to 64 idle connections per host, room for its 16 calls, as the worker widens its own)")
	fs.BoolVar(&s.letEnd, "raw-let-polls-end", false, "raw loop: once the last delete has landed, let the receives under way end rather than cancel them, as the worker does")
	fs.IntVar(&s.worker.Concurrency, "concurrency", 80, "worker Config.Concurrency")
	fs.IntVar(&s.worker.Pollers, "pollers", 0, "worker Config.Pollers (0: the default, Concurrency/10)")
	fs.DurationVar(&s.worker.WaitTime, "wait-time", time.Second, "long-poll wait of each receive (both modes)")
	heartbeat := fs.Bool("heartbeat", true, "worker: the visibility heartbeat on (Config.DisableHeartbeat false)")
	fs.DurationVar(&s.sleep, "sleep", 0, "worker: how long the handler sleeps (0: a no-op handler)")
	fs.StringVar(&s.cpuprofile, "cpuprofile", "", "write a CPU profile of the whole process to this file")
	fs.StringVar(&s.memprofile, "memprofile", "", "write a heap profile to this file once all deletes are confirmed")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	s.worker.DisableHeartbeat = !*heartbeat
	var errs []error
	if s.mode != "raw" && s.mode != "worker" {
		errs = append(errs, fmt.Errorf("-mode %q: want raw or worker", s.mode))
	}
	if s.queueURL == "" {
		errs = append(errs, errors.New("-queue-url is required"))
	}
	if s.messages <= 0 {
		errs = append(errs, errors.New("-messages must be positive"))
	}
	if s.goroutines <= 0 {
		errs = append(errs, errors.New("-raw-goroutines must be positive"))
	}
	if e := os.Getenv("AWS_ENDPOINT_URL_SQS"); !isLoopback(e) {
		errs = append(errs, fmt.Errorf("AWS_ENDPOINT_URL_SQS must name the local emulator on the loopback interface, got %q", e))
	}
	return s, errors.Join(errs...)
}

// isLoopback reports whether endpoint is an http(s) URL on the loopback
// interface.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

func run(s settings) (err error) {
	start := time.Now().UnixNano()
	if s.cpuprofile != "" {
		f, err := os.Create(s.cpuprofile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("cpu profile: %w", cerr)
			}
		}()
	}
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return fmt.Errorf("loading the AWS configuration: %w", err)
	}
	t := newTally(s.messages)
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok && s.split {
		// Widened, not replaced: it keeps what the configuration set
		// (AWS_CA_BUNDLE, say).
		cfg.HTTPClient = bc.WithTransportOptions(func(tr *http.Transport) { tr.MaxIdleConnsPerHost = 64 })
	}
	client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.APIOptions = append(o.APIOptions, t.addTo) })

	var rep Report
	switch s.mode {
	case "raw":
		err = rawLoop(ctx, client, s, t)
		rep.Deleted = t.deleted.Load()
	case "worker":
		rep, err = runWorker(ctx, client, s, t)
	}
	if err != nil {
		return err
	}
	if s.memprofile != "" {
		if err := writeHeapProfile(s.memprofile); err != nil {
			return err
		}
	}
	rep.Start, rep.First, rep.Lo, rep.Hi, rep.Done = start, t.first.Load(), t.lo.Load(), t.hi.Load(), t.done.Load()
	rep.LoCount, rep.HiCount = t.loCount, t.hiCount
	rep.Requests = t.requests()
	rep.Received, rep.Nonempty = t.received.Load(), t.nonempty.Load()
	if rep.PeakRSSKB, err = peakRSS(); err != nil {
		return err
	}
	rep.GC = gcStats()
	if rep.Deleted != s.messages {
		return fmt.Errorf("%d deletes confirmed, want %d", rep.Deleted, s.messages)
	}
	return json.NewEncoder(os.Stdout).Encode(rep)
}

// tally counts the SQS requests and the deletes SQS confirmed, and notes
// when the deletes passed the marks.
type tally struct {
	n                int64
	loCount, hiCount int64 // the marks: 5% and 95% of n
	deleted          atomic.Int64
	received         atomic.Int64 // messages received
	nonempty         atomic.Int64 // receives that brought messages
	first, lo, hi    atomic.Int64 // Unix ns when the marks were passed
	done             atomic.Int64
	allDone          chan struct{} // closed when deleted reaches n

	mu  sync.Mutex
	ops map[string]int
}

func newTally(n int64) *tally {
	return &tally{n: n, loCount: n / 20, hiCount: n - n/20, allDone: make(chan struct{}), ops: map[string]int{}}
}

// addTo installs the tally in an SQS client's middleware: requests are
// counted per attempt (after the retry middleware), confirmed deletes and
// received messages per operation.
func (t *tally) addTo(stack *middleware.Stack) error {
	count := middleware.FinalizeMiddlewareFunc("sqsbenchCountRequests",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			op := middleware.GetOperationName(ctx)
			t.mu.Lock()
			t.ops[op]++
			t.mu.Unlock()
			return next.HandleFinalize(ctx, in)
		})
	if err := stack.Finalize.Add(count, middleware.After); err != nil {
		return fmt.Errorf("adding the request counter: %w", err)
	}
	deletes := middleware.InitializeMiddlewareFunc("sqsbenchCountDeletes",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if err == nil {
				switch r := out.Result.(type) {
				case *sqs.DeleteMessageBatchOutput:
					t.add(int64(len(r.Successful)))
				case *sqs.DeleteMessageOutput:
					t.add(1)
				case *sqs.ReceiveMessageOutput:
					if len(r.Messages) > 0 {
						t.received.Add(int64(len(r.Messages)))
						t.nonempty.Add(1)
					}
				}
			}
			return out, md, err
		})
	if err := stack.Initialize.Add(deletes, middleware.After); err != nil {
		return fmt.Errorf("adding the delete counter: %w", err)
	}
	return nil
}

func (t *tally) add(k int64) {
	if k == 0 {
		return
	}
	d := t.deleted.Add(k)
	now := time.Now().UnixNano()
	t.first.CompareAndSwap(0, now)
	if d >= t.loCount {
		t.lo.CompareAndSwap(0, now)
	}
	if d >= t.hiCount {
		t.hi.CompareAndSwap(0, now)
	}
	if d >= t.n && t.done.CompareAndSwap(0, now) {
		close(t.allDone)
	}
}

func (t *tally) requests() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.ops))
	for k, v := range t.ops {
		out[k] = v
	}
	return out
}

// rawLoop is the ceiling: receive ten, delete them in one batch, repeat.
func rawLoop(ctx context.Context, c *sqs.Client, s settings, t *tally) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// stop is closed when no further receive is to start: once the last
	// delete landed. Unless the receives under way are left to end, they
	// are cancelled then.
	stop := make(chan struct{})
	go func() { // owned by rawLoop: ends when the last delete lands or rawLoop returns
		select {
		case <-t.allDone:
			if !s.letEnd {
				cancel() // the receives still waiting
			}
			close(stop)
		case <-ctx.Done():
		}
	}()
	wait := int32(s.worker.WaitTime / time.Second)
	var sysAttrs []types.MessageSystemAttributeName
	var msgAttrs []string
	if s.attributes {
		sysAttrs, msgAttrs = []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, []string{"All"}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*s.goroutines)
	fail := func(err error) {
		errs <- err
		cancel()
	}
	// deleteBatch deletes msgs in one call. Not with ctx: the last deletes
	// must land even once the receives are cancelled.
	deleteBatch := func(msgs []types.Message) bool {
		in := &sqs.DeleteMessageBatchInput{QueueUrl: &s.queueURL}
		for i, m := range msgs {
			in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
		}
		dout, err := c.DeleteMessageBatch(context.WithoutCancel(ctx), in)
		if err == nil && len(dout.Failed) > 0 {
			err = fmt.Errorf("%d entries failed, first %s", len(dout.Failed), aws.ToString(dout.Failed[0].Message))
		}
		if err != nil {
			fail(fmt.Errorf("delete: %w", err))
			return false
		}
		return true
	}
	// With -raw-deletes-beside, the receiving goroutines hand their batches
	// to as many deleting ones, which end once the receivers have.
	var batches chan []types.Message
	var deleters sync.WaitGroup
	if s.split {
		batches = make(chan []types.Message, s.goroutines)
		for range s.goroutines {
			deleters.Go(func() {
				for b := range batches {
					if !deleteBatch(b) {
						for range batches { // let the receivers end
						}
						return
					}
				}
			})
		}
	}
	for range s.goroutines {
		wg.Go(func() {
			for ctx.Err() == nil && !closed(stop) {
				out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &s.queueURL, MaxNumberOfMessages: 10, WaitTimeSeconds: wait,
					MessageSystemAttributeNames: sysAttrs, MessageAttributeNames: msgAttrs})
				if err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("receive: %w", err))
					}
					return
				}
				if len(out.Messages) == 0 {
					continue
				}
				if batches != nil {
					batches <- out.Messages
				} else if !deleteBatch(out.Messages) {
					return
				}
			}
		})
	}
	wg.Wait()
	if batches != nil {
		close(batches)
		deleters.Wait()
	}
	close(errs)
	return errors.Join(drain(errs)...)
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func drain(errs <-chan error) []error {
	var out []error
	for err := range errs {
		out = append(out, err)
	}
	return out
}

func runWorker(ctx context.Context, c *sqs.Client, s settings, t *tally) (Report, error) {
	cfg := s.worker
	cfg.QueueURL = s.queueURL
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := worker.New(c, cfg)
	if err != nil {
		return Report{}, fmt.Errorf("worker.New: %w", err)
	}
	h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil })
	if s.sleep > 0 {
		h = func(ctx context.Context, _ *sqsworker.Message) error {
			tm := time.NewTimer(s.sleep)
			defer tm.Stop()
			select {
			case <-tm.C:
				return nil
			case <-ctx.Done():
				return fmt.Errorf("handler cut short: %w", context.Cause(ctx))
			}
		}
	}
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx, h) }() // owned by runWorker: it waits for Run below
	select {
	case <-t.allDone:
	case err := <-ran:
		if err == nil {
			err = errors.New("no error")
		}
		return Report{}, fmt.Errorf("worker stopped before the last delete: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	serr := w.Shutdown(sctx)
	rerr := <-ran
	if serr != nil || rerr != nil {
		return Report{}, fmt.Errorf("shutdown: %w", errors.Join(serr, rerr))
	}
	st := w.Stats()
	return Report{Deleted: st.Deleted, Extended: st.Extensions}, nil
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return nil
}

// peakRSS returns the process's VmHWM in KiB.
func peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("peak RSS: %w", err)
			}
			return kb, nil
		}
	}
	return 0, errors.New("peak RSS: no VmHWM in /proc/self/status")
}

// gcStats reads the collector's figures from runtime/metrics.
func gcStats() GCStats {
	samples := []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/allocs:bytes"},
		{Name: "/gc/scan/heap:bytes"},
		{Name: "/gc/scan/stack:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	metrics.Read(samples)
	v := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return samples[i].Value.Uint64()
	}
	return GCStats{Cycles: v(0), Allocated: v(1), HeapScan: v(2), StackScan: v(3), Goroutines: v(4)}
}

package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/worker"
)

// BenchmarkSoak runs a worker over a million messages with a no-op handler,
// 80 handlers and the visibility heartbeat on (the default), on the in-memory
// SQS, and reports the heap in use (after a garbage collection) once 100k
// and once 1M messages were deleted, and the time per message. A worker's
// heap must not grow with the messages it has handled. Run with
// `go test -run '^$' -bench Soak -benchtime 1x ./worker`.
func BenchmarkSoak(b *testing.B) {
	const total = 1_000_000
	for range b.N {
		r := soak(b, total, []int{100_000, total})
		b.ReportMetric(float64(r.heap[0])/(1<<20), "MB-heap-at-100k")
		b.ReportMetric(float64(r.heap[1])/(1<<20), "MB-heap-at-1M")
		b.ReportMetric(float64(r.took.Microseconds())/total, "µs/msg")
	}
}

// TestSoakHeapFlat is BenchmarkSoak at a scale that fits the race detector:
// the heap in use must not grow by 5 MB between 10k and 100k messages, as it
// would if the worker kept 60 bytes of each (the samples vary by about a
// megabyte either way).
func TestSoakHeapFlat(t *testing.T) {
	const first, total = 10_000, 100_000
	const bound = 5 << 20
	if testing.Short() {
		t.Skip("soak: not in -short")
	}
	r := soak(t, total, []int{first, total})
	grew := int64(r.heap[1]) - int64(r.heap[0])
	t.Logf("heap in use %.1f MB at %d messages, %.1f MB at %d: %+.1f bytes per message",
		float64(r.heap[0])/(1<<20), first, float64(r.heap[1])/(1<<20), total, float64(grew)/(total-first))
	if grew > bound {
		t.Errorf("heap in use grew by %.1f MB (%.0f bytes per message) over %d messages, want less than %d MB: the worker keeps something of every message",
			float64(grew)/(1<<20), float64(grew)/(total-first), total-first, bound>>20)
	}
}

// soakResult is what soak measured: the heap in use at each sample point,
// and the time from the start of Run to the last message's delete.
type soakResult struct {
	heap []uint64
	took time.Duration
}

// soak runs a worker until total messages were deleted, and samples the heap
// in use as soon as each count of at was.
func soak(tb testing.TB, total int, at []int) soakResult {
	tb.Helper()
	q := newRotatingQueue(1000)
	w, err := worker.New(q, worker.Config{
		QueueURL: q.url, Concurrency: 80, WaitTime: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, stopProducer := context.WithCancel(context.Background())
	var producer sync.WaitGroup
	// Messages go on arriving after the last sample, so that every sample
	// is taken under the same load.
	producer.Go(func() { q.produce(ctx, total+10_000, 500) })
	defer func() {
		stopProducer()
		producer.Wait()
	}()

	if b, ok := tb.(*testing.B); ok {
		b.ResetTimer()
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		done <- w.Run(context.Background(), sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { return nil }))
	}()
	var r soakResult
	for _, n := range at {
		for w.Stats().Deleted < int64(n) {
			select {
			case err := <-done:
				tb.Fatalf("Run returned %v after %d messages", err, w.Stats().Deleted)
			case <-time.After(time.Millisecond):
			}
		}
		if n == total {
			r.took = time.Since(start)
		}
		r.heap = append(r.heap, heapInUse())
	}
	if b, ok := tb.(*testing.B); ok {
		b.StopTimer()
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Shutdown(sctx); err != nil {
		tb.Fatal(err)
	}
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	if s := w.Stats(); s.Deleted+s.Released != s.Received || s.Failed != 0 || s.AckFailures != 0 || s.LeasesLost != 0 {
		tb.Errorf("stats %+v: want every message received deleted or released at shutdown, and no failure", s)
	}
	return r
}

// heapInUse is the heap in use after a garbage collection: the least of
// three, as the worker goes on allocating meanwhile.
func heapInUse() uint64 {
	var least uint64
	for i := range 3 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if i == 0 || ms.HeapInuse < least {
			least = ms.HeapInuse
		}
	}
	return least
}

// rotatingQueue is one queue of an sqstest.Fake as the worker sees it, whose
// messages live in a succession of other queues of the Fake, generations of
// genSize messages: the Fake remembers every message it deleted (SQS
// accepts a second delete of a message), so one queue would keep a million
// of them. Once a generation is drained the next one takes the receives, and
// the drained one is deleted. Receipt handles carry their generation.
//
// GetQueueAttributes and GetQueueUrl go to the Fake's queue at url itself,
// which stays empty.
type rotatingQueue struct {
	*sqstest.Fake
	url     string
	genSize int

	mu      sync.Mutex
	gens    map[int]*generation // by number, until drained
	cur     *generation         // receives go here
	changed chan struct{}       // closed and replaced when cur changes or gets messages
}

// generation is one of a rotatingQueue's queues.
type generation struct {
	n         int
	url       string
	prefix    string // of the receipt handles it hands out
	sent      int
	receiving int // receives under way
}

func newRotatingQueue(genSize int) *rotatingQueue {
	q := &rotatingQueue{Fake: sqstest.NewFake(), genSize: genSize, gens: map[int]*generation{}, changed: make(chan struct{})}
	q.url = q.CreateQueue("soak", map[string]string{"VisibilityTimeout": "30"})
	q.cur = q.newGeneration(0)
	return q
}

func (q *rotatingQueue) newGeneration(n int) *generation {
	g := &generation{n: n, url: q.CreateQueue("soak-"+strconv.Itoa(n), map[string]string{"VisibilityTimeout": "30"}), prefix: strconv.Itoa(n) + "|"}
	q.gens[n] = g
	return g
}

// produce keeps the current generation holding about level messages until
// total were sent or ctx ends, moves the receives to the next generation once
// one has received its genSize messages, and deletes the drained ones.
func (q *rotatingQueue) produce(ctx context.Context, total, level int) {
	sent := 0
	for ctx.Err() == nil {
		q.mu.Lock()
		g := q.cur
		q.mu.Unlock()
		visible, inFlight, _ := q.Depth(g.url)
		switch n := min(level-visible-inFlight, q.genSize-g.sent, total-sent); {
		case n > 0:
			for range n {
				q.Send(g.url, `{"job":1}`)
			}
			sent += n
			q.mu.Lock()
			g.sent += n
			q.notify()
			q.mu.Unlock()
		case g.sent == q.genSize && visible == 0 && sent < total:
			q.mu.Lock()
			q.cur = q.newGeneration(g.n + 1)
			q.notify()
			q.mu.Unlock()
		}
		q.dropDrained()
		time.Sleep(50 * time.Microsecond)
	}
}

// notify wakes the receives waiting for messages. q.mu is held.
func (q *rotatingQueue) notify() {
	close(q.changed)
	q.changed = make(chan struct{})
}

// dropDrained deletes the generations before the current one that hold no
// message and no receive.
func (q *rotatingQueue) dropDrained() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for n, g := range q.gens {
		if g == q.cur || g.receiving > 0 {
			continue
		}
		if visible, inFlight, delayed := q.Depth(g.url); visible+inFlight+delayed == 0 {
			q.DeleteQueue(g.url)
			delete(q.gens, n)
		}
	}
}

// ReceiveMessage receives from the current generation, waiting up to the
// input's WaitTimeSeconds for it to get messages.
func (q *rotatingQueue) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	var wait <-chan time.Time
	for {
		q.mu.Lock()
		g, changed := q.cur, q.changed
		g.receiving++
		q.mu.Unlock()
		gin := *in
		gin.QueueUrl, gin.WaitTimeSeconds = &g.url, 0
		out, err := q.Fake.ReceiveMessage(ctx, &gin, opts...)
		q.mu.Lock()
		g.receiving--
		q.mu.Unlock()
		if err != nil || len(out.Messages) > 0 || in.WaitTimeSeconds == 0 {
			if err == nil {
				for i := range out.Messages {
					h := g.prefix + *out.Messages[i].ReceiptHandle
					out.Messages[i].ReceiptHandle = &h
				}
			}
			return out, err
		}
		if wait == nil {
			t := time.NewTimer(time.Duration(in.WaitTimeSeconds) * time.Second)
			defer t.Stop()
			wait = t.C
		}
		select {
		case <-changed:
		case <-wait:
			return out, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("operation error SQS: ReceiveMessage: %w", ctx.Err())
		}
	}
}

// route is the entries of a batch call that go to one generation: their
// indexes in the call and their receipt handles there.
type route struct {
	url     string
	index   []int
	handles []string
}

// routes splits a batch call's receipt handles by generation, in order. A
// handle of a generation deleted, or of none, goes to a queue that does not
// exist.
func (q *rotatingQueue) routes(handles []*string) []*route {
	q.mu.Lock()
	defer q.mu.Unlock()
	var rs []*route
	byGen := map[string]*route{}
	for i, h := range handles {
		prefix, handle, _ := strings.Cut(*h, "|")
		r := byGen[prefix]
		if r == nil {
			r = &route{url: sqstest.QueueURL("soak-gone")}
			if n, err := strconv.Atoi(prefix); err == nil && q.gens[n] != nil {
				r.url = q.gens[n].url
			}
			byGen[prefix] = r
			rs = append(rs, r)
		}
		r.index = append(r.index, i)
		r.handles = append(r.handles, handle)
	}
	return rs
}

// DeleteMessageBatch deletes each entry from its generation.
func (q *rotatingQueue) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	handles := make([]*string, len(in.Entries))
	for i := range in.Entries {
		handles[i] = in.Entries[i].ReceiptHandle
	}
	out := &sqs.DeleteMessageBatchOutput{}
	for _, r := range q.routes(handles) {
		gin := &sqs.DeleteMessageBatchInput{QueueUrl: &r.url}
		for j, i := range r.index {
			gin.Entries = append(gin.Entries, types.DeleteMessageBatchRequestEntry{Id: in.Entries[i].Id, ReceiptHandle: &r.handles[j]})
		}
		gout, err := q.Fake.DeleteMessageBatch(ctx, gin, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful = append(out.Successful, gout.Successful...)
		out.Failed = append(out.Failed, gout.Failed...)
	}
	return out, nil
}

// ChangeMessageVisibilityBatch changes each entry's visibility in its
// generation.
func (q *rotatingQueue) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	handles := make([]*string, len(in.Entries))
	for i := range in.Entries {
		handles[i] = in.Entries[i].ReceiptHandle
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, r := range q.routes(handles) {
		gin := &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: &r.url}
		for j, i := range r.index {
			e := in.Entries[i]
			e.ReceiptHandle = &r.handles[j]
			gin.Entries = append(gin.Entries, e)
		}
		gout, err := q.Fake.ChangeMessageVisibilityBatch(ctx, gin, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful = append(out.Successful, gout.Successful...)
		out.Failed = append(out.Failed, gout.Failed...)
	}
	return out, nil
}

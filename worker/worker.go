package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go/logging"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// API is the part of the SQS client a Worker calls. *sqs.Client implements
// it.
type API interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	ackbatch.API
	queue.API
	queue.Sender
}

var _ API = (*sqs.Client)(nil)

// Errors a Worker returns or puts in handler contexts.
var (
	// ErrRunning is returned by Run when the worker is already running.
	ErrRunning = errors.New("worker: already running")
	// ErrClosed is returned by Run after the worker was shut down: a
	// Worker runs once.
	ErrClosed = errors.New("worker: closed")
	// ErrHandlerTimeout is the cause of a handler context cancelled by
	// Config.HandlerTimeout.
	ErrHandlerTimeout = errors.New("worker: handler timeout")
	// ErrShutdown is the cause of a handler context cancelled because the
	// shutdown deadline passed. Its message is released for another
	// consumer at once.
	ErrShutdown = errors.New("worker: shutdown deadline passed")
)

// receive-loop backoff after an error.
const (
	receiveBackoffBase = 200 * time.Millisecond
	receiveBackoffCap  = 10 * time.Second
	// fillWait is how long a receive loop waits for more free handler slots
	// before receiving fewer than MaxMessages.
	fillWait = 5 * time.Millisecond
	// ackFlushGrace is how long pending acknowledgements may still be sent
	// after the shutdown deadline.
	ackFlushGrace = 5 * time.Second
)

// Worker consumes one SQS queue, running a handler for each message. Create
// one with New, start it with Run and stop it with Shutdown or by cancelling
// Run's context.
type Worker struct {
	api   API
	cfg   Config
	log   *slog.Logger
	stats counters

	ext      atomic.Pointer[visibility.Extender] // the running heartbeat, for HeartbeatStats
	ready    atomic.Bool                         // see Ready
	mu       sync.Mutex
	state    int // idle, running, closed
	shutdown chan context.Context
	done     chan struct{}
}

const (
	idle = iota
	running
	closed
)

// New validates cfg and returns a Worker. It makes no AWS call: the queue is
// read when Run starts.
func New(api API, cfg Config) (*Worker, error) {
	err := cfg.validate()
	if api == nil {
		err = errors.Join(err, errors.New("worker: nil SQS client"))
	}
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	return &Worker{
		api:      api,
		cfg:      cfg,
		log:      cfg.Logger.With("queue", cfg.QueueURL),
		shutdown: make(chan context.Context, 1),
		done:     make(chan struct{}),
	}, nil
}

// Run receives messages and hands each to h until ctx is cancelled or
// Shutdown is called, then shuts down gracefully (see Shutdown) and returns
// nil. It returns an error at once when the queue cannot be used: it does not
// exist, access is denied, its redrive policy is malformed, or the
// configuration does not fit it. Receive errors that may pass (network,
// throttling, an unreachable endpoint) are retried with capped backoff, for
// ever.
func (w *Worker) Run(ctx context.Context, h sqsworker.Handler) error {
	if h == nil {
		return errors.New("worker: nil handler")
	}
	w.mu.Lock()
	switch w.state {
	case running:
		w.mu.Unlock()
		return ErrRunning
	case closed:
		w.mu.Unlock()
		return ErrClosed
	}
	w.state = running
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.state = closed
		w.mu.Unlock()
		close(w.done)
	}()

	info, err := w.loadQueue(ctx)
	if err != nil {
		if awserr.IsCanceled(err) && ctx.Err() != nil {
			return nil
		}
		return err
	}
	r, err := w.newRun(info, h)
	if err != nil {
		return err
	}
	w.ready.Store(true)
	return r.run(ctx)
}

// Shutdown stops the worker gracefully: it starts no new receive, lets those
// under way end (within WaitTime), then releases received-but-unstarted
// messages (visibility 0); it waits for in-flight handlers until ctx ends, then cancels the handlers still running (their
// context's cause is ErrShutdown, and their messages are released), sends the
// pending deletes and visibility changes, and returns. It returns ctx's error
// when ctx ended before all of that was done; Run itself returns only once
// every handler has returned, so a handler that ignores its context holds Run
// up. Shutdown on a worker that is not running closes it.
func (w *Worker) Shutdown(ctx context.Context) error {
	w.mu.Lock()
	switch w.state {
	case idle:
		w.state = closed
		close(w.done)
		w.mu.Unlock()
		return nil
	case running:
		select {
		case w.shutdown <- ctx:
		default: // already asked
		}
	}
	w.mu.Unlock()
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Ready reports whether the worker is consuming its queue: Run has read the
// queue's attributes and the shutdown has not started. It suits a readiness
// probe; it is false before Run, while Run waits for an unreachable queue,
// and from the start of the shutdown on.
func (w *Worker) Ready() bool { return w.ready.Load() }

// loadQueue reads the queue, retrying errors that may pass.
func (w *Worker) loadQueue(ctx context.Context) (queue.Info, error) {
	for attempt := 1; ; attempt++ {
		info, err := queue.Load(ctx, w.api, w.cfg.QueueURL)
		switch {
		case err == nil:
			return info, nil
		case awserr.IsFatal(err), errors.Is(err, queue.ErrInvalid), ctx.Err() != nil:
			return info, fmt.Errorf("worker: %w", err)
		}
		d := jittered(attempt)
		w.log.Warn("queue unreachable, retrying", "error", err, "retry_in", d)
		if !sleep(ctx, d) {
			return info, ctx.Err()
		}
	}
}

// quietReceive silences the SDK's own logger for receives: cancelling a long
// poll at shutdown makes it warn about the unread response body, and receive
// errors are logged by the worker itself.
func quietReceive(o *sqs.Options) { o.Logger = logging.Nop{} }

// jittered is the receive-loop backoff after the given number of failures.
func jittered(failures int) time.Duration {
	d := receiveBackoffBase
	for i := 1; i < failures && d < receiveBackoffCap; i++ {
		d *= 2
	}
	d = min(d, receiveBackoffCap)
	return d/2 + rand.N(d/2+1)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Stats is a snapshot of a Worker's counters.
type Stats struct {
	Received     int64 // messages received
	Succeeded    int64 // handlers that returned nil
	Failed       int64 // handlers that returned an error or panicked
	Panics       int64 // handlers that panicked (also counted in Failed)
	Retried      int64 // failed messages given a backoff or RetryAfter delay
	Postponed    int64 // messages put off by RetryAfter with a nil error (not failures)
	DeadLettered int64 // messages moved to the dead-letter queue
	Released     int64 // messages made visible at once, unprocessed (shutdown, FIFO)
	Deleted      int64 // deletes SQS confirmed
	AckFailures  int64 // deletes and visibility changes that failed for good
	MoveFailures int64 // dead-letter moves that failed
	InFlight     int64 // handlers running now
	Extensions   int64 // visibility extensions made by the heartbeat
	LeasesLost   int64 // messages left unacknowledged because their lease was lost
}

type counters struct {
	received, succeeded, failed, panics, retried, postponed, deadLettered, released,
	deleted, ackFailures, moveFailures, inFlight, extensions, leasesLost atomic.Int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	c := &w.stats
	return Stats{
		Received: c.received.Load(), Succeeded: c.succeeded.Load(), Failed: c.failed.Load(),
		Panics: c.panics.Load(), Retried: c.retried.Load(), Postponed: c.postponed.Load(), DeadLettered: c.deadLettered.Load(),
		Released: c.released.Load(), Deleted: c.deleted.Load(), AckFailures: c.ackFailures.Load(),
		MoveFailures: c.moveFailures.Load(), InFlight: c.inFlight.Load(),
		Extensions: c.extensions.Load(), LeasesLost: c.leasesLost.Load(),
	}
}

// HeartbeatStats returns the counters of the visibility heartbeat: rounds,
// batch calls, extensions, lost and expired leases. They are zero before Run
// starts and with Config.DisableHeartbeat.
func (w *Worker) HeartbeatStats() visibility.Stats {
	if e := w.ext.Load(); e != nil {
		return e.Stats()
	}
	return visibility.Stats{}
}

// run is one Run of a Worker.
type run struct {
	w      *Worker
	cfg    Config
	h      sqsworker.Handler
	info   queue.Info
	acks   *ackbatch.Batcher
	mover  *queue.Mover
	ext    *visibility.Extender // nil with heartbeats off
	policy outcome.Policy
	rec    metrics.Recorder // metrics.Nop when none is configured
	dq     metrics.Dims     // the queue's dimensions
	dqh    metrics.Dims     // the queue's and the handler's
	log    *slog.Logger
	vis    time.Duration // visibility timeout in effect; 0 if none
	margin time.Duration // kept free at the end of a lease to send the ack

	slots chan struct{} // one token per free handler slot

	pollCtx    context.Context // cancelled when receiving stops
	stopPoll   context.CancelFunc
	pollsDone  chan struct{}  // closed once no receive is under way after stopping
	reporter   sync.WaitGroup // the metrics reporter
	stopReport context.CancelFunc
	handlerCtx context.Context // cancelled at the shutdown deadline
	hardStop   context.CancelCauseFunc
	pollers    sync.WaitGroup
	handlers   sync.WaitGroup
	beats      sync.WaitGroup // the extender's rounds
	stopBeats  context.CancelFunc
	fatal      chan error
}

func (w *Worker) newRun(info queue.Info, h sqsworker.Handler) (*run, error) {
	cfg := w.cfg
	if cfg.DeadLetterQueueURL == "" {
		cfg.DeadLetterQueueURL = info.DeadLetterURL
	}
	switch {
	case cfg.MaxReceiveCount == 0:
		cfg.MaxReceiveCount = info.MaxReceiveCount
	case info.MaxReceiveCount > 0 && cfg.MaxReceiveCount > info.MaxReceiveCount:
		return nil, fmt.Errorf("worker: Config.MaxReceiveCount %d is above the redrive policy's maxReceiveCount %d of queue %s: SQS would dead-letter the message first",
			cfg.MaxReceiveCount, info.MaxReceiveCount, info.URL)
	}
	if cfg.MaxReceiveCount > 0 && cfg.DeadLetterQueueURL == "" {
		return nil, fmt.Errorf("worker: Config.MaxReceiveCount is %d but queue %s has no dead-letter queue: set Config.DeadLetterQueueURL or a redrive policy", cfg.MaxReceiveCount, info.URL)
	}
	vis := cfg.VisibilityTimeout
	if vis == 0 {
		vis = info.VisibilityTimeout
	}
	r := &run{
		w: w, cfg: cfg, h: h, info: info, log: w.log, vis: vis,
		margin: cfg.AckInterval + min(vis/10, time.Second),
		slots:  make(chan struct{}, cfg.Concurrency),
		fatal:  make(chan error, cfg.Pollers),
	}
	for range cfg.Concurrency {
		r.slots <- struct{}{}
	}
	if !cfg.DisableHeartbeat {
		hb := cfg.Heartbeat
		hb.QueueURL, hb.VisibilityTimeout = info.URL, vis
		if hb.Logger == nil {
			hb.Logger = cfg.Logger
		}
		onExtend := hb.OnExtend
		hb.OnExtend = func(m *sqsworker.Message, until time.Time) {
			w.stats.extensions.Add(1)
			r.rec.Add(metrics.VisibilityExtensions, 1, r.dq)
			if onExtend != nil {
				onExtend(m, until)
			}
		}
		ext, err := visibility.New(w.api, hb)
		if err != nil {
			return nil, fmt.Errorf("worker: Config.Heartbeat (set DisableHeartbeat to run without): %w", err)
		}
		r.ext = ext
		w.ext.Store(ext)
	}
	r.rec = cfg.Metrics
	if r.rec == nil {
		r.rec = metrics.Nop{}
	}
	r.dq = metrics.Dims{Queue: metrics.QueueName(info.URL)}
	r.dqh = metrics.Dims{Queue: r.dq.Queue, Handler: cfg.HandlerName}
	r.policy = outcome.Policy{Backoff: cfg.Backoff, MaxReceiveCount: cfg.MaxReceiveCount, HasDLQ: cfg.DeadLetterQueueURL != ""}
	r.mover = &queue.Mover{API: w.api, URL: cfg.DeadLetterQueueURL, FIFO: queue.IsFIFOURL(cfg.DeadLetterQueueURL), Host: cfg.Host}
	r.acks = ackbatch.New(w.api, ackbatch.Config{
		QueueURL:    info.URL,
		Interval:    cfg.AckInterval,
		MaxInFlight: max(4, cfg.Pollers),
		Result:      r.ackResult,
	})
	return r, nil
}

func (r *run) ackResult(kind ackbatch.Kind, e ackbatch.Entry, err error) {
	switch {
	case err != nil:
		r.w.stats.ackFailures.Add(1)
		r.log.Error("acknowledgement failed; the message will come back after its visibility timeout",
			"op", kind.String(), "message_id", e.MessageID, "error", err)
	case kind == ackbatch.Delete:
		r.w.stats.deleted.Add(1)
	}
}

func (r *run) run(ctx context.Context) error {
	r.pollCtx, r.stopPoll = context.WithCancel(context.WithoutCancel(ctx))
	r.pollsDone = make(chan struct{})
	r.handlerCtx, r.hardStop = context.WithCancelCause(context.WithoutCancel(ctx))
	defer r.hardStop(nil)
	defer r.stopPoll()

	r.log.Info("worker started", "concurrency", r.cfg.Concurrency, "pollers", r.cfg.Pollers,
		"fifo", r.info.FIFO, "dead_letter_queue", r.cfg.DeadLetterQueueURL, "max_receive_count", r.cfg.MaxReceiveCount,
		"visibility_timeout", r.vis, "heartbeat", r.ext != nil)
	if r.ext != nil {
		var bctx context.Context
		bctx, r.stopBeats = context.WithCancel(context.WithoutCancel(ctx))
		r.beats.Go(func() { _ = r.ext.Run(bctx) })
	}
	if r.cfg.Metrics != nil {
		var rctx context.Context
		rctx, r.stopReport = context.WithCancel(context.WithoutCancel(ctx))
		r.reporter.Go(func() { r.report(rctx) })
	}
	for range r.cfg.Pollers {
		r.pollers.Go(r.poll)
	}

	var fatal error
	var sctx context.Context
	select {
	case <-ctx.Done():
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
		defer cancel()
	case sctx = <-r.w.shutdown:
	case fatal = <-r.fatal:
		var cancel context.CancelFunc
		sctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
		defer cancel()
	}
	r.stop(sctx)
	if fatal != nil {
		r.log.Error("worker stopped", "error", fatal)
		return fatal
	}
	r.log.Info("worker stopped")
	return nil
}

// stop shuts the run down; see Worker.Shutdown. Receives under way are not
// cut short: SQS may already have handed them messages, which a cancelled
// request would leave invisible for a whole visibility timeout. They end
// within WaitTime, and what they bring is released at once; only at the
// deadline are they cancelled, with the handlers.
func (r *run) stop(ctx context.Context) {
	r.w.ready.Store(false)
	r.stopPoll()
	done := make(chan struct{})
	go func() { r.pollers.Wait(); close(r.pollsDone); r.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.log.Warn("shutdown deadline passed; cancelling running handlers", "in_flight", r.w.stats.inFlight.Load())
		r.hardStop(ErrShutdown)
		<-done
	}
	if r.ext != nil {
		r.stopBeats()
		r.beats.Wait()
	}
	if r.stopReport != nil {
		r.stopReport()
		r.reporter.Wait()
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ackFlushGrace)
	defer cancel()
	if ctx.Err() == nil {
		fctx = ctx
	}
	if err := r.acks.Close(fctx); err != nil {
		r.log.Error("pending acknowledgements not sent; their messages will come back after their visibility timeout", "error", err)
	}
}

// report polls the depth of the queue and its dead-letter queue and flushes
// the metrics every MetricsInterval, and flushes them once more at the end.
func (r *run) report(ctx context.Context) {
	flusher, _ := r.cfg.Metrics.(interface{ Flush() error })
	tick := time.NewTicker(r.cfg.MetricsInterval)
	defer tick.Stop()
	for {
		if !r.cfg.DisableDepth {
			r.pollDepth(ctx)
		}
		if flusher != nil {
			if err := flusher.Flush(); err != nil {
				r.log.Warn("flushing metrics failed", "error", err)
			}
		}
		select {
		case <-ctx.Done():
			if flusher != nil {
				_ = flusher.Flush()
			}
			return
		case <-tick.C:
		}
	}
}

// pollDepth sets the depth gauges of the queue and of its dead-letter queue.
func (r *run) pollDepth(ctx context.Context) {
	read := func(url string) (map[string]string, error) {
		out, err := r.w.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		}})
		if err != nil {
			return nil, err
		}
		return out.Attributes, nil
	}
	num := func(a map[string]string, k string) float64 {
		n, _ := strconv.ParseFloat(a[k], 64)
		return n
	}
	if a, err := read(r.info.URL); err == nil {
		r.rec.Set(metrics.QueueVisible, num(a, "ApproximateNumberOfMessages"), r.dq)
		r.rec.Set(metrics.QueueInFlight, num(a, "ApproximateNumberOfMessagesNotVisible"), r.dq)
		r.rec.Set(metrics.QueueDelayed, num(a, "ApproximateNumberOfMessagesDelayed"), r.dq)
	} else if ctx.Err() == nil {
		r.log.Warn("reading the queue's depth failed", "error", err)
	}
	if r.cfg.DeadLetterQueueURL == "" {
		return
	}
	if a, err := read(r.cfg.DeadLetterQueueURL); err == nil {
		r.rec.Set(metrics.DeadLetterQueueVisible, num(a, "ApproximateNumberOfMessages"), r.dq)
	} else if ctx.Err() == nil {
		r.log.Warn("reading the dead-letter queue's depth failed", "error", err)
	}
}

// poll is one receive loop.
func (r *run) poll() {
	in := &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(r.info.URL),
		WaitTimeSeconds:             int32(r.cfg.WaitTime / time.Second),
		VisibilityTimeout:           int32(r.cfg.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	}
	failures := 0
	for {
		n := r.acquire(r.cfg.MaxMessages)
		if n == 0 {
			return
		}
		if r.pollCtx.Err() != nil {
			r.releaseSlots(n)
			return
		}
		in.MaxNumberOfMessages = int32(n)
		// handlerCtx, not pollCtx: a receive under way at shutdown goes on.
		out, err := r.w.api.ReceiveMessage(r.handlerCtx, in, quietReceive)
		if err != nil {
			r.releaseSlots(n)
			if r.pollCtx.Err() != nil {
				return
			}
			if awserr.IsFatal(err) {
				r.fatal <- fmt.Errorf("worker: receiving from %s: %w", r.info.URL, err)
				return
			}
			failures++
			d := jittered(failures)
			r.log.Warn("receive failed, retrying", "error", err, "retry_in", d, "failures", failures)
			if !sleep(r.pollCtx, d) {
				return
			}
			continue
		}
		if failures > 0 {
			r.log.Info("receiving again", "after_failures", failures)
			failures = 0
		}
		r.releaseSlots(n - len(out.Messages))
		if len(out.Messages) > 0 {
			r.dispatch(out.Messages)
		}
	}
}

// acquire waits for one free handler slot, then takes up to want-1 more,
// waiting at most fillWait for them: under load, a few milliseconds turn many
// small receives into few full ones. It returns 0 when receiving stops.
func (r *run) acquire(want int) int {
	select {
	case <-r.slots:
	case <-r.pollCtx.Done():
		return 0
	}
	n := 1
	t := time.NewTimer(fillWait)
	defer t.Stop()
	for n < want {
		select {
		case <-r.slots:
			n++
		case <-t.C:
			return n
		case <-r.pollCtx.Done():
			return n
		}
	}
	return n
}

func (r *run) releaseSlots(n int) {
	for range n {
		r.slots <- struct{}{}
	}
}

// delivery is a received message, when it was received, and its lease.
type delivery struct {
	msg        *sqsworker.Message
	receivedAt time.Time
	// ctx is the parent of the handler's context: with heartbeats on it is
	// cancelled when the lease is lost.
	ctx   context.Context
	lease *visibility.Lease // nil with heartbeats off
}

// settle stops extending the message and reports whether its lease still
// holds, so that it may be acknowledged.
func (d delivery) settle() bool {
	if d.lease == nil {
		return true
	}
	d.lease.Release()
	return !errors.Is(context.Cause(d.ctx), visibility.ErrLeaseLost)
}

// dispatch starts the handlers of a received batch. Each message holds one
// handler slot until it is settled.
func (r *run) dispatch(msgs []types.Message) {
	now := time.Now()
	r.w.stats.received.Add(int64(len(msgs)))
	r.rec.Add(metrics.MessagesReceived, int64(len(msgs)), r.dq)
	ds := make([]delivery, len(msgs))
	for i := range msgs {
		d := delivery{msg: sqsmsg.FromSDK(r.info.URL, &msgs[i]), receivedAt: now, ctx: r.handlerCtx}
		if r.ext != nil {
			d.ctx, d.lease = r.ext.Track(r.handlerCtx, d.msg, now)
		}
		ds[i] = d
	}
	if r.pollCtx.Err() != nil { // received while stopping
		r.releaseLater(ds)
		return
	}
	if !r.info.FIFO {
		for _, d := range ds {
			r.handlers.Go(func() { r.process(d) })
		}
		return
	}
	// FIFO: one goroutine per message group, in order.
	for _, group := range groupByID(ds) {
		r.handlers.Go(func() {
			for i, d := range group {
				// Messages waiting behind others hold a lease that runs
				// from the receive. Without heartbeats, release them when
				// half of it is gone; with heartbeats, when it was lost.
				late := r.ext == nil && i > 0 && r.vis > 0 && time.Since(d.receivedAt) > r.vis/2
				if r.pollCtx.Err() != nil {
					r.releaseLater(group[i:])
					return
				}
				if late || d.ctx.Err() != nil {
					r.release(group[i:])
					return
				}
				if !r.process(d) {
					r.release(group[i+1:])
					return
				}
			}
		})
	}
}

// groupByID splits FIFO deliveries by message group, keeping their order.
func groupByID(ds []delivery) [][]delivery {
	var groups [][]delivery
	index := make(map[string]int, len(ds))
	for _, d := range ds {
		i, ok := index[d.msg.GroupID]
		if !ok {
			i = len(groups)
			index[d.msg.GroupID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], d)
	}
	return groups
}

// releaseLater releases messages once no receive of this worker is under
// way, so that its own last long polls do not take them again (which would
// count as one more receive). It runs only while stopping, when that takes
// at most WaitTime.
func (r *run) releaseLater(ds []delivery) {
	r.handlers.Go(func() {
		<-r.pollsDone
		r.release(ds)
	})
}

// release makes unprocessed messages visible again at once and frees their
// handler slots. Messages whose lease was lost are left alone.
func (r *run) release(ds []delivery) {
	for _, d := range ds {
		if d.settle() {
			r.w.stats.released.Add(1)
			r.changeVisibility(d, 0)
		}
	}
	r.releaseSlots(len(ds))
}

// process runs the handler on one message, settles the outcome and frees
// the message's handler slot. It reports whether the handler succeeded.
func (r *run) process(d delivery) bool {
	defer r.releaseSlots(1)
	m := d.msg
	r.w.stats.inFlight.Add(1)
	ctx, cancel := d.ctx, context.CancelFunc(func() {})
	switch {
	case r.cfg.HandlerTimeout > 0:
		ctx, cancel = context.WithTimeoutCause(ctx, r.cfg.HandlerTimeout, ErrHandlerTimeout)
	case r.ext == nil && r.vis > 0: // the lease, less the time to send the ack
		ctx, cancel = context.WithDeadlineCause(ctx, d.receivedAt.Add(r.vis-r.margin), ErrHandlerTimeout)
	}
	start := time.Now()
	r.rec.Set(metrics.InFlight, float64(r.w.stats.inFlight.Load()), r.dq)
	err := outcome.Call(ctx, r.h, m)
	cancel()
	end := time.Now()
	r.rec.Set(metrics.InFlight, float64(r.w.stats.inFlight.Add(-1)), r.dq)
	r.rec.Observe(metrics.HandlerDuration, end.Sub(start).Seconds(), r.dqh)
	r.rec.Observe(metrics.ReceiveToDoneLatency, end.Sub(d.receivedAt).Seconds(), r.dq)
	if !m.SentAt.IsZero() {
		r.rec.Observe(metrics.EnqueueToDoneLatency, end.Sub(m.SentAt).Seconds(), r.dq)
	}
	if !d.settle() {
		// Another consumer may hold the message now: acknowledging with
		// this receipt handle would fail, or worse, undo its work.
		r.w.stats.leasesLost.Add(1)
		r.rec.Add(metrics.LeasesLost, 1, r.dq)
		r.log.Warn("lease lost while the handler ran; the message is left to SQS and may be handled again",
			"message_id", m.ID, "attempt", m.ReceiveCount, "handler_error", err, "cause", context.Cause(d.ctx))
		return err == nil
	}
	if err == nil {
		r.w.stats.succeeded.Add(1)
		r.rec.Add(metrics.MessagesSucceeded, 1, r.dqh)
		r.delete(d)
		return true
	}
	r.settleFailure(d, err, time.Since(start))
	return false
}

// settleFailure decides what happens to a message whose handler failed.
func (r *run) settleFailure(d delivery, err error, took time.Duration) {
	m := d.msg
	dec := r.policy.Decide(err, m.ReceiveCount)
	if dec.Action == outcome.Postpone {
		r.w.stats.postponed.Add(1)
		r.rec.Add(metrics.MessagesPostponed, 1, r.dq)
		vis := r.changeVisibility(d, dec.Delay)
		r.log.Debug("message postponed", "message_id", m.ID, "attempt", m.ReceiveCount, "retry_in", vis)
		return
	}
	r.w.stats.failed.Add(1)
	class := sqsworker.ErrorClass(err)
	r.rec.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: r.dq.Queue, Handler: r.dqh.Handler, ErrorClass: class})
	log := r.log.With("message_id", m.ID, "attempt", m.ReceiveCount, "error_class", class, "duration", took)
	var p *sqsworker.PanicError
	if errors.As(err, &p) {
		r.w.stats.panics.Add(1)
		log.Error("handler panicked", "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
	if errors.Is(context.Cause(r.handlerCtx), ErrShutdown) {
		log.Warn("handler cancelled by shutdown; releasing message", "error", err)
		r.w.stats.released.Add(1)
		r.changeVisibility(d, 0)
		return
	}
	switch {
	case dec.Action == outcome.DeadLetter:
		if r.deadLetter(d, err, log) {
			return
		}
		if dec.LastAttempt { // left to SQS's redrive policy, without metadata
			r.changeVisibility(d, dec.Delay)
			return
		}
	case dec.Permanent:
		log.Error("permanent failure but the queue has no dead-letter queue; retrying with backoff", "error", err)
	}
	r.w.stats.retried.Add(1)
	r.rec.Add(metrics.MessagesRetried, 1, r.dq)
	vis := r.changeVisibility(d, dec.Delay)
	log.Warn("handler failed; retrying", "error", err, "retry_in", vis)
}

// deadLetter moves the message to the dead-letter queue and deletes it.
func (r *run) deadLetter(d delivery, cause error, log *slog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.handlerCtx), 30*time.Second)
	defer cancel()
	withMeta, err := r.mover.Move(ctx, d.msg, cause)
	if err != nil {
		r.w.stats.moveFailures.Add(1)
		log.Error("moving message to dead-letter queue failed", "error", err)
		return false
	}
	if !withMeta {
		log.Warn("message has too many attributes for failure metadata; dead-lettered without it", "error", cause)
	}
	r.w.stats.deadLettered.Add(1)
	r.rec.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: r.dq.Queue, ErrorClass: sqsworker.ErrorClass(cause)})
	log.Error("message dead-lettered", "error", cause, "dead_letter_queue", r.mover.URL)
	r.delete(d)
	return true
}

func (r *run) delete(d delivery) {
	r.acks.Add(ackbatch.Delete, ackbatch.Entry{
		ReceiptHandle: d.msg.ReceiptHandle,
		MessageID:     d.msg.ID,
	})
}

// changeVisibility makes the message visible again after delay, rounded up
// to whole seconds and kept within SQS's 12 hours from the receive. It
// returns the visibility timeout asked for.
func (r *run) changeVisibility(d delivery, delay time.Duration) time.Duration {
	limit := sqsworker.MaxVisibilityTimeout - time.Since(d.receivedAt) - time.Second
	delay = min(sqsworker.ClampDelay(delay), max(limit, 0))
	delay = (delay + time.Second - 1).Truncate(time.Second)
	r.acks.Add(ackbatch.ChangeVisibility, ackbatch.Entry{
		ReceiptHandle: d.msg.ReceiptHandle,
		MessageID:     d.msg.ID,
		Visibility:    delay,
	})
	return delay
}

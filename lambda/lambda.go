package lambda

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/visibility"
)

// API is the part of the SQS client the adapter calls. *sqs.Client
// implements it.
type API interface {
	queue.API
	queue.Sender
	ackbatch.API
}

var _ API = (*sqs.Client)(nil)

// ErrDeadline is the cause of a handler context cancelled because the
// invocation's deadline is near.
var ErrDeadline = errors.New("lambda: invocation deadline near")

// HandlerFunc is the function Lambda invokes with an SQS event.
type HandlerFunc func(context.Context, events.SQSEvent) (events.SQSEventResponse, error)

// Start runs h as the function's handler; it never returns. An invalid cfg
// is logged and ends the process, which Lambda reports as an init error.
func Start(h sqsworker.Handler, cfg Config) {
	fn, err := NewHandler(h, cfg)
	if err != nil {
		slog.Error("sqsworker lambda: cannot start", "error", err)
		os.Exit(1)
	}
	awslambda.Start(fn)
}

// NewHandler validates cfg and returns the function Lambda invokes for an SQS
// event source mapping with ReportBatchItemFailures, for tests and for
// composition with other handlers. See the package documentation for what it
// does with each record.
func NewHandler(h sqsworker.Handler, cfg Config) (HandlerFunc, error) {
	err := cfg.validate()
	if h == nil {
		err = errors.Join(err, errors.New("lambda: nil handler"))
	}
	if err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		awsCfg, err := config.LoadDefaultConfig(context.Background())
		if err != nil {
			return nil, fmt.Errorf("lambda: loading the AWS configuration: %w", err)
		}
		cfg.Client = sqs.NewFromConfig(awsCfg)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Backoff == nil {
		cfg.Backoff = sqsworker.ExponentialBackoff{}
	}
	if cfg.QueueURL == nil {
		cfg.QueueURL = QueueURLFromARN
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Host == "" {
		cfg.Host = os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	if cfg.HandlerName == "" {
		cfg.HandlerName = os.Getenv("AWS_LAMBDA_FUNCTION_NAME")
	}
	if cfg.HandlerName == "" {
		cfg.HandlerName = "handler"
	}
	rec := cfg.Metrics
	if rec == nil {
		rec = metrics.Nop{}
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	a := &adapter{h: h, cfg: cfg, rec: rec, queues: map[string]*queueState{}}
	return a.invoke, nil
}

type adapter struct {
	h   sqsworker.Handler
	cfg Config
	rec metrics.Recorder

	mu     sync.Mutex
	queues map[string]*queueState // by URL, read once per execution environment
}

// queueState is what the adapter knows of one queue.
type queueState struct {
	dims   metrics.Dims // the queue's name
	info   queue.Info
	policy outcome.Policy
	mover  *queue.Mover
}

// state returns the state of the queue at url, reading it on first use.
func (a *adapter) state(ctx context.Context, url string) (*queueState, error) {
	a.mu.Lock()
	st, ok := a.queues[url]
	a.mu.Unlock()
	if ok {
		return st, nil
	}
	info, err := queue.Load(ctx, a.cfg.Client, url)
	if err != nil {
		return nil, fmt.Errorf("lambda: %w", err)
	}
	dlq, maxReceive := a.cfg.DeadLetterQueueURL, a.cfg.MaxReceiveCount
	if dlq == "" {
		dlq = info.DeadLetterURL
	}
	if maxReceive == 0 {
		maxReceive = info.MaxReceiveCount
	}
	st = &queueState{
		dims:   metrics.Dims{Queue: metrics.QueueName(url)},
		info:   info,
		policy: outcome.Policy{Backoff: a.cfg.Backoff, MaxReceiveCount: maxReceive, HasDLQ: dlq != ""},
		mover:  &queue.Mover{API: a.cfg.Client, URL: dlq, FIFO: queue.IsFIFOURL(dlq), Host: a.cfg.Host},
	}
	a.mu.Lock()
	a.queues[url] = st
	a.mu.Unlock()
	return st, nil
}

// record is one record of an invocation and what became of it.
type record struct {
	msg   *sqsworker.Message
	st    *queueState // nil when the queue is unknown
	ctx   context.Context
	lease *visibility.Lease

	failed     bool          // reported in batchItemFailures
	visibility time.Duration // the visibility to set when failed
	keep       bool          // failed, but leave its visibility alone
}

// invocation is one call of the function.
type invocation struct {
	a        *adapter
	log      *slog.Logger
	stopAt   time.Time // no record starts after
	hctx     context.Context
	sem      chan struct{}
	wg       sync.WaitGroup
	failures []string
}

func (a *adapter) invoke(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	if len(ev.Records) == 0 {
		return resp, nil
	}
	start := time.Now()
	log := a.cfg.Logger
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = log.With("aws_request_id", lc.AwsRequestID)
	}
	recs := make([]*record, len(ev.Records))
	states := map[*queueState]bool{}
	for i := range ev.Records {
		r := &ev.Records[i]
		if r.MessageId == "" {
			return resp, fmt.Errorf("lambda: record %d of the event has no messageId: not an SQS event", i)
		}
		rec := &record{}
		url, err := a.cfg.QueueURL(r.EventSourceARN)
		if err != nil {
			log.Error("record's queue unknown: it can be reported failed but not retried with backoff nor dead-lettered", "message_id", r.MessageId, "error", err)
		} else if rec.st, err = a.state(ctx, url); err != nil {
			return resp, err // nothing ran, nothing is deleted
		} else {
			states[rec.st] = true
		}
		rec.msg = NewMessage(r, url)
		recs[i] = rec
	}

	// Deadlines: stop starting records at stopAt, end handlers at hardAt.
	margin := a.cfg.SafetyMargin
	deadline, hasDeadline := ctx.Deadline()
	if margin == 0 && hasDeadline {
		margin = min(max(time.Until(deadline)/10, 200*time.Millisecond), 5*time.Second)
	}
	inv := &invocation{a: a, log: log, sem: make(chan struct{}, a.cfg.Concurrency), hctx: ctx}
	if hasDeadline {
		inv.stopAt = deadline.Add(-margin)
		var cancel context.CancelFunc
		inv.hctx, cancel = context.WithDeadlineCause(ctx, deadline.Add(-margin/2), ErrDeadline)
		defer cancel()
	}

	// Heartbeats, one extender per queue for this invocation.
	var beats sync.WaitGroup
	bctx, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	exts := map[*queueState]*visibility.Extender{}
	if !a.cfg.DisableHeartbeat {
		for st := range states {
			hb := a.cfg.Heartbeat
			hb.QueueURL, hb.VisibilityTimeout = st.info.URL, st.info.VisibilityTimeout
			if hb.Logger == nil {
				hb.Logger = log
			}
			if hb.VisibilityTimeout < time.Second {
				continue
			}
			onExtend, dims := hb.OnExtend, st.dims
			hb.OnExtend = func(m *sqsworker.Message, until time.Time) {
				a.rec.Add(metrics.VisibilityExtensions, 1, dims)
				if onExtend != nil {
					onExtend(m, until)
				}
			}
			ext, err := visibility.New(a.cfg.Client, hb)
			if err != nil {
				stopBeats()
				return resp, fmt.Errorf("lambda: Config.Heartbeat (set DisableHeartbeat to run without): %w", err)
			}
			exts[st] = ext
			beats.Go(func() { _ = ext.Run(bctx) })
		}
	}
	received := map[metrics.Dims]int64{}
	for _, rec := range recs {
		received[rec.dims()]++
	}
	for d, n := range received {
		a.rec.Add(metrics.MessagesReceived, n, d)
	}
	receivedAt := start.Add(-a.cfg.BatchingWindow)
	for _, rec := range recs {
		rec.ctx = inv.hctx
		if ext := exts[rec.st]; ext != nil {
			rec.ctx, rec.lease = ext.Track(inv.hctx, rec.msg, receivedAt)
		}
	}

	if fifo(recs) {
		inv.runGroups(recs)
	} else {
		for _, rec := range recs {
			inv.sem <- struct{}{}
			inv.wg.Go(func() {
				defer func() { <-inv.sem }()
				if !inv.tooLate(rec) {
					inv.process(rec)
				}
			})
		}
	}
	inv.wg.Wait()
	stopBeats()
	beats.Wait()
	for _, rec := range recs {
		if rec.lease != nil {
			rec.lease.Release() // records that never started
		}
	}
	inv.report(ctx, recs)
	if f, ok := a.rec.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			log.Warn("flushing metrics failed", "error", err)
		}
	}
	for _, rec := range recs {
		if rec.failed {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.msg.ID})
		}
	}
	return resp, nil
}

func fifo(recs []*record) bool {
	for _, r := range recs {
		if r.msg.GroupID != "" || (r.st != nil && r.st.info.FIFO) {
			return true
		}
	}
	return false
}

// runGroups handles FIFO records: each message group in order, groups in
// parallel. After a failure the rest of the group is reported failed.
func (inv *invocation) runGroups(recs []*record) {
	var order []string
	groups := map[string][]*record{}
	for _, r := range recs {
		if _, ok := groups[r.msg.GroupID]; !ok {
			order = append(order, r.msg.GroupID)
		}
		groups[r.msg.GroupID] = append(groups[r.msg.GroupID], r)
	}
	for _, g := range order {
		group := groups[g]
		inv.sem <- struct{}{}
		inv.wg.Go(func() {
			defer func() { <-inv.sem }()
			for i, rec := range group {
				if inv.tooLate(rec) || !inv.process(rec) {
					for _, rest := range group[i+1:] {
						rest.fail(0)
					}
					return
				}
			}
		})
	}
}

// tooLate reports, and marks failed, a record that would start too close to
// the deadline.
func (inv *invocation) tooLate(rec *record) bool {
	if inv.stopAt.IsZero() || time.Now().Before(inv.stopAt) {
		return false
	}
	rec.fail(0)
	return true
}

// dims returns the metric dimensions of the record's queue.
func (r *record) dims() metrics.Dims {
	if r.st == nil {
		return metrics.Dims{Queue: metrics.QueueName(r.msg.QueueURL)}
	}
	return r.st.dims
}

func (r *record) fail(visibility time.Duration) {
	r.failed, r.visibility = true, visibility
}

// process runs the handler on one record and decides its fate. It reports
// whether the record succeeded (or was dead-lettered).
func (inv *invocation) process(rec *record) bool {
	m := rec.msg
	r, dq := inv.a.rec, rec.dims()
	dqh := metrics.Dims{Queue: dq.Queue, Handler: inv.a.cfg.HandlerName}
	start := time.Now()
	err := outcome.Call(rec.ctx, inv.a.h, m)
	end := time.Now()
	r.Observe(metrics.HandlerDuration, end.Sub(start).Seconds(), dqh)
	if !m.SentAt.IsZero() {
		r.Observe(metrics.EnqueueToDoneLatency, end.Sub(m.SentAt).Seconds(), dq)
	}
	if rec.lease != nil {
		rec.lease.Release()
		if errors.Is(context.Cause(rec.ctx), visibility.ErrLeaseLost) {
			r.Add(metrics.LeasesLost, 1, dq)
			inv.log.Warn("lease lost while the handler ran; reported failed", "message_id", m.ID, "handler_error", err)
			rec.failed, rec.keep = true, true
			return false
		}
	}
	if err == nil {
		r.Add(metrics.MessagesSucceeded, 1, dqh)
		return true
	}
	class := sqsworker.ErrorClass(err)
	log := inv.log.With("message_id", m.ID, "queue", m.QueueURL, "attempt", m.ReceiveCount,
		"error_class", class, "duration", end.Sub(start))
	var p *sqsworker.PanicError
	if errors.As(err, &p) {
		log.Error("handler panicked", "panic", fmt.Sprint(p.Value), "stack", string(p.Stack))
	}
	if rec.st == nil {
		r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: dq.Queue, Handler: dqh.Handler, ErrorClass: class})
		log.Warn("handler failed; reported failed", "error", err)
		rec.failed, rec.keep = true, true
		return false
	}
	dec := rec.st.policy.Decide(err, m.ReceiveCount)
	if dec.Action == outcome.Postpone {
		r.Add(metrics.MessagesPostponed, 1, dq)
		log.Debug("record postponed", "retry_in", dec.Delay)
		rec.fail(dec.Delay)
		return false
	}
	r.Add(metrics.MessagesFailed, 1, metrics.Dims{Queue: dq.Queue, Handler: dqh.Handler, ErrorClass: class})
	switch {
	case dec.Action == outcome.DeadLetter:
		mctx, cancel := context.WithTimeout(context.WithoutCancel(rec.ctx), 10*time.Second)
		withMeta, merr := rec.st.mover.Move(mctx, m, err)
		cancel()
		if merr == nil {
			if !withMeta {
				log.Warn("record has too many attributes for failure metadata; dead-lettered without it")
			}
			r.Add(metrics.MessagesDeadLettered, 1, metrics.Dims{Queue: dq.Queue, ErrorClass: class})
			log.Error("record dead-lettered", "error", err, "dead_letter_queue", rec.st.mover.URL)
			return true // handled: Lambda deletes it
		}
		log.Error("moving record to dead-letter queue failed", "error", merr)
	case dec.Permanent:
		log.Error("permanent failure but the queue has no dead-letter queue; retrying with backoff", "error", err)
	}
	r.Add(metrics.MessagesRetried, 1, dq)
	log.Warn("handler failed; retrying", "error", err, "retry_in", dec.Delay)
	rec.fail(dec.Delay)
	return false
}

// report sets the visibility of the failed records, batched per queue, so
// that they come back after their backoff delay instead of the queue's whole
// visibility timeout.
func (inv *invocation) report(ctx context.Context, recs []*record) {
	batchers := map[*queueState]*ackbatch.Batcher{}
	for _, rec := range recs {
		if !rec.failed || rec.keep || rec.st == nil {
			continue
		}
		b := batchers[rec.st]
		if b == nil {
			b = ackbatch.New(inv.a.cfg.Client, ackbatch.Config{
				QueueURL: rec.st.info.URL, MaxAttempts: 3,
				Result: func(kind ackbatch.Kind, e ackbatch.Entry, err error) {
					if err != nil {
						inv.log.Warn("setting a failed record's visibility failed; it comes back after the visibility timeout", "message_id", e.MessageID, "error", err)
					}
				},
			})
			batchers[rec.st] = b
		}
		limit := sqsworker.MaxVisibilityTimeout - time.Minute // the receive was a little earlier
		vis := (min(rec.visibility, limit) + time.Second - 1).Truncate(time.Second)
		b.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: rec.msg.ReceiptHandle, MessageID: rec.msg.ID, Visibility: vis})
	}
	fctx := context.WithoutCancel(ctx)
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		fctx, cancel = context.WithDeadline(fctx, d.Add(-50*time.Millisecond))
		defer cancel()
	}
	for _, b := range batchers {
		_ = b.Close(fctx)
	}
}

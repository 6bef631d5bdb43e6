package lambda

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awslambda "github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/internal/breaker"
	"github.com/sqsworker/sqsworker/internal/executor"
	"github.com/sqsworker/sqsworker/internal/logattr"
	"github.com/sqsworker/sqsworker/internal/outcome"
	"github.com/sqsworker/sqsworker/internal/queue"
	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/stopby"
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
var ErrDeadline = stopby.Cause("lambda: invocation deadline near")

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
	if c, ok := cfg.Client.(sdkhttp.SQS); ok {
		// Every request's body from a copy of its own, so that no reply
		// the transport cut makes the SDK send a dead-letter move or a
		// delayed copy twice (see the worker's package doc).
		cfg.Client = sdkhttp.ForSQS(c, 0)
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.Backoff == nil {
		cfg.Backoff = sqsworker.ExponentialBackoff{}
	}
	if cfg.QueueURL == nil {
		cfg.QueueURL = new(lastURL).fromARN
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
	if cfg.QueueRefresh == 0 {
		cfg.QueueRefresh = DefaultQueueRefresh
	}
	if cfg.BatchingWindow == 0 {
		if v := os.Getenv(BatchingWindowEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 || d > 5*time.Minute {
				return nil, fmt.Errorf("lambda: %s=%q: want a duration in 0s..5m, such as 10s", BatchingWindowEnv, v)
			}
			cfg.BatchingWindow = d
		}
	}
	recorder := cfg.Metrics
	if recorder == nil {
		recorder = metrics.Nop{}
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	a := &adapter{h: h, cfg: cfg, recorder: recorder, queues: map[string]*queueState{}, breakers: map[string]*breaker.Breaker{}, lookedUp: map[string]lookup{}}
	var err2 error
	if a.unknown, err2 = a.newState(queue.Info{}, false); err2 != nil {
		return nil, err2
	}
	return a.invoke, nil
}

type adapter struct {
	h        sqsworker.Handler
	cfg      Config
	recorder metrics.Recorder
	counts   executor.Counters
	// unknown settles records whose queue is unknown: they run, and a
	// failure is reported failed with its visibility left alone, never
	// retried with backoff, never dead-lettered nor copied by the function
	// (it has neither the queue's URL nor its redrive policy).
	unknown *queueState

	mu       sync.Mutex
	queues   map[string]*queueState      // by URL, refreshed every QueueRefresh
	breakers map[string]*breaker.Breaker // by URL, for the execution environment
	// lookedUp holds, by ARN, what GetQueueUrl answered for the queues
	// whose ARN Config.QueueURL could not map (see queueURL). It grows
	// with the event source mappings, at most to maxLookups.
	lookedUp map[string]lookup
}

// lastURL is QueueURLFromARN with its last answer kept: an invocation's
// records, and a function's invocations, name the same queue or few.
type lastURL struct{ last atomic.Pointer[[2]string] } // ARN, URL

func (c *lastURL) fromARN(arn string) (string, error) {
	if p := c.last.Load(); p != nil && p[0] == arn {
		return p[1], nil
	}
	url, err := QueueURLFromARN(arn)
	if err == nil {
		c.last.Store(&[2]string{arn, url})
	}
	return url, err
}

// lookup is what GetQueueUrl answered for a queue's ARN: its URL, kept for
// the execution environment's life, or a definite failure, kept until
// until.
type lookup struct {
	url   string
	err   error
	until time.Time
}

// A definite answer of GetQueueUrl that it cannot find the queue (it does
// not exist, or access is denied: an error no retry fixes, see
// awserr.IsFatal) is kept for lookupFailureTTL, so that the records of an
// ARN nobody maps cost one lookup a minute, not one per invocation, while
// a queue created, or an access granted, later is found within a minute.
// Other failures (throttling, server faults, the network, the lookup's
// time running out) say nothing of the queue and are not kept: the next
// invocation asks again, as it reads again a queue's attributes whose read
// failed. At most maxLookups answers are kept: a new one beyond finds room
// among the failures that have run out, or is not kept.
const (
	lookupFailureTTL = time.Minute
	maxLookups       = 100
)

// lookupNow is the clock of the lookups kept; tests set it.
var lookupNow = time.Now

// queueState is what the adapter knows of one queue.
type queueState struct {
	info     queue.Info
	client   API
	exec     *executor.Executor
	ext      *visibility.Extender // nil without a heartbeat
	beat     heartbeat            // runs ext's rounds for the invocations using it
	loadedAt time.Time            // guarded by the adapter's mu once st is shared
	// known is false when the queue's attributes could not be read: the
	// configuration stands in for them, and no heartbeat runs.
	known bool
}

func (a *adapter) newState(info queue.Info, known bool) (*queueState, error) {
	dlq, maxReceive := a.cfg.DeadLetterQueueURL, a.cfg.MaxReceiveCount
	if dlq == "" {
		dlq = info.DeadLetterURL
	}
	if maxReceive == 0 {
		maxReceive = info.MaxReceiveCount
	}
	if info.URL == "" {
		// The state of the records whose queue is unknown (a.unknown):
		// Config's dead-letter queue may not be theirs, and their copy
		// would name no source queue to redrive to. Their failures are
		// left to the queue's own redrive policy.
		dlq, maxReceive = "", 0
	}
	log := a.cfg.Logger.With("queue", info.URL)
	st := &queueState{info: info, client: a.cfg.Client, loadedAt: time.Now(), known: known}
	st.exec = &executor.Executor{
		Handler: a.h,
		Policy: outcome.Policy{Backoff: a.cfg.Backoff, MaxReceiveCount: maxReceive,
			HasDLQ: dlq != "", RedriveMaxReceiveCount: info.MaxReceiveCount, RedriveUnknown: !known},
		Mover:        &queue.Mover{API: a.cfg.Client, URL: dlq, FIFO: queue.IsFIFOURL(dlq), Host: a.cfg.Host},
		Counters:     &a.counts,
		Metrics:      a.recorder,
		Queue:        metrics.Dims{Queue: metrics.QueueName(info.URL)},
		HandlerName:  a.cfg.HandlerName,
		Log:          log,
		TimeoutCause: ErrDeadline,
		StopCauses:   []error{ErrDeadline},
		Requeue:      executor.Requeue{API: a.cfg.Client, URL: info.URL, FIFO: info.FIFO, Retention: info.Retention},
	}
	a.mu.Lock()
	b, ok := a.breakers[info.URL]
	if !ok {
		b = breaker.New(a.cfg.Breaker, st.exec.BreakerChanged)
		a.breakers[info.URL] = b
	}
	a.mu.Unlock()
	st.exec.Breaker = b
	if known && a.cfg.BatchingWindow > 0 && info.VisibilityTimeout <= a.cfg.BatchingWindow {
		// Every record's lease is counted from the window's start: each
		// would look lost before it runs, its failures left to SQS's
		// redrive without backoff, each success deleted on its own.
		a.cfg.Logger.Error("the queue's visibility timeout is not longer than the event source mapping's batching window: a record may be visible again before the function is invoked, so failures get no backoff and are left to the queue's redrive policy; set the queue's visibility timeout to at least six times the function's timeout plus the batching window",
			"queue", info.URL, "visibility_timeout", info.VisibilityTimeout, "batching_window", a.cfg.BatchingWindow)
	}
	if known && !a.cfg.DisableHeartbeat && info.VisibilityTimeout >= time.Second {
		hb := a.cfg.Heartbeat
		if hb.Logger == nil {
			hb.Logger = a.cfg.Logger
		}
		hb.MaxInFlight = cmp.Or(hb.MaxInFlight, DefaultHeartbeatCalls)
		ext, err := st.exec.Heartbeat(a.cfg.Client, hb, info.URL, info.VisibilityTimeout)
		if err != nil {
			// Failing the invocation would fail every one alike (the
			// queue's visibility timeout changed under a setting made for
			// the old one, say), and spend every record's receives toward
			// the dead-letter queue: the records run without the
			// heartbeat, as when the attributes cannot be read.
			a.cfg.Logger.Error("Config.Heartbeat does not fit the queue's visibility timeout: running without the heartbeat, so a record whose handler outlives the visibility timeout is left to SQS; fix Config.Heartbeat (or leave its durations to default from the queue), or set DisableHeartbeat",
				"queue", info.URL, "visibility_timeout", info.VisibilityTimeout, "error", err)
		} else {
			st.ext = ext
		}
	}
	return st, nil
}

// state returns the state of the queue at url, reading its attributes on
// first use and again once they are QueueRefresh old. When they cannot be
// read (throttled, denied, unreachable) by readBy (if set), it goes on with
// what it knew, or with the configuration alone, and tries again on the
// next invocation.
func (a *adapter) state(ctx context.Context, url string, readBy time.Time, log *slog.Logger) (*queueState, error) {
	a.mu.Lock()
	st, ok := a.queues[url]
	fresh := ok && st.known && time.Since(st.loadedAt) < a.cfg.QueueRefresh // loadedAt under a.mu
	a.mu.Unlock()
	if fresh {
		return st, nil
	}
	rctx, cancel := deadlineBy(ctx, readBy)
	defer cancel()
	info, err := queue.Load(rctx, a.cfg.Client, url)
	if err != nil {
		if ok && st.known {
			log.Warn("re-reading the queue's attributes failed; going on with those read before", "queue", url, "error", err)
			return st, nil
		}
		log.Error("reading the queue's attributes failed; going on with the configuration alone (no heartbeat; dead-letter queue and maxReceiveCount from Config; every receive taken for the last the redrive policy allows: records released or postponed wait in fresh copies)",
			"queue", url, "error", err)
		return a.newState(queue.Info{URL: url, FIFO: queue.IsFIFOURL(url)}, false)
	}
	if ok && st.known && st.info == info {
		a.mu.Lock()
		st.loadedAt = time.Now()
		a.mu.Unlock()
		return st, nil
	}
	if st, err = a.newState(info, true); err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.queues[url] = st
	a.mu.Unlock()
	return st, nil
}

// queueURL returns the URL of the queue arn names, from Config.QueueURL.
// When that cannot map it, it asks SQS (GetQueueUrl, by the queue's name
// and owner account, by readBy), for an ARN of the function's region: a
// queue of the same name in another region is another queue. The URL found
// is kept for the execution environment; a definite failure for
// lookupFailureTTL (see there).
func (a *adapter) queueURL(ctx context.Context, arn string, readBy time.Time, log *slog.Logger) (string, error) {
	url, err := a.cfg.QueueURL(arn)
	if err == nil && url == "" {
		err = fmt.Errorf("lambda: Config.QueueURL returned an empty URL for %q", arn)
	}
	if err == nil {
		return url, nil
	}
	a.mu.Lock()
	l, ok := a.lookedUp[arn]
	a.mu.Unlock()
	switch {
	case ok && l.err == nil:
		return l.url, nil
	case ok && lookupNow().Before(l.until):
		return "", fmt.Errorf("%w; looking the queue up by name (an answer kept until %s): %w", err, l.until.Format(time.RFC3339), l.err)
	}
	name, account, perr := queue.ParseARN(arn)
	if perr != nil {
		return "", err
	}
	if region := os.Getenv("AWS_REGION"); region != "" && region != strings.Split(arn, ":")[3] {
		return "", fmt.Errorf("%w (the queue is not in the function's region %s)", err, region)
	}
	ctx, cancel := deadlineBy(ctx, readBy)
	defer cancel()
	out, lerr := a.cfg.Client.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: &name, QueueOwnerAWSAccountId: &account})
	if lerr == nil && aws.ToString(out.QueueUrl) == "" {
		lerr = errors.New("GetQueueUrl returned no URL")
	}
	if lerr != nil {
		if awserr.IsFatal(lerr) {
			a.keepLookup(arn, lookup{err: lerr, until: lookupNow().Add(lookupFailureTTL)})
		}
		return "", fmt.Errorf("%w; looking the queue up by name: %w", err, lerr)
	}
	url = aws.ToString(out.QueueUrl)
	log.Warn("Config.QueueURL cannot map the record's eventSourceARN; found its queue by name with GetQueueUrl instead: set Config.QueueURL to a function that maps this ARN",
		"event_source_arn", arn, "queue", url, "error", err)
	a.keepLookup(arn, lookup{url: url})
	return url, nil
}

// keepLookup keeps what GetQueueUrl answered for arn, unless maxLookups
// answers are kept already and none of them is a failure that has run out.
func (a *adapter) keepLookup(arn string, l lookup) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.lookedUp[arn]; !ok && len(a.lookedUp) >= maxLookups {
		now := lookupNow()
		for k, old := range a.lookedUp {
			if old.err != nil && !now.Before(old.until) {
				delete(a.lookedUp, k)
			}
		}
		if len(a.lookedUp) >= maxLookups {
			return
		}
	}
	a.lookedUp[arn] = l
}

// deadlineBy returns ctx with the deadline by, or ctx itself if by is
// zero (no deadline).
func deadlineBy(ctx context.Context, by time.Time) (context.Context, context.CancelFunc) {
	if by.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, by)
}

// record is one record of an invocation and what became of it. It is the
// executor's Acker for its own job.
type record struct {
	job executor.Job
	msg sqsworker.Message // job.Msg
	st  *queueState
	// fifoSource: its eventSourceARN names a FIFO queue (known even
	// when the queue's URL is not).
	fifoSource bool

	// mu guards what follows: a handler that ignores its context may
	// settle its record after the invocation gave up on it.
	mu         sync.Mutex
	started    bool          // its handler was called, or its hold checked
	settled    bool          // the executor settled it
	givenUp    bool          // the invocation returned without its outcome
	failed     bool          // reported in batchItemFailures
	visibility time.Duration // the visibility to set when failed
	keep       bool          // failed, but leave its visibility alone
}

// Delete: the record is done; Lambda deletes it once the function returns.
// A record whose copy was sent (to the dead-letter queue, or to wait) is
// deleted at once, as the worker deletes it: a function killed later in the
// batch (out of memory, a crash) would leave both, and the original would be
// received again, copied again, or run and succeed while its copy waits in
// the dead-letter queue. So is a record whose handler succeeded once its
// lease looked lost (Job.PastLease): reported done all the same, not failed
// (its job is done), it is deleted while SQS may still hold it (an
// extension applied whose reply was lost), rather than at the end of the
// invocation. So is a record that succeeded on the last receive its queue's
// redrive policy allows: left to the end of the invocation, a function
// killed later in the batch would leave it to its next receive, at which
// SQS moves it, done, to the dead-letter queue. Should that delete fail,
// Lambda's is still to come. And so is a record whose handler succeeded
// after the invocation gave up on it at its deadline (a handler that
// ignored its context): reported failed, Lambda will not delete it, and it
// would run again.
func (r *record) Delete(j *executor.Job) {
	// Settled first, and with it known whether the invocation gave up on
	// the record: a slow delete below must not leave it to be reported
	// failed (and, on its last receive, dead-lettered, done).
	givenUp := !r.settle(false, 0, false)
	if r.st == nil || !(j.DeleteAtOnce() || givenUp || r.st.knownLastReceive(j)) {
		if givenUp { // else kept (KeepsLease) to the invocation's end
			j.Done()
		}
		return
	}
	if r.st.deleteNow(j, givenUp) || givenUp {
		j.Done()
	}
	// A delete that failed leaves the lease to the invocation's end, as any
	// settled record's: Lambda's delete is still to come.
}

// KeepsLease: the heartbeat keeps a settled record's message invisible
// until every record of the invocation is settled (its outcomes then end
// the leases, before the failed records' visibility changes are sent and
// Lambda deletes the others), unless the invocation gave up on the record.
// Else a record done early in an invocation that outlives the queue's
// visibility timeout would be SQS's again before Lambda deletes it, and run
// again (dead-lettered, done, on its last receive); one failed would come
// back before its backoff.
func (r *record) KeepsLease(*executor.Job) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.givenUp
}

// knownLastReceive reports whether j's message is on the last receive its
// queue's redrive policy allows. Not when the policy could not be read: each
// message might be, and each success would cost a request of its own.
func (st *queueState) knownLastReceive(j *executor.Job) bool {
	return !st.exec.Policy.RedriveUnknown && st.exec.OnLastReceive(j)
}

// deleteNow deletes j's message, by the time its moves must end, and
// reports whether SQS confirmed it. givenUp
// says that the invocation returned without the record's outcome, reported
// failed: Lambda will not delete it, and the time for moves is past, so
// the delete has its own timeout alone (the handler may return while a
// later invocation runs, or the environment is frozen meanwhile).
func (st *queueState) deleteNow(j *executor.Job, givenUp bool) bool {
	j.Acknowledging()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(j.Ctx), executor.DefaultMoveTimeout)
	defer cancel()
	by := j.MoveBy
	if givenUp {
		by = time.Time{}
	}
	ctx, cancelBy := deadlineBy(ctx, by)
	defer cancelBy()
	out, err := st.client.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &st.info.URL,
		Entries: []types.DeleteMessageBatchRequestEntry{{Id: aws.String("0"), ReceiptHandle: &j.Msg.ReceiptHandle}}})
	switch {
	case err != nil:
	case len(out.Failed) > 0:
		err = fmt.Errorf("%s: %s", aws.ToString(out.Failed[0].Code), aws.ToString(out.Failed[0].Message))
	case len(out.Successful) == 0:
		err = errors.New("the answer lists the delete neither as successful nor as failed")
	}
	if err != nil {
		log := j.Log
		if log == nil {
			log = st.exec.Log
		}
		then := "Lambda deletes it when the function returns"
		if givenUp {
			then = "the invocation reported it failed at its deadline, so it comes back after its visibility timeout"
		}
		log.Warn("deleting a record at once failed (its copy was sent, its lease looked lost, it was on its last receive, or it succeeded after the invocation's deadline); "+then, "message_id", j.Msg.ID,
			"copied", j.Copied, "lease_looked_lost", j.PastLease, "given_up", givenUp, "error", err)
	}
	return err == nil
}

// Retry reports the record failed, to come back after vis.
func (r *record) Retry(_ *executor.Job, vis time.Duration) { _ = r.settle(true, vis, r.st == nil) }

// Abandon reports the record failed and leaves its visibility alone.
func (r *record) Abandon(*executor.Job) { _ = r.settle(true, 0, true) }

// SetProbe sets the probe the record runs as under its lock: the
// invocation's wait reads it, should it give up on the handler
// (executor.ProbeSetter).
func (r *record) SetProbe(j *executor.Job, p breaker.Probe) {
	r.mu.Lock()
	j.Probe = p
	r.mu.Unlock()
}

// settle records the record's outcome, unless the invocation gave up on it;
// it reports whether it did.
func (r *record) settle(failed bool, vis time.Duration, keep bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.givenUp {
		r.settled, r.failed, r.visibility, r.keep = true, failed, vis, keep
	}
	return !r.givenUp
}

// start marks the record started, unless the invocation gave up on it.
func (r *record) start() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started = !r.givenUp
	return r.started
}

// exec is the executor that settles the record.
func (r *record) exec(a *adapter) *executor.Executor {
	if r.st == nil {
		return a.unknown.exec
	}
	return r.st.exec
}

// invocation is one call of the function.
type invocation struct {
	a      *adapter
	stopAt time.Time // no record starts after
	sem    chan struct{}
	// giveUp is closed when the invocation stops waiting for handlers
	// (nil without a deadline): those still running ignore their context.
	giveUp <-chan struct{}
	// running counts the goroutines running records, plus one for the
	// dispatch; the last to end closes done.
	running atomic.Int64
	done    chan struct{}
	// acquired counts the slots acquire took: the dispatch's records (its
	// groups, for an event with FIFO records), in their order. stopped is
	// set when acquire took none at stopAt: the dispatch ended there, and
	// the records it did not reach are wait's to release. The dispatch's
	// goroutine alone sets both, before it calls wait.
	acquired int
	stopped  bool
}

// acquire takes a slot of the invocation's concurrency, unless the time to
// start records (stopAt) ends first: then the dispatch stops, and wait
// releases the records left.
func (inv *invocation) acquire() bool {
	select {
	case inv.sem <- struct{}{}:
		inv.acquired++
		return true
	default:
	}
	if inv.stopAt.IsZero() {
		inv.sem <- struct{}{}
		inv.acquired++
		return true
	}
	stop := time.NewTimer(time.Until(inv.stopAt))
	defer stop.Stop()
	select {
	case inv.sem <- struct{}{}:
		inv.acquired++
		return true
	case <-stop.C:
		inv.stopped = true
		return false
	}
}

// releaseWaiting releases the records the dispatch did not reach, as run
// releases those whose turn comes after stopAt: through their executor, so
// that a record on the last receive its redrive policy allows waits in a
// fresh copy, sent by the time the moves must end (Job.MoveBy), rather than
// being moved to the dead-letter queue by SQS on its next receive. A record
// whose time has not come is held back instead, as run holds it.
//
// The records of a standard queue are released concurrently, up to
// executor.ReleaseSends at a time: their copies' sends go together, so
// that an SQS slow to answer still takes every copy by MoveBy, rather than
// the first few, in turn, the rest then visible again and dead-lettered by
// SQS on their next receive. A FIFO queue's are released in order, group
// by group: they send no such copies. See executor.ReleaseAll.
func (inv *invocation) releaseWaiting(recs []record) {
	if fifo(recs) {
		var rest []*record
		for _, g := range groupsOf(recs)[inv.acquired:] {
			rest = append(rest, g...)
		}
		inv.release(len(rest), true, false, func(i int) *record { return rest[i] })
		return
	}
	recs = recs[inv.acquired:]
	inv.release(len(recs), false, false, func(i int) *record { return &recs[i] })
}

// release releases n records that were not run, the ith rec(i), through
// executor.ReleaseAll.
func (inv *invocation) release(n int, fifo, behind bool, rec func(i int) *record) {
	executor.ReleaseAll(n, fifo, behind, func(i int) (*executor.Executor, *executor.Job, executor.Acker) {
		r := rec(i)
		return r.exec(inv.a), &r.job, r
	})
}

// runRecord runs rec on a goroutine of its own, in the slot acquire took.
// It is small, and calls run directly, so that the goroutine's first stack
// holds the handler's call: a stack grown for each record costs more than
// the rest of the adapter.
func (inv *invocation) runRecord(rec *record) {
	defer inv.free()
	inv.run(rec)
}

// free gives back a goroutine's slot, and ends it.
func (inv *invocation) free() {
	<-inv.sem
	inv.exit()
}

// exit ends a goroutine of the invocation (or the dispatch).
func (inv *invocation) exit() {
	if inv.running.Add(-1) == 0 {
		close(inv.done)
	}
}

// wait releases the records the dispatch did not reach (see
// releaseWaiting), then waits for the records' goroutines to end, or gives
// up on them: a record not settled then is reported failed, its visibility
// left alone if its handler is still running (it ignores its context; SQS
// hands the record out again after its visibility timeout), else made
// visible again at once. Later outcomes of those records are ignored.
func (inv *invocation) wait(recs []record, log *slog.Logger) {
	if inv.stopped {
		inv.releaseWaiting(recs)
	}
	select {
	case <-inv.done:
		return
	case <-inv.giveUp:
	}
	for i := range recs {
		rec := &recs[i]
		rec.mu.Lock()
		if !rec.settled {
			rec.givenUp, rec.failed, rec.visibility = true, true, 0
			rec.keep = rec.started || rec.st == nil
			if rec.started {
				log.Error("handler still running at the invocation's deadline: it ignores its context; reporting its record failed, to come back after its visibility timeout",
					"message_id", rec.job.Msg.ID)
				// A probe's outcome may never come (a call that
				// hangs): the next record probes instead. Should it
				// come, late, it no longer settles the breaker (see
				// breaker.Probe).
				rec.exec(inv.a).Breaker.Abort(rec.job.Probe)
			} else {
				rec.exec(inv.a).Counters.Released.Add(1)
			}
		}
		rec.mu.Unlock()
		rec.job.Done()
	}
}

func (a *adapter) invoke(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
	var resp events.SQSEventResponse
	if len(ev.Records) == 0 {
		return resp, nil
	}
	start := time.Now()
	log := a.cfg.Logger
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		log = logattr.With(log, slog.String("aws_request_id", lc.AwsRequestID))
	}
	// Deadlines: stop starting records at stopAt, end handlers at hardAt.
	margin := a.cfg.SafetyMargin
	deadline, hasDeadline := ctx.Deadline()
	if margin == 0 && hasDeadline {
		margin = min(max(deadline.Sub(start)/10, 200*time.Millisecond), 5*time.Second)
	}
	if hasDeadline && !deadline.Add(-margin).After(start) {
		log.Error("no time to start records: Config.SafetyMargin is not shorter than the time the invocation has, so every record is released without running, until SQS dead-letters it; set SafetyMargin well below the function's timeout (or leave it 0 for a tenth of it)",
			"safety_margin", margin, "time_left", deadline.Sub(start).Round(time.Millisecond))
	}
	// A read of a queue's attributes takes no more than the margin (at
	// least a second): an SQS that swallows the function's requests must
	// not take the time of the handlers, which can run without them.
	var readBy time.Time
	if hasDeadline {
		readBy = start.Add(max(margin, time.Second))
		if stop := deadline.Add(-margin); stop.Before(readBy) {
			readBy = stop
		}
	}

	recs := make([]record, len(ev.Records))
	states := map[*queueState]*slog.Logger{}
	// A queue's state once per invocation: one whose attributes cannot be
	// read is not read again for each of its records.
	byURL := map[string]*queueState{}
	var lastARN, lastURL string // the records of a batch share their queue
	var lastErr error
	for i := range ev.Records {
		r := &ev.Records[i]
		if r.MessageId == "" {
			return resp, fmt.Errorf("lambda: record %d of the event has no messageId: not an SQS event", i)
		}
		rec := &recs[i]
		if i == 0 || r.EventSourceARN != lastARN {
			lastARN = r.EventSourceARN
			lastURL, lastErr = a.queueURL(ctx, lastARN, readBy, log)
		}
		url, err := lastURL, lastErr
		if err != nil {
			log.Error("record's queue unknown: Config.QueueURL cannot map its eventSourceARN to a queue URL, nor can SQS find the queue it names, so a failure of its handler is reported failed with its visibility left alone, never retried with backoff nor dead-lettered by the function (the queue's redrive policy applies), and a record held back for later is left to come back after its visibility timeout, counted by that policy; set Config.QueueURL to a function that maps this ARN",
				"message_id", r.MessageId, "event_source_arn", r.EventSourceARN, "error", err)
		} else if st, seen := byURL[url]; seen {
			rec.st = st
		} else if rec.st, err = a.state(ctx, url, readBy, log); err != nil {
			return resp, err // nothing ran, nothing is deleted
		} else {
			byURL[url] = rec.st
			states[rec.st] = logattr.With(log, slog.String("queue", url))
		}
		if st := rec.st; st != nil && st.known && st.info.ARN != "" && st.info.ARN != r.EventSourceARN {
			// Moves, copies and deletes in the name of another queue
			// would put the job where it does not belong.
			log.Error("record's queue unknown: Config.QueueURL maps its eventSourceARN to another queue, so a failure of its handler is reported failed with its visibility left alone, never retried with backoff nor dead-lettered by the function (the queue's redrive policy applies); fix Config.QueueURL",
				"message_id", r.MessageId, "event_source_arn", r.EventSourceARN, "queue", url, "queue_arn", st.info.ARN)
			rec.st, url = nil, ""
		}
		fill(&rec.msg, r, url)
		rec.job.Msg = &rec.msg
		rec.fifoSource = strings.HasSuffix(r.EventSourceARN, ".fifo")
	}

	inv := &invocation{a: a, sem: make(chan struct{}, a.cfg.Concurrency), done: make(chan struct{})}
	inv.running.Store(1) // the dispatch
	hctx := ctx
	var moveBy time.Time
	if hasDeadline {
		inv.stopAt = deadline.Add(-margin)
		moveBy = deadline.Add(-margin / 4)
		var cancel context.CancelFunc
		hctx, cancel = context.WithDeadlineCause(ctx, deadline.Add(-margin/2), ErrDeadline)
		defer cancel()
		// What finishes a job after its handler (the idempotency
		// middleware's completion) ends by then too, or shortly after for
		// a handler done just in time, but before the invocation stops
		// waiting (moveBy): a record whose commit landed is then not
		// reported as a handler that ignores its context.
		hctx = stopby.With(hctx, deadline.Add(-margin/2), deadline.Add(-margin*3/8))
		// Handlers not ended by the time the moves must end ignore their
		// context: the invocation stops waiting for them then, so that
		// Lambda gets the outcome of the others.
		gctx, cancelGiveUp := context.WithDeadline(context.WithoutCancel(ctx), moveBy)
		defer cancelGiveUp()
		inv.giveUp = gctx.Done()
	}

	// The heartbeats of this invocation's queues, shared with the
	// invocations under way at the same time.
	for st := range states {
		if st.ext != nil {
			st.beat.join(ctx, st.ext)
		}
	}
	windowStart := start.Add(-a.cfg.BatchingWindow)
	for i := range recs {
		rec := &recs[i]
		j := &rec.job
		receivedAt := receivedAtOf(j.Msg, windowStart)
		j.ReceivedAt, j.Ctx, j.MoveBy, j.Log = receivedAt, hctx, moveBy, states[rec.st]
		if j.Log == nil {
			j.Log = log
		}
		ex := rec.exec(a)
		ex.Received(1)
		switch {
		case rec.st != nil && rec.st.ext != nil:
			if receiveKnown(j.Msg) || heldBack(j.Msg, start) {
				j.Ctx, j.Lease = rec.st.ext.Track(hctx, j.Msg, receivedAt)
			} else {
				j.Ctx, j.Lease = rec.st.ext.TrackEstimated(hctx, j.Msg, receivedAt)
			}
		case rec.st != nil && rec.st.known && rec.st.info.VisibilityTimeout > 0:
			// Without the heartbeat the message is SQS's again once its
			// visibility timeout has passed, counted from the earliest
			// its receive can have been, as the heartbeat counts it: what
			// the lease bounds (a copy's send, an acknowledgement) must
			// end by then.
			j.LeaseEnd = receivedAt.Add(rec.st.info.VisibilityTimeout)
		}
	}

	// A round of each heartbeat now, not an Interval later, beside the
	// handlers: the records due already (an invocation that started late,
	// a batch Lambda held while it throttled the function) are extended
	// within a round trip, not left to run out. It ends by stopAt, and
	// before the leases do (see below); a round under way does its work.
	kctx, cancelKick := context.WithCancel(ctx)
	if hasDeadline {
		var cancelBy context.CancelFunc
		kctx, cancelBy = context.WithDeadline(kctx, inv.stopAt)
		defer cancelBy()
	}
	kicked := make(chan struct{})
	go func() {
		defer close(kicked)
		for st := range states {
			if st.ext == nil {
				continue
			}
			// A round under way (the heartbeat's, or that of an
			// invocation beside this one) may have taken its leases
			// before these records': another, once it ends.
			for !st.ext.TryRound(kctx) {
				select {
				case <-kctx.Done():
					return
				case <-time.After(roundRetry):
				}
			}
		}
	}()

	if fifo(recs) {
		inv.runGroups(recs)
	} else {
		for i := range recs {
			rec := &recs[i]
			if !inv.acquire() {
				break
			}
			inv.running.Add(1)
			go inv.runRecord(rec)
		}
	}
	inv.exit() // the dispatch
	inv.wait(recs, log)
	cancelKick()
	<-kicked
	// The leases the records' outcomes kept (KeepsLease) end now, while
	// the heartbeat still runs, and before the visibility changes: an
	// extension landing after one would undo it.
	for i := range recs {
		recs[i].job.Done()
	}
	for st := range states {
		if st.ext != nil {
			st.beat.leave()
		}
	}
	inv.report(ctx, recs, log)
	for st := range states {
		// At every flush, so that an alarm on it sees a value each period.
		a.recorder.Set(metrics.BreakerState, float64(st.exec.Breaker.State()), st.exec.Queue)
	}
	if f, ok := a.recorder.(interface{ Flush() error }); ok {
		if err := f.Flush(); err != nil {
			log.Warn("flushing metrics failed", "error", err)
		}
	}
	for i := range recs {
		if recs[i].failed {
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: recs[i].job.Msg.ID})
		}
	}
	return resp, nil
}

func fifo(recs []record) bool {
	for i := range recs {
		if recs[i].fifo() {
			return true
		}
	}
	return false
}

// fifo reports whether the record comes from a FIFO queue: by its queue's
// name, not by its group, which a fair queue's messages carry too.
func (r *record) fifo() bool {
	return r.fifoSource || (r.st != nil && r.st.info.FIFO)
}

// group names a message group of one queue.
type group struct{ queue, id string }

// runGroups handles the records of an event with FIFO records: each
// message group of a queue in order, groups in parallel. Once a record is
// not done, the rest of its group is released. A record of a standard queue
// (in an event that also holds FIFO records, which an event source mapping
// never sends) is a group of its own.
func (inv *invocation) runGroups(recs []record) {
	for _, group := range groupsOf(recs) {
		if !inv.acquire() {
			return
		}
		inv.running.Add(1)
		go inv.runGroup(group)
	}
}

// groupsOf returns the message groups of recs, each in order, in the order
// of their first records.
func groupsOf(recs []record) [][]*record {
	var order []group
	groups := map[group][]*record{}
	for i := range recs {
		r := &recs[i]
		g := group{queue: r.job.Msg.QueueURL, id: r.job.Msg.GroupID}
		if !r.fifo() {
			g.id = "\x00" + r.job.Msg.ID // no group ID has a NUL
		}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	out := make([][]*record, len(order))
	for i, g := range order {
		out[i] = groups[g]
	}
	return out
}

// runGroup runs the records of one message group in order, on a goroutine
// of its own, in the slot acquire took. Once a record is not done, the rest
// of the group is released.
func (inv *invocation) runGroup(group []*record) {
	defer inv.free()
	for i, rec := range group {
		if !inv.run(rec) {
			rest := group[i+1:]
			inv.release(len(rest), true, true, func(k int) *record { return rest[k] })
			return
		}
	}
}

// run runs the record's handler, unless its time has not come (then it is
// held back, see Executor.Hold), the deadline is too near to start it (then
// it is released) or the circuit breaker is open (then it is postponed to
// the next probe, unless it is a FIFO record on its last receive). It
// reports whether the record is done.
func (inv *invocation) run(rec *record) bool {
	if !rec.start() {
		return false // given up
	}
	ex := rec.exec(inv.a)
	// Held first, as Release would hold it too.
	if held, gone := ex.Hold(&rec.job, rec); held {
		return gone
	}
	if !inv.stopAt.IsZero() && !time.Now().Before(inv.stopAt) {
		ex.Release(&rec.job, rec)
		return false
	}
	ok, probe, wait := ex.Breaker.Allow()
	if !ok && !(ex.Requeue.FIFO && ex.OnLastReceive(&rec.job)) {
		ex.Postpone(&rec.job, rec, max(wait, time.Second), breaker.ErrOpen)
		return false
	}
	// Allowed, or a FIFO record on its last receive: postponed by its
	// visibility (a copy would go behind the rest of its group), SQS would
	// move it to the dead-letter queue on its next receive, though its job
	// is not broken. It runs, not as a probe, and waits in flight for one
	// if its dependency is still down (Executor.Run), as in the worker.
	rec.SetProbe(&rec.job, probe)
	return ex.Run(&rec.job, rec)
}

// receivedAtOf is the earliest the event source mapping can have received
// m, for an invocation whose batching window started at windowStart: that,
// or the time SQS first handed m out when this is its first receive, if
// earlier (Lambda retries a batch it could not deliver, the function
// throttled, for as long as the records' visibility timeout allows).
func receivedAtOf(m *sqsworker.Message, windowStart time.Time) time.Time {
	if m.ReceiveCount == 1 && !m.FirstReceivedAt.IsZero() && m.FirstReceivedAt.Before(windowStart) {
		return m.FirstReceivedAt
	}
	return windowStart
}

// heldBack reports whether m's time (sqsworker.AttrNotBefore) has not come
// at start: the adapter holds it back, unrun, and settles it at the
// invocation's end; its lease, needing no extension, is not confirmed
// (which would cost a delayed job one visibility change per step).
func heldBack(m *sqsworker.Message, start time.Time) bool {
	nb, ok := m.NotBefore()
	return ok && nb.After(start)
}

// roundRetry is how often the round at an invocation's start is tried
// again while another round is under way.
const roundRetry = 20 * time.Millisecond

// receiveKnown reports whether m's receive time as receivedAtOf gives it
// is no later than SQS's: m's first receive, whose time SQS gives. A later
// receive's time is not given, and the event source mapping may have held
// the batch while Lambda throttled the function, for as long as the
// visibility timeout allows: its lease is tracked as estimated
// (visibility.Extender.TrackEstimated), extended in the round at the
// invocation's start whatever its age, so that its deadline is one SQS
// confirmed rather than one a first extension may come after. That costs
// one visibility change per ten such records.
func receiveKnown(m *sqsworker.Message) bool {
	return m.ReceiveCount == 1 && !m.FirstReceivedAt.IsZero()
}

// report sets the visibility of the failed records, batched per queue, so
// that they come back after their backoff delay instead of the queue's whole
// visibility timeout.
func (inv *invocation) report(ctx context.Context, recs []record, log *slog.Logger) {
	batchers := map[*queueState]*ackbatch.Batcher{}
	for i := range recs {
		rec := &recs[i]
		if !rec.failed || rec.keep || rec.st == nil {
			continue
		}
		b := batchers[rec.st]
		if b == nil {
			b = ackbatch.New(inv.a.cfg.Client, ackbatch.Config{
				QueueURL: rec.st.info.URL, MaxAttempts: 3,
				Result: func(kind ackbatch.Kind, e ackbatch.Entry, err error) {
					if err != nil {
						log.Warn("setting a failed record's visibility failed; it comes back after the visibility timeout", "message_id", e.MessageID, "error", err)
					}
				},
			})
			batchers[rec.st] = b
		}
		vis := executor.VisibilityOf(&rec.job, rec.visibility)
		// Sent, and retried, only while the record's lease holds: lost,
		// another consumer may hold the message, which the change would
		// show or hide under it.
		b.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: rec.job.Msg.ReceiptHandle, MessageID: rec.job.Msg.ID, Visibility: vis,
			Owner: (*executor.LeaseOwner)(&rec.job)})
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

package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/ctxsleep"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/producer"
)

// Queue and worker settings every scenario shares.
const (
	visibilityTimeout = 5 * time.Second
	maxReceiveCount   = 5
	// workerConcurrency is the chaosworker's default.
	workerConcurrency = 16
	// stopTimeout is how long a worker has to stop after SIGTERM before it
	// is killed: its shutdown deadline (25s) plus a long poll (20s).
	stopTimeout = 60 * time.Second
	// cleanupTimeout bounds the deletion of a scenario's queues and tables.
	cleanupTimeout = 30 * time.Second
)

// spec is what a scenario does in one mode.
type spec struct {
	// label names the scenario's row, with its outage in this mode when
	// that is not the one its name says.
	label string
	// jobs are the messages preloaded before the worker starts.
	jobs []job
	// concurrency of the worker. Default workerConcurrency.
	concurrency int
	// fifo makes the scenario's queues FIFO queues; its jobs then carry
	// their message groups, whose order the checks follow.
	fifo bool
	// maxReceiveCount of the queue's redrive policy. Default
	// maxReceiveCount.
	maxReceiveCount int
	// script injects the scenario's faults once the worker runs; the
	// drain and the checks follow.
	script func(ctx context.Context, r *run) error
}

// scenario is a named spec, short or full.
type scenario struct {
	name string
	spec func(full bool, marker string) spec
}

// run is one scenario's run: its resources, its worker, and what it saw.
type run struct {
	*env
	name string
	sp   spec
	log  *slog.Logger
	out  *os.File // the scenario's log: the runner's records and the worker's output

	queueURL, dlqURL            string
	effectsTable, idemTable     string
	sqsProxy, ddbProxy          *faultproxy.Proxy
	worker                      *proc
	starts                      int
	good                        map[string]bool
	poison                      map[string]string // key → how it is broken
	marker                      string
	cleanups                    []func(ctx context.Context)
	failures, notes             []string
	drainDeadline, stallTimeout time.Duration
}

func (r *run) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.failures = append(r.failures, msg)
	r.log.Warn("check failed", "failure", msg)
}

func (r *run) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, msg)
	r.log.Info("note", "note", msg)
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runScenario runs one scenario from set-up to clean-up and returns its
// result. It never panics on a failed check: failures are in the Result.
func (e *env) runScenario(ctx context.Context, sc scenario) (res Result) {
	start := time.Now()
	marker := "chaos-body-marker-" + randomSuffix() + randomSuffix()
	sp := sc.spec(e.full, marker)
	if sp.concurrency == 0 {
		sp.concurrency = workerConcurrency
	}
	if sp.maxReceiveCount == 0 {
		sp.maxReceiveCount = maxReceiveCount
	}
	res = Result{Scenario: sc.name, Label: sp.label, Jobs: len(sp.jobs), FIFO: sp.fifo}
	r := &run{env: e, name: sc.name, sp: sp, marker: marker, good: map[string]bool{}, poison: map[string]string{}}
	for _, j := range sp.jobs {
		if j.poison != "" {
			r.poison[j.key] = j.poison
		} else {
			r.good[j.key] = true
		}
	}
	res.PoisonJobs = len(r.poison)
	r.drainDeadline, r.stallTimeout = 10*time.Minute, 2*time.Minute
	if e.full {
		r.drainDeadline, r.stallTimeout = 30*time.Minute, 3*time.Minute
	}
	defer func() {
		r.cleanup()
		res.Duration = time.Since(start)
		res.Failures, res.Notes = r.failures, r.notes
		res.Pass = len(r.failures) == 0
		if r.out != nil {
			res.LogFile = r.out.Name()
			r.out.Close()
		}
	}()
	if err := r.setUp(ctx); err != nil {
		r.fail("set-up: %v", err)
		return res
	}
	r.log.Info("scenario started", "label", sp.label, "jobs", len(sp.jobs), "poison", len(r.poison),
		"queue", r.queueURL, "sqs_proxy", r.sqsProxy.Addr(), "ddb_proxy", r.ddbProxy.Addr())
	p, err := producer.New(e.sqs, producer.Config{QueueURL: r.queueURL})
	if err != nil {
		r.fail("producer: %v", err)
		return res
	}
	if err := preload(ctx, p, sp.jobs); err != nil {
		r.fail("%v", err)
		return res
	}
	r.log.Info("jobs preloaded", "jobs", len(sp.jobs))
	if err := r.startWorker(); err != nil {
		r.fail("%v", err)
		return res
	}
	if sp.script != nil {
		if err := sp.script(ctx, r); err != nil {
			r.fail("scenario: %v", err)
			if ctx.Err() != nil {
				return res
			}
		}
	}
	if err := r.drain(ctx); err != nil {
		r.fail("drain: %v", err)
		if ctx.Err() != nil {
			return res
		}
	}
	r.stopWorker()
	r.check(ctx, &res)
	return res
}

// setUp creates the scenario's log, proxies, queues and tables, each
// undone by cleanup.
func (r *run) setUp(ctx context.Context) error {
	f, err := os.OpenFile(filepath.Join(r.logDir, r.name+".log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("scenario log: %w", err)
	}
	r.out = f
	r.log = slog.New(slog.NewJSONHandler(f, nil)).With("runner", r.name)

	if r.sqsProxy, err = faultproxy.New(r.sqsEndpoint.Host); err != nil {
		return err
	}
	r.cleanups = append(r.cleanups, func(context.Context) { r.sqsProxy.Close() })
	if r.ddbProxy, err = faultproxy.New(r.ddbEndpoint.Host); err != nil {
		return err
	}
	r.cleanups = append(r.cleanups, func(context.Context) { r.ddbProxy.Close() })

	base := "chaos-" + r.name + "-" + randomSuffix()
	// A FIFO queue's name ends in .fifo, and its dead-letter queue is one
	// too.
	suffix, fifo := "", map[string]string{}
	if r.sp.fifo {
		suffix, fifo = ".fifo", map[string]string{"FifoQueue": "true"}
	}
	dlqURL, dlqARN, err := r.createQueue(ctx, base+"-dlq"+suffix, fifo)
	if err != nil {
		return err
	}
	r.dlqURL = dlqURL
	r.queueURL, _, err = r.createQueue(ctx, base+suffix, merge(fifo, map[string]string{
		"RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, dlqARN, r.sp.maxReceiveCount),
	}))
	if err != nil {
		return err
	}

	r.idemTable, r.effectsTable = base+"-idempotency", base+"-effects"
	r.cleanups = append(r.cleanups, func(ctx context.Context) { r.deleteTable(ctx, r.idemTable) })
	if err := idempotency.CreateTable(ctx, r.ddb, idempotency.StoreConfig{Table: r.idemTable}); err != nil {
		return err
	}
	r.cleanups = append(r.cleanups, func(ctx context.Context) { r.deleteTable(ctx, r.effectsTable) })
	return r.createEffectsTable(ctx)
}

// merge returns the attributes of a and b, b's where both have one.
func merge(a, b map[string]string) map[string]string {
	out := maps.Clone(a)
	maps.Copy(out, b)
	return out
}

func (r *run) createQueue(ctx context.Context, name string, attrs map[string]string) (url, arn string, err error) {
	a := map[string]string{"VisibilityTimeout": strconv.Itoa(int(visibilityTimeout / time.Second))}
	for k, v := range attrs {
		a[k] = v
	}
	out, err := r.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: &name, Attributes: a})
	if err != nil {
		return "", "", fmt.Errorf("creating queue %s: %w", name, err)
	}
	url = aws.ToString(out.QueueUrl)
	r.cleanups = append(r.cleanups, func(ctx context.Context) {
		if _, err := r.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: &url}); err != nil {
			r.log.Warn("deleting a queue", "queue", url, "error", err)
		}
	})
	ga, err := r.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return "", "", fmt.Errorf("reading queue %s: %w", name, err)
	}
	return url, ga.Attributes["QueueArn"], nil
}

func (r *run) createEffectsTable(ctx context.Context) error {
	_, err := r.ddb.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &r.effectsTable,
		AttributeDefinitions: []dtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: dtypes.ScalarAttributeTypeS}},
		KeySchema:            []dtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: dtypes.KeyTypeHash}},
		BillingMode:          dtypes.BillingModePayPerRequest,
	})
	if err != nil {
		return fmt.Errorf("creating table %s: %w", r.effectsTable, err)
	}
	for {
		out, err := r.ddb.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &r.effectsTable})
		if err != nil {
			return fmt.Errorf("waiting for table %s: %w", r.effectsTable, err)
		}
		if out.Table.TableStatus == dtypes.TableStatusActive {
			return nil
		}
		if !ctxsleep.Sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("waiting for table %s: %w", r.effectsTable, ctx.Err())
		}
	}
}

func (r *run) deleteTable(ctx context.Context, name string) {
	if _, err := r.ddb.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
		var missing *dtypes.ResourceNotFoundException
		if !errors.As(err, &missing) {
			r.log.Warn("deleting a table", "table", name, "error", err)
		}
	}
}

// cleanup kills the worker and undoes the set-up, last step first, whatever
// state the run is in.
func (r *run) cleanup() {
	if r.worker != nil && !r.worker.exited() {
		r.worker.kill()
		r.log.Info("worker killed at clean-up")
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i](ctx)
	}
	r.cleanups = nil
}

// startWorker starts a worker process against the proxies.
func (r *run) startWorker() error {
	if r.worker != nil && !r.worker.exited() {
		return errors.New("chaos: a worker is running already")
	}
	args := []string{
		"-queue-url", r.queueURL,
		"-effects-table", r.effectsTable,
		"-idempotency-table", r.idemTable,
		"-concurrency", strconv.Itoa(r.sp.concurrency),
	}
	args = append(args, r.workerArgs...)
	p, err := startProc(r.workerBin, args, workerEnv(r.sqsProxy.URL(), r.ddbProxy.URL()), r.out)
	if err != nil {
		return err
	}
	r.worker = p
	r.starts++
	r.log.Info("worker started", "pid", p.pid(), "start", r.starts)
	return nil
}

// killWorker kills the worker's process group with SIGKILL.
func (r *run) killWorker() {
	if r.worker == nil || r.worker.exited() {
		return
	}
	r.worker.kill()
	r.log.Info("worker killed", "pid", r.worker.pid(), "ran", time.Since(r.worker.started).Round(time.Millisecond))
}

// stopWorker stops the worker with SIGTERM, noting how it went.
func (r *run) stopWorker() {
	if r.worker == nil || r.worker.exited() {
		return
	}
	graceful, took := r.worker.terminate(stopTimeout)
	if !graceful {
		r.note("the worker did not stop within %s of SIGTERM; killed", stopTimeout)
		return
	}
	r.log.Info("worker stopped", "took", took.Round(time.Millisecond), "exit", r.worker.describeExit())
	if c := r.worker.exitCode(); c != 0 {
		r.note("the worker exited with code %d after SIGTERM", c)
	}
}

// watchWorker restarts a worker that exited by itself, noting it as a
// failure: nothing the scenarios do should make it stop.
func (r *run) watchWorker() {
	if r.worker == nil || !r.worker.exited() || r.worker.signalled.Load() {
		return
	}
	r.fail("the worker exited by itself (%s) after %s; restarted", r.worker.describeExit(),
		time.Since(r.worker.started).Round(time.Second))
	if err := r.startWorker(); err != nil {
		r.fail("restarting the worker: %v", err)
	}
}

// depth is a queue's message counts.
type depth struct{ visible, inFlight, delayed int }

func (d depth) total() int { return d.visible + d.inFlight + d.delayed }

func (d depth) String() string {
	return fmt.Sprintf("%d visible, %d in flight, %d delayed", d.visible, d.inFlight, d.delayed)
}

func (r *run) depth(ctx context.Context, url string) (depth, error) {
	out, err := r.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: &url,
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
			types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
		},
	})
	if err != nil {
		return depth{}, fmt.Errorf("reading the depth of %s: %w", url, err)
	}
	var d depth
	d.visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	d.inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	d.delayed, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)])
	return d, nil
}

// waitFor polls cond every 250ms, restarting a worker that exited, until it
// holds (true) or timeout passes (false). Its error is ctx's.
func (r *run) waitFor(ctx context.Context, timeout time.Duration, cond func() bool) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		r.watchWorker()
		if cond() {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		if !ctxsleep.Sleep(ctx, 250*time.Millisecond) {
			return false, ctx.Err()
		}
	}
}

// drain waits until the main queue is empty (three polls in a row, a
// second apart), restarting a worker that exited by itself. It gives up
// when the queue has not changed for the stall timeout, or at the drain
// deadline.
func (r *run) drain(ctx context.Context) error {
	start := time.Now()
	deadline := start.Add(r.drainDeadline)
	last, lastChange, empty := depth{visible: -1}, start, 0
	lastLog := start
	for {
		r.watchWorker()
		d, err := r.depth(ctx, r.queueURL)
		switch {
		case err != nil:
			r.log.Warn("polling the queue", "error", err)
		case d.total() == 0:
			empty++
			if empty >= 3 {
				r.log.Info("queue drained", "took", time.Since(start).Round(time.Millisecond))
				return nil
			}
		default:
			empty = 0
		}
		now := time.Now()
		if err == nil && d != last {
			last, lastChange = d, now
		}
		if now.Sub(lastLog) >= 10*time.Second {
			r.log.Info("draining", "depth", last.String())
			lastLog = now
		}
		if now.Sub(lastChange) > r.stallTimeout {
			return fmt.Errorf("the queue has not changed for %s: %s", r.stallTimeout, last)
		}
		if now.After(deadline) {
			return fmt.Errorf("not drained within %s: %s", r.drainDeadline, last)
		}
		if !ctxsleep.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// label names a scenario's row: its name, with the outage it has in this
// mode when that differs from the one in the name.
func label(name string, outage, named time.Duration) string {
	if outage == named {
		return name
	}
	return fmt.Sprintf("%s (%s)", name, outage)
}

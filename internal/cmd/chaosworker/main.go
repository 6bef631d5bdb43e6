// Command chaosworker is the worker process the chaos runner (package
// internal/chaos, `make chaos`) puts under faults: a worker.Worker with the
// idempotency middleware over a DynamoStore, whose handler records each job's
// effect as one more "applied" on the job's item of an effects table. The
// runner counts those: a job applied twice broke exactly-once, a job never
// applied was lost.
//
// It takes its settings from flags, or from the environment variables named
// in each flag's help, and the endpoints from the SDK's standard
// AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_DYNAMODB, which must be on the
// loopback interface. Jobs are JSON bodies:
//
//	{"id": "job-42", "sleep_ms": 50, "poison": "", "group": "g07", "seq": 3}
//
// id names the job's item (and should be its idempotency-key attribute);
// sleep_ms is how long the job works before its effect; group and seq,
// for a FIFO queue's job, name its message group and its place in it, which
// the effect appends to the group's order item (OrderItem), so that the
// runner can check that a group's effects were applied in order; poison, when set,
// makes the job broken: "permanent" (a Permanent error), "fail" (an error on
// every attempt) or "panic". A body that is not such an object (empty or
// blank, not JSON, an id that is not valid Unicode) is a Permanent error.
//
// The effect is committed with idempotency.AddWrites, in one
// TransactWriteItems with the completion of the job's idempotency record, so
// that the effect and the record exist together or not at all. With
// -effect=update-item it is a separate UpdateItem instead, before the
// completion: the two-write pattern, kept to compare runs with, which
// applies an effect twice when the worker dies between the writes or the
// UpdateItem's reply is lost.
//
// SIGTERM or SIGINT starts a graceful shutdown (worker.Shutdown with
// -shutdown-timeout); the process then exits 0. It exits 1 when the worker
// stops by itself with an error, 2 on bad settings.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/worker"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitSettings = 2
)

// EffectAttr is the counter of a job's item in the effects table: how many
// times its effect was applied.
const EffectAttr = "applied"

// maxKeyBytes is DynamoDB's limit on a partition key.
const maxKeyBytes = 2048

// settings are the command's flags.
type settings struct {
	queueURL, effectsTable, idemTable string
	concurrency                       int
	shutdownTimeout                   time.Duration
	logLevel                          slog.Level
	effect                            string
}

// The ways -effect writes a job's effect.
const (
	effectTransact   = "transact"
	effectUpdateItem = "update-item"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

func run(args []string, stderr io.Writer) int {
	s, err := parseSettings(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "chaosworker: %v\n", err)
		return exitSettings
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: s.logLevel})).
		With("pid", os.Getpid())
	slog.SetDefault(log)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	// startCtx ends at the first signal while the worker is being set up.
	startCtx, stopStart := context.WithCancel(context.Background())
	defer stopStart()
	early := make(chan os.Signal, 1)
	go func() { // owned: ends when setup is over (stopStart) or at a signal
		defer close(early)
		select {
		case sig := <-sigs:
			early <- sig
			stopStart()
		case <-startCtx.Done():
		}
	}()

	w, h, guard, err := setup(startCtx, s, log)
	stopStart()
	sig, signalled := <-early
	if signalled {
		// A signal during setup: stop now, once the worker is set up.
		select {
		case sigs <- sig:
		default: // another one is waiting already
		}
	}
	if err != nil {
		if signalled {
			log.Info("stopped before starting", "signal", sig.String())
			return exitOK
		}
		log.Error("setting up the worker", "error", err)
		return exitFailed
	}

	log.Info("chaosworker started", "queue_url", s.queueURL, "concurrency", s.concurrency,
		"effect", s.effect)
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(context.Background(), h) }() // owned: awaited below
	code := exitOK
	select {
	case err := <-runErr:
		log.Error("the worker stopped by itself", "error", err)
		code = exitFailed
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "timeout", s.shutdownTimeout)
		ctx, cancel := context.WithTimeout(context.Background(), s.shutdownTimeout)
		if err := w.Shutdown(ctx); err != nil {
			log.Warn("shutdown", "error", err)
		}
		cancel()
		if err := <-runErr; err != nil {
			log.Warn("run ended", "error", err)
		}
	}
	log.Info("chaosworker stopped", "worker", fmt.Sprintf("%+v", w.Stats()),
		"idempotency", fmt.Sprintf("%+v", guard.Stats()))
	return code
}

func parseSettings(args []string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("chaosworker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var s settings
	fs.StringVar(&s.queueURL, "queue-url", os.Getenv("CHAOSWORKER_QUEUE_URL"), "queue to consume (env CHAOSWORKER_QUEUE_URL)")
	fs.StringVar(&s.effectsTable, "effects-table", os.Getenv("CHAOSWORKER_EFFECTS_TABLE"), "DynamoDB table of the jobs' effects, key \"id\" (env CHAOSWORKER_EFFECTS_TABLE)")
	fs.StringVar(&s.idemTable, "idempotency-table", os.Getenv("CHAOSWORKER_IDEMPOTENCY_TABLE"), "DynamoDB table of the idempotency records (env CHAOSWORKER_IDEMPOTENCY_TABLE)")
	conc := 16
	if v := os.Getenv("CHAOSWORKER_CONCURRENCY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return s, fmt.Errorf("CHAOSWORKER_CONCURRENCY %q: %w", v, err)
		}
		conc = n
	}
	fs.IntVar(&s.concurrency, "concurrency", conc, "handlers at once (env CHAOSWORKER_CONCURRENCY)")
	fs.DurationVar(&s.shutdownTimeout, "shutdown-timeout", 25*time.Second, "deadline of the graceful shutdown at SIGTERM")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	effect := os.Getenv("CHAOSWORKER_EFFECT")
	if effect == "" {
		effect = effectTransact
	}
	fs.StringVar(&s.effect, "effect", effect, "how the effect is written: transact (idempotency.AddWrites, with the completion) or update-item (a separate UpdateItem, before it) (env CHAOSWORKER_EFFECT)")
	if err := fs.Parse(args); err != nil {
		return s, err
	}
	if err := s.logLevel.UnmarshalText([]byte(*level)); err != nil {
		return s, fmt.Errorf("-log-level: %w", err)
	}
	var errs []error
	if s.queueURL == "" {
		errs = append(errs, errors.New("-queue-url is required"))
	}
	if s.effectsTable == "" {
		errs = append(errs, errors.New("-effects-table is required"))
	}
	if s.idemTable == "" {
		errs = append(errs, errors.New("-idempotency-table is required"))
	}
	if s.concurrency < 1 {
		errs = append(errs, fmt.Errorf("-concurrency %d is below 1", s.concurrency))
	}
	if s.effect != effectTransact && s.effect != effectUpdateItem {
		errs = append(errs, fmt.Errorf("-effect %q is neither %s nor %s", s.effect, effectTransact, effectUpdateItem))
	}
	if s.shutdownTimeout <= 0 {
		errs = append(errs, fmt.Errorf("-shutdown-timeout %s is not positive", s.shutdownTimeout))
	}
	for _, svc := range []string{"SQS", "DYNAMODB"} {
		e := os.Getenv("AWS_ENDPOINT_URL_" + svc)
		if e == "" {
			e = os.Getenv("AWS_ENDPOINT_URL")
		}
		if !isLoopback(e) {
			errs = append(errs, fmt.Errorf("AWS_ENDPOINT_URL_%s %q is not an endpoint on the loopback interface: chaosworker only runs against a local stack", svc, e))
		}
	}
	return s, errors.Join(errs...)
}

// isLoopback reports whether an endpoint URL points to this machine.
func isLoopback(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// setup builds the worker and its handler. The idempotency store's table
// check is retried while DynamoDB cannot be reached, until ctx ends.
func setup(ctx context.Context, s settings, log *slog.Logger) (*worker.Worker, sqsworker.Handler, *idempotency.Guard, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loading the AWS config: %w", err)
	}
	// DynamoDB Local's error replies carry no checksum, which would make the
	// SDK log a warning on every failed condition; the endpoint is local.
	ddb := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true })
	var store *idempotency.DynamoStore
	for attempt := 1; ; attempt++ {
		store, err = idempotency.NewDynamoStore(ctx, ddb, idempotency.StoreConfig{Table: s.idemTable})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, nil, nil, fmt.Errorf("opening the idempotency store: %w", ctx.Err())
		}
		if attempt >= 30 || !transient(err) {
			return nil, nil, nil, fmt.Errorf("opening the idempotency store: %w", err)
		}
		log.Warn("opening the idempotency store failed, retrying", "error", err, "attempt", attempt)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(min(attempt, 5)) * time.Second):
		}
	}
	guard, err := idempotency.New(store, idempotency.Config{CacheSize: 10000, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("idempotency middleware: %w", err)
	}
	w, err := worker.New(sqs.NewFromConfig(cfg), worker.Config{
		QueueURL:    s.queueURL,
		Concurrency: s.concurrency,
		Logger:      log,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("worker: %w", err)
	}
	h := &handler{ddb: ddb, table: s.effectsTable, transact: s.effect == effectTransact}
	return w, sqsworker.Chain(h, guard.Middleware), guard, nil
}

// Job is the body of a chaos job.
type Job struct {
	// ID names the job's item in the effects table.
	ID string `json:"id"`
	// SleepMS is how long the job works before its effect, in
	// milliseconds.
	SleepMS int `json:"sleep_ms,omitempty"`
	// Poison, when set, makes the job broken: "permanent", "fail" or
	// "panic".
	Poison string `json:"poison,omitempty"`
	// Group is a FIFO job's message group, whose order item records Seq
	// with the job's effect; "" for none.
	Group string `json:"group,omitempty"`
	// Seq is the job's place in its group: 1, 2, ...
	Seq int `json:"seq,omitempty"`
	// Pad is ignored: it makes bodies large.
	Pad string `json:"pad,omitempty"`
}

// maxSleep bounds SleepMS.
const maxSleep = 15 * time.Minute

// maxGroupBytes is SQS's limit on a message group ID.
const maxGroupBytes = 128

// ParseJob reads a job's body. Every error it returns is Permanent: no
// retry makes a broken body readable.
func ParseJob(body string) (Job, error) {
	var j Job
	if strings.TrimSpace(body) == "" {
		return j, sqsworker.Permanent(errors.New("chaos job: the body is empty or blank"))
	}
	if !utf8.ValidString(body) {
		return j, sqsworker.Permanent(errors.New("chaos job: the body is not valid UTF-8"))
	}
	dec := json.NewDecoder(strings.NewReader(body))
	if err := dec.Decode(&j); err != nil {
		return j, sqsworker.Permanent(fmt.Errorf("chaos job: the body is not a JSON job: %w", err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return j, sqsworker.Permanent(errors.New("chaos job: the body has data after the JSON object"))
	}
	switch {
	case j.ID == "":
		return j, sqsworker.Permanent(errors.New("chaos job: no id"))
	case strings.ContainsRune(j.ID, utf8.RuneError):
		// encoding/json turns invalid UTF-8 and lone surrogate escapes
		// ("\ud800") into U+FFFD: the id was not valid Unicode.
		return j, sqsworker.Permanent(errors.New("chaos job: the id is not valid Unicode (it holds U+FFFD: an invalid UTF-8 sequence or a lone surrogate)"))
	case len(j.ID) > maxKeyBytes:
		return j, sqsworker.Permanent(fmt.Errorf("chaos job: the id is %d bytes, over DynamoDB's %d", len(j.ID), maxKeyBytes))
	case j.SleepMS < 0 || time.Duration(j.SleepMS)*time.Millisecond > maxSleep:
		return j, sqsworker.Permanent(fmt.Errorf("chaos job: sleep_ms %d is outside 0..%d", j.SleepMS, maxSleep.Milliseconds()))
	case len(j.Group) > maxGroupBytes || strings.ContainsRune(j.Group, utf8.RuneError):
		return j, sqsworker.Permanent(fmt.Errorf("chaos job: the group is over %d bytes or not valid Unicode", maxGroupBytes))
	case j.Seq < 0 || (j.Seq > 0) != (j.Group != ""):
		return j, sqsworker.Permanent(fmt.Errorf("chaos job: seq %d: want a positive seq with a group, none without", j.Seq))
	}
	switch j.Poison {
	case "", "permanent", "fail", "panic":
	default:
		return j, sqsworker.Permanent(fmt.Errorf("chaos job: unknown poison %q", j.Poison))
	}
	return j, nil
}

// handler runs chaos jobs.
type handler struct {
	ddb   *dynamodb.Client
	table string
	// transact commits the effect with the idempotency record's
	// completion; else it is an UpdateItem of its own.
	transact bool
}

// errPoison is the failure of a job poisoned with "fail".
var errPoison = errors.New("chaos job: poisoned to fail on every attempt")

// HandleMessage runs one job: it works for the job's sleep, then applies its
// effect once.
func (h *handler) HandleMessage(ctx context.Context, m *sqsworker.Message) error {
	j, err := ParseJob(m.Body)
	if err != nil {
		return err
	}
	switch j.Poison {
	case "permanent":
		return sqsworker.Permanent(errors.New("chaos job: poisoned to fail permanently"))
	case "fail":
		return errPoison
	case "panic":
		panic("chaos job: poisoned to panic")
	}
	if j.SleepMS > 0 {
		t := time.NewTimer(time.Duration(j.SleepMS) * time.Millisecond)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("chaos job %s: stopped while working: %w", j.ID, context.Cause(ctx))
		}
	}
	return h.applyEffect(ctx, j, m.ReceiveCount)
}

// EffectWrite is a job's effect as a transactional write: one more
// application on the job's item, and the receive of its message that
// applied it (ReceiveAttr).
func EffectWrite(table, id string, receive int) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("ADD #applied :one SET #receive = :receive"),
		ExpressionAttributeNames:  map[string]string{"#applied": EffectAttr, "#receive": ReceiveAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}, ":receive": &types.AttributeValueMemberN{Value: strconv.Itoa(receive)}},
	}}
}

// ReceiveAttr is the receive count of the message whose run applied a
// job's effect last (its ApproximateReceiveCount): how close to the
// redrive policy's maxReceiveCount the job came.
const ReceiveAttr = "receive"

// OrderAttr is the list of an order item: the Seq of each job of its group
// whose effect was applied, in the order they were applied.
const OrderAttr = "order"

// OrderItem is the id of a message group's order item in the effects
// table.
func OrderItem(group string) string { return "order#" + group }

// OrderWrite is a FIFO job's place in its group, appended to the group's
// order item with its effect.
func OrderWrite(table, group string, seq int) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(table),
		Key:                      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: OrderItem(group)}},
		UpdateExpression:         aws.String("SET #order = list_append(if_not_exists(#order, :empty), :seq)"),
		ExpressionAttributeNames: map[string]string{"#order": OrderAttr},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":empty": &types.AttributeValueMemberL{Value: []types.AttributeValue{}},
			":seq":   &types.AttributeValueMemberL{Value: []types.AttributeValue{&types.AttributeValueMemberN{Value: strconv.Itoa(seq)}}},
		},
	}}
}

// applyEffect records the job's effect, and a FIFO job's place in its
// group: with the completion of its idempotency record, or at once with
// UpdateItems of their own.
func (h *handler) applyEffect(ctx context.Context, j Job, receive int) error {
	ws := []types.TransactWriteItem{EffectWrite(h.table, j.ID, receive)}
	if j.Group != "" {
		ws = append(ws, OrderWrite(h.table, j.Group, j.Seq))
	}
	if h.transact {
		// Committed by the middleware when the handler returns nil, in one
		// TransactWriteItems with the completion.
		if err := idempotency.AddWrites(ctx, ws...); err != nil {
			return fmt.Errorf("chaos job %s: adding its effect: %w", j.ID, err)
		}
		return nil
	}
	// Separate writes: a crash after the effect and before the completion,
	// or a reply lost after the effect was applied, applies it twice.
	for _, w := range ws {
		u := w.Update
		_, err := h.ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
			ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		})
		if err != nil {
			err = fmt.Errorf("chaos job %s: recording its effect: %w", j.ID, err)
			if transient(err) && ctx.Err() == nil {
				return sqsworker.Unavailable(err) // DynamoDB is down: not the job's fault
			}
			return err
		}
	}
	return nil
}

// transient reports whether err is DynamoDB being unreachable, throttled
// or failing on its side, rather than a request it refuses.
func transient(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
			"InternalServerError", "ServiceUnavailable":
			return true
		}
		return api.ErrorFault() == smithy.FaultServer
	}
	return true // no answer at all: the network, a refused or reset connection
}

package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/spf13/cobra"
	"golang.org/x/sync/semaphore"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/dlq"
	"github.com/sqsworker/sqsworker/ecsprotect"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/metrics"
	"github.com/sqsworker/sqsworker/worker"
)

func init() {
	commands = append(commands, newRunCmd)
}

// Exit codes of a command, from sysexits.h.
const (
	exitTempFail = 75 // EX_TEMPFAIL: retry later
	exitDataErr  = 65 // EX_DATAERR: permanent failure
)

// Defaults of run's flags.
const (
	defaultRetryAfter = 30 * time.Second
	// retryAfterEnv sets the default of --retry-after.
	retryAfterEnv = "SQSWORKER_RETRY_AFTER"
	// defaultKillAfter is how long a command has to exit after SIGTERM
	// before its process group is killed.
	defaultKillAfter = 10 * time.Second
	// defaultHTTPTimeout is the handler timeout with --http, and the
	// response-header timeout.
	defaultHTTPTimeout = 5 * time.Minute
	// defaultTotalsInterval is how often run logs its totals.
	defaultTotalsInterval = time.Minute
	// maxOutputLine is the longest line of a command's output passed on
	// as one; longer ones are split.
	maxOutputLine = 64 << 10
	// maxEnvVar is the longest variable of a command's environment Linux
	// accepts, "NAME=value" (MAX_ARG_STRLEN, 128 KiB, with its NUL).
	maxEnvVar = 128<<10 - 1
	// groupGiveUp is how long after SIGKILL a stopped command's process
	// group is waited for.
	groupGiveUp = 5 * time.Second
)

type runFlags struct {
	concurrency           int
	visibilityTimeout     time.Duration
	handlerTimeout        time.Duration
	responseHeaderTimeout time.Duration
	shutdownTimeout       time.Duration
	killAfter             time.Duration
	wait                  time.Duration
	retryAfter            time.Duration
	totalsInterval        time.Duration
	httpURL               string
	httpHealth            string
	contentType           string
	logLevel              string
	metrics               string
	namespace             string
	handlerName           string
	queues                []string
	// force runs a queue that is another's dead-letter queue.
	force     bool
	rateLimit float64
	// scaleInProtection keeps the ECS task protected from scale-in while
	// a job has run for protectAfter.
	scaleInProtection bool
	protectAfter      time.Duration
}

func newRunCmd(a *app) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run (QUEUE | --queue NAME[:PRIORITY[:RESERVED]]...) (-- COMMAND [ARGS...] | --http URL)",
		Short: "Run a worker that hands each message to a command or an HTTP endpoint",
		Long: `Run a worker on a queue (by name, URL or ARN) that hands each message to a command
or POSTs it to an HTTP endpoint, until interrupted (SIGINT or SIGTERM), then
shut down gracefully: stop receiving and let the long polls under way end
(up to --wait), let running handlers finish (up to --shutdown-timeout: 25s
with --http, 25s less --kill-after for a command, so that its SIGTERM grace
ends within 25s too, under ECS's default 30s stop timeout),
make unstarted messages visible again, send pending deletes. Ctrl-C again
(or a second SIGTERM) stops at once: receives and handlers are cut short, their
messages made visible again, pending deletes sent. Every minute
(--totals-interval), and at the end, run logs its totals at info level.

The worker is sqsworker's: up to --concurrency messages at once, batched
deletes, retries with exponential backoff through the visibility timeout,
visibility heartbeats for long jobs, and moves to the queue's dead-letter
queue (its redrive policy) with failure metadata. Message bodies are never
logged; the worker's logs go to stderr. A queue that is another's
dead-letter queue is refused (its jobs go back with sqsworker dlq replay;
--force runs it anyway), and one without a dead-letter queue is warned of.

A COMMAND (after --) runs once per message, with the body on stdin and in its
environment:

  SQS_MESSAGE_ID      the message ID
  SQS_JOB_KEY         the job's key, the same for every copy of the job (its
                      idempotency-key attribute, else the ID of the message
                      it was first sent as): deduplicate on it, not on the
                      message ID, which a copy the worker makes changes
  SQS_RECEIVE_COUNT   the receive count: 1 on the first attempt
  SQS_GROUP_ID        the message group (FIFO queues; else empty)
  SQS_QUEUE_URL       the queue's URL
  SQS_ATTR_<NAME>     each message attribute, the name upper-cased with every
                      character other than A-Z and 0-9 made _ (tenant-id is
                      SQS_ATTR_TENANT_ID); Binary values in base64. When two
                      names give the same variable, the last in byte order wins.

Its stdout and stderr go to sqsworker's stderr, each line prefixed with
"[MESSAGE-ID] ". Its exit status decides the message's fate:

  0            done: the message is deleted
  75           EX_TEMPFAIL, what the job needs is down: the message comes
               back after --retry-after (default 30s, or
               $SQSWORKER_RETRY_AFTER), counts toward the circuit breaker,
               and is never dead-lettered
  65           EX_DATAERR, permanent failure: the message goes to the
               dead-letter queue at once
  other, or    failure: retried with backoff, to the dead-letter queue after
  a signal     the redrive policy's maxReceiveCount

Each command runs in a process group of its own. A command still running at
--handler-timeout, or at the end of the shutdown wait, gets SIGTERM, and so
does every process it started; the group gets SIGKILL --kill-after (10s)
later, and its message is retried only once no process of the group is
left, so that no effect of the old attempt can happen alongside the retry. A
Ctrl-C in the terminal reaches sqsworker only, which stops as above.

A message attribute over 128 KiB cannot be passed in the environment (Linux's
limit on a variable): its message fails as a permanent failure, as does one
the system refuses to start the command for (E2BIG: the environment and the
arguments together too large).

As PID 1 (a container's init, without tini or ECS's initProcessEnabled),
sqsworker also reaps the orphaned processes handed to it, so that they do
not stay zombies.

With --http URL, each message is POSTed to URL (like Elastic Beanstalk's
sqsd), with the body as the request body and the headers

  X-Sqs-Message-Id      the message ID
  X-Sqs-Job-Key         the job's key, as SQS_JOB_KEY above: deduplicate
                        on it; percent-encoded if it cannot be a header
                        value, and then X-Sqs-Job-Key-Encoded: true
  X-Sqs-Receive-Count   the receive count
  X-Sqs-Group-Id        the message group (FIFO queues)
  X-Sqs-Attr-<Name>     each message attribute; Binary values in base64,
                        String values that cannot be header values (line
                        breaks, control characters) percent-encoded and their
                        names listed in X-Sqs-Encoded-Attrs

The response status decides:

  2xx                  done: the message is deleted
  429, 503             the application is busy or down: retry after the
                       Retry-After header (seconds or an HTTP date), else
                       after --retry-after; counts toward the circuit
                       breaker, never dead-lettered
  401, 405, 407, 421   the endpoint refuses the request, not the job (a
                       wrong method or credentials): counts toward the
                       circuit breaker, never dead-lettered
  connection refused,  the application is not there (yet), or not reachable
  reset or closed,     as configured: retried, counts toward the circuit
  unknown host, dial   breaker, never dead-lettered; but a job on which the
  timeout, TLS         connection was reset or closed with no answer runs
  certificate refused  alone after, until answered; reset so 3 times, the
                       application answering other jobs in between (or
                       --http-health within 10s of each reset), it is taken to
                       crash the application: from then on a failure, to
                       the dead-letter queue after the redrive policy's
                       maxReceiveCount. With no other job running and no
                       --http-health, nothing tells that from the
                       application down, and the job is retried
  other 4xx (400, 403, permanent failure: to the dead-letter queue at once
  404, 410, 422, ...),
  or any 4xx with the
  header
  X-Sqs-Permanent: true
  408, 409, 425, 5xx,  failure: retried with backoff, to the dead-letter
  3xx (redirects are   queue after the redrive policy's maxReceiveCount;
  not followed),       a timeout no sooner than the time the request was
  timeouts             given, as the application may still run the job

With --http, a request may take --handler-timeout (default 5m; 0 for none)
in all, and wait --response-header-timeout (default 5m, or the handler
timeout when it is longer; none with --handler-timeout 0) for the response to start: a stuck endpoint holds
a handler slot no longer. The URL is logged without its user information and
query string, which may hold secrets; they are sent.

429, 503 and connection errors count toward the circuit breaker: after 5 in
a row sqsworker stops receiving and probes the application with one message
every few seconds (5s, doubling up to 60s) until two probes succeed, so that
an application that starts after sqsworker, or restarts, does not spend the
messages' receive counts and fill the dead-letter queue.

Failures are logged and dead-lettered with an error class: exit-N (a
command's exit status), killed-by-signal, timeout (--handler-timeout),
shutdown, environment-too-large, command-not-started, http-3xx, http-4xx,
http-5xx, http-429, http-503, connection-refused, connection-reset, dns,
tls.

Without a dead-letter queue, permanent failures are logged and retried with
backoff like other failures. The exit status of sqsworker run is 0 after a
graceful shutdown, 1 when the queue cannot be used, 2 for a mistake in the
command line, 130 when a second Ctrl-C stopped it at once. With --queue,
each queue given by name or ARN is looked up at the start, and one that
cannot be found stops sqsworker with 1; once running, a queue SQS refuses
(deleted, access revoked, its key disabled, its deletes denied) does not
stop the others: it is tried again after 10s, doubling up to 5m, and
logged at each try; sqsworker exits 1 when no queue can be used, or when a
queue does not fit the flags at start.

Priority queues: instead of QUEUE, give --queue NAME[:PRIORITY[:RESERVED]]
once per queue (a name, a URL or an ARN). One worker then consumes them all from one
pool of --concurrency handler slots: a slot that frees goes to the
highest-PRIORITY queue that has messages (0 is the lowest, the default), and
while a queue has messages the queues below it use only their RESERVED slots,
which no other queue may take (default 0). Each queue keeps its own
heartbeats, retries and dead-letter queue; an idle queue costs one long poll
per --wait (3 receives a minute at 20s). The command gets SQS_QUEUE_URL to
tell the queues apart. --rate-limit caps the messages received per second
over all the queues: without tokens, no receive is made.

Scale-in protection: in a task of an ECS service, --scale-in-protection
keeps the task protected from scale-in (and from being replaced by a
deployment) while a job has run for --scale-in-protection-after (default
10s), through the ECS agent's task protection endpoint, and removes the
protection once no such job runs. A scale-in then waits for long jobs
rather than cutting them at the end of the shutdown wait, each cut
spending one of the job's receives. Shorter jobs do not protect the task:
they finish within the shutdown wait. A task protected for 2 hours without
a pause is unprotected until it has had no long job, so that deployments
go on. The task role needs ecs:UpdateTaskProtection on the cluster's
tasks; a refusal is logged, and the worker runs on unprotected. A
protection lasts an hour, renewed while the job runs: it outlives a hung
sqsworker by an hour at most.`,
		Example: `  # A script per message; the body on stdin
  sqsworker run orders -- ./process-order.sh

  # A shell pipeline, 4 at a time, each allowed 5 minutes
  sqsworker run orders --concurrency 4 --handler-timeout 5m -- sh -c 'jq .id >> ids.txt'

  # Three priority queues over 32 slots, 4 of them kept for critical
  sqsworker run --concurrency 32 --queue critical:2:4 --queue normal:1 --queue bulk -- ./job.sh

  # An HTTP endpoint, like Elastic Beanstalk's worker environments
  sqsworker run https://sqs.eu-west-1.amazonaws.com/123456789012/orders --http http://127.0.0.1:8080/jobs`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(f.queues) > 0 {
				return checkQueuesRunArgs(cmd.ArgsLenAtDash(), args, f.httpURL)
			}
			return checkRunArgs(cmd.ArgsLenAtDash(), args, f.httpURL)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("retry-after") {
				if v := os.Getenv(retryAfterEnv); v != "" {
					d, err := time.ParseDuration(v)
					if err != nil {
						return usageError{fmt.Errorf("$%s %q: want a duration such as 30s", retryAfterEnv, v)}
					}
					f.retryAfter = d
				}
			}
			if !cmd.Flags().Changed("shutdown-timeout") {
				f.shutdownTimeout = worker.DefaultShutdownTimeout
				if f.httpURL == "" {
					f.shutdownTimeout = commandShutdownTimeout(f.killAfter)
				}
			}
			if f.httpURL != "" && !cmd.Flags().Changed("handler-timeout") {
				f.handlerTimeout = defaultHTTPTimeout
			}
			if !cmd.Flags().Changed("response-header-timeout") {
				f.responseHeaderTimeout = max(defaultHTTPTimeout, f.handlerTimeout)
				if f.handlerTimeout == 0 {
					f.responseHeaderTimeout = 0 // --handler-timeout 0: none
				}
			}
			if len(f.queues) > 0 {
				return a.run(cmd.Context(), f, "", args)
			}
			return a.run(cmd.Context(), f, args[0], args[1:])
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.concurrency, "concurrency", worker.DefaultConcurrency, "most messages handled at once")
	fl.DurationVar(&f.visibilityTimeout, "visibility-timeout", 0, "visibility timeout asked for on each receive, whole seconds up to 12h (default: the queue's)")
	fl.DurationVar(&f.handlerTimeout, "handler-timeout", 0, "longest a command or request may run; 0 for none (default: none for a command, the heartbeat keeps long jobs invisible; 5m with --http)")
	fl.DurationVar(&f.responseHeaderTimeout, "response-header-timeout", 0, "with --http, longest wait for the response's headers once the request is sent; 0 for none (default 5m, or --handler-timeout when longer)")
	fl.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 0, "on SIGINT or SIGTERM, longest wait for running handlers before they are stopped (default: 25s with --http; for a command 25s less --kill-after, 15s)")
	fl.DurationVar(&f.killAfter, "kill-after", defaultKillAfter, "time a command stopped with SIGTERM has before its process group gets SIGKILL")
	fl.DurationVar(&f.totalsInterval, "totals-interval", defaultTotalsInterval, "how often the totals are logged; 0 for only at the end")
	fl.DurationVar(&f.wait, "wait", worker.DefaultWaitTime, "long-poll wait of each receive, whole seconds from 1s to 20s")
	fl.DurationVar(&f.retryAfter, "retry-after", defaultRetryAfter, "delay before a retry asked for by exit status 75, or by a 429 or 503 without Retry-After; $"+retryAfterEnv+" sets the default")
	fl.BoolVar(&f.force, "force", false, "run a queue that is another queue's dead-letter queue (refused otherwise: replay its jobs with sqsworker dlq replay)")
	fl.StringVar(&f.httpURL, "http", "", "POST each message to this http:// or https:// `URL` instead of running a command (logged without its user information and query)")
	fl.StringVar(&f.httpHealth, "http-health", "", "with --http, a `PATH` (or URL; a path is taken relative to --http's URL, without its query) that the application process itself answers to GET with 2xx when it is up, not a proxy or a load balancer in front of it: asked for up to 10s after a request reset with no answer (an application slower to come back is taken for down), so that a job that crashes the application is told from the application down with no other job running (see --http above)")
	fl.StringVar(&f.contentType, "content-type", "application/json", "Content-Type of the requests of --http")
	fl.StringVar(&f.logLevel, "log-level", "info", "level of the worker's logs: debug, info, warn or error")
	fl.StringVar(&f.metrics, "metrics", "none", "metrics sink: none, or emf (CloudWatch Embedded Metric Format on stdout, for the awslogs driver)")
	fl.StringVar(&f.namespace, "metrics-namespace", "sqsworker", "CloudWatch namespace of the EMF metrics")
	fl.StringVar(&f.handlerName, "handler-name", "handler", "handler dimension of the metrics")
	fl.StringArrayVar(&f.queues, "queue", nil, "a priority queue, `NAME[:PRIORITY[:RESERVED]]`, instead of QUEUE; repeat for each queue (see Priority queues above)")
	fl.Float64Var(&f.rateLimit, "rate-limit", 0, "most messages received per second, over all the queues; 0 for no limit")
	fl.BoolVar(&f.scaleInProtection, "scale-in-protection", false, "in an ECS service's task, keep the task protected from scale-in while a job has run for --scale-in-protection-after (see Scale-in protection above)")
	fl.DurationVar(&f.protectAfter, "scale-in-protection-after", ecsprotect.DefaultAfter, "how long a job runs before --scale-in-protection protects the task for it")
	return cmd
}

// commandShutdownTimeout is --shutdown-timeout's default for a command:
// the worker's default less killAfter, at least a second, so that the
// graceful stop, with a command's SIGTERM-to-SIGKILL grace after it, ends
// within worker.DefaultShutdownTimeout, and so within ECS's default stop
// timeout (30s), after which ECS kills sqsworker before it has released
// the messages of the commands it stopped.
func commandShutdownTimeout(killAfter time.Duration) time.Duration {
	return max(worker.DefaultShutdownTimeout-killAfter, time.Second)
}

// checkRunArgs checks run's arguments: a queue, then a command after -- or
// --http.
func checkRunArgs(dash int, args []string, httpURL string) error {
	const usage = "; usage: sqsworker run QUEUE -- COMMAND [ARGS...] or sqsworker run QUEUE --http URL"
	switch {
	case len(args) == 0 || dash == 0:
		return usageError{errors.New("run takes a QUEUE" + usage)}
	case dash < 0 && len(args) > 1:
		return usageError{fmt.Errorf("put the command after --, as in: sqsworker run %s -- %s", args[0], strings.Join(args[1:], " "))}
	case dash > 1:
		return usageError{errors.New("run takes one QUEUE before --" + usage)}
	case dash == 1 && len(args) == 1:
		return usageError{errors.New("no command after --" + usage)}
	case dash == 1 && httpURL != "":
		return usageError{errors.New("give either a command after -- or --http, not both")}
	case dash < 0 && httpURL == "":
		return usageError{errors.New("no command after -- and no --http URL" + usage)}
	}
	return nil
}

// checkQueuesRunArgs checks run's arguments with --queue: no QUEUE, a
// command after -- or --http.
func checkQueuesRunArgs(dash int, args []string, httpURL string) error {
	const usage = "; usage: sqsworker run --queue NAME[:PRIORITY[:RESERVED]]... -- COMMAND [ARGS...] or ... --http URL"
	switch {
	case dash > 0 || (dash < 0 && len(args) > 0):
		return usageError{fmt.Errorf("give the queues either as QUEUE or with --queue, not both (got %q before --)%s", args[0], usage)}
	case dash == 0 && len(args) == 0:
		return usageError{errors.New("no command after --" + usage)}
	case dash == 0 && httpURL != "":
		return usageError{errors.New("give either a command after -- or --http, not both")}
	case dash < 0 && httpURL == "":
		return usageError{errors.New("no command after -- and no --http URL" + usage)}
	}
	return nil
}

// check checks the flags, naming each bad one.
func (f runFlags) check() (slog.Level, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.concurrency < 1 {
		bad("--concurrency %d: want at least 1", f.concurrency)
	}
	if v := f.visibilityTimeout; v < 0 || v > sqsworker.MaxVisibilityTimeout || v%time.Second != 0 {
		bad("--visibility-timeout %s: want whole seconds up to 12h", v)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"--handler-timeout", f.handlerTimeout}, {"--response-header-timeout", f.responseHeaderTimeout},
		{"--shutdown-timeout", f.shutdownTimeout}, {"--kill-after", f.killAfter}, {"--totals-interval", f.totalsInterval},
	} {
		if d.v < 0 {
			bad("%s %s is negative", d.name, d.v)
		}
	}
	if w := f.wait; w < time.Second || w > worker.MaxWaitTime || w%time.Second != 0 {
		bad("--wait %s: want whole seconds from 1s to 20s", w)
	}
	if r := f.retryAfter; r < 0 || r > sqsworker.MaxVisibilityTimeout {
		bad("--retry-after %s: want 0s to 12h", r)
	}
	httpBad := false
	if f.httpURL != "" {
		u, err := url.Parse(f.httpURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("--http %q: want an http:// or https:// URL", redactURL(f.httpURL))
			httpBad = true
		}
	}
	if f.httpHealth != "" && !httpBad { // a bad --http is said once, above
		if _, err := healthURL(f.httpURL, f.httpHealth); err != nil {
			bad("--http-health %q: %v", redactURL(f.httpHealth), err)
		}
	}
	if f.rateLimit < 0 {
		bad("--rate-limit %v: want messages per second, 0 for no limit", f.rateLimit)
	}
	if f.protectAfter <= 0 {
		bad("--scale-in-protection-after %s: want a positive duration", f.protectAfter)
	}
	if f.scaleInProtection && os.Getenv(ecsprotect.AgentURIEnv) == "" {
		bad("--scale-in-protection: $%s is not set: run sqsworker in a task of an ECS service, or leave the flag out", ecsprotect.AgentURIEnv)
	}
	if _, err := parseQueueSpecs(f.queues); err != nil {
		errs = append(errs, err)
	}
	if f.metrics != "none" && f.metrics != "emf" {
		bad("--metrics %q: want none or emf", f.metrics)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		bad("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	if len(errs) > 0 {
		return level, usageError{errors.Join(errs...)}
	}
	return level, nil
}

func (a *app) run(ctx context.Context, f runFlags, queueArg string, command []string) error {
	level, err := f.check()
	if err != nil {
		return err
	}
	var path string
	if len(command) > 0 {
		if path, err = exec.LookPath(command[0]); err != nil {
			return usageError{fmt.Errorf("command %q: %w", command[0], errors.Unwrap(err))}
		}
	}
	specs, _ := parseQueueSpecs(f.queues) // checked
	if len(specs) == 0 {
		specs = []queueSpec{{name: queueArg}}
	}
	urls := make([]string, len(specs))
	for i, spec := range specs {
		if urls[i], err = resolveQueueArg(ctx, a, spec.name); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	queueURL := urls[0]
	c, err := a.sqs(ctx)
	if err != nil {
		return err
	}
	if !f.force {
		for _, u := range urls {
			if err := refuseDeadLetterQueue(ctx, c, u, a.errs); err != nil {
				return err
			}
		}
	}

	// The worker's logs and the commands' output share stderr, a line at
	// a time.
	out := a.errs
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))
	if os.Getpid() == 1 {
		defer startReaper(log)()
	}
	var h sqsworker.Handler
	if len(command) > 0 {
		h = &commandHandler{path: path, args: command[1:], queueURL: queueURL, env: runBaseEnv(os.Environ()), out: out,
			retryAfter: f.retryAfter, timeout: f.handlerTimeout, killAfter: f.killAfter, killNow: stopNow(ctx), log: log}
		log.Info("handing each message to a command", "command", command[0])
	} else {
		hh := newHTTPHandler(f.httpURL, f.contentType, f.concurrency, f.retryAfter, f.responseHeaderTimeout)
		hh.timeout = f.handlerTimeout
		if f.httpHealth != "" {
			hh.health, _ = healthURL(f.httpURL, f.httpHealth) // checked with the flags
		}
		defer hh.client.CloseIdleConnections()
		h = hh
		log.Info("handing each message to an HTTP endpoint", "url", hh.logURL,
			"handler_timeout", f.handlerTimeout, "response_header_timeout", f.responseHeaderTimeout)
	}

	if f.scaleInProtection {
		p, err := ecsprotect.New(ecsprotect.Config{After: f.protectAfter, Logger: log})
		if err != nil {
			return usageError{fmt.Errorf("--scale-in-protection: %w", err)}
		}
		if unguarded := f.protectAfter + p.Interval(); unguarded > f.shutdownTimeout {
			log.Warn("a job that runs between the shutdown timeout and the time it takes to protect the task is neither protected nor finished by a scale-in: lower --scale-in-protection-after, or raise --shutdown-timeout",
				"shutdown_timeout", f.shutdownTimeout, "protected_within", unguarded)
		}
		h = sqsworker.Chain(h, p.Middleware())
		var wg sync.WaitGroup
		pctx, stop := context.WithCancel(ctx) // ended by the first interrupt, or on return
		wg.Go(func() { _ = p.Run(pctx) })
		defer func() { stop(); wg.Wait() }()
		log.Info("keeping the task protected from scale-in while a job has run long", "after", f.protectAfter)
	}

	var rec metrics.Recorder
	if f.metrics == "emf" {
		rec = metrics.NewEMF(a.out, f.namespace)
	}
	qcfg := worker.Config{
		QueueURL:          queueURL,
		Concurrency:       f.concurrency,
		VisibilityTimeout: f.visibilityTimeout,
		HandlerTimeout:    f.handlerTimeout,
		WaitTime:          f.wait,
		ShutdownTimeout:   f.shutdownTimeout,
		Logger:            log,
		Metrics:           rec,
		HandlerName:       f.handlerName,
	}
	var w interface {
		workerRunner
		Stats() worker.Stats
	}
	queueArgs := queueArg
	if len(f.queues) == 0 {
		qcfg.RateLimit = f.rateLimit
		if w, err = worker.New(c, qcfg); err != nil {
			return usageError{err}
		}
	} else {
		mc := worker.MultiConfig{Concurrency: f.concurrency, RateLimit: f.rateLimit, Logger: log}
		names := make([]string, len(specs))
		for i, spec := range specs {
			q := qcfg
			q.QueueURL, q.Concurrency = urls[i], 0
			mc.Queues = append(mc.Queues, worker.QueueConfig{Config: q, Priority: spec.priority, Reserved: spec.reserved})
			names[i] = spec.name
		}
		m, err := worker.NewMulti(c, mc)
		if err != nil {
			return usageError{err}
		}
		w = multiTotals{m}
		queueArgs = strings.Join(names, ", ")
		log.Info("consuming priority queues", "queues", len(specs), "concurrency", f.concurrency)
	}
	stopTotals := logTotals(w, log, f.totalsInterval)
	forced, err := runUntilInterrupted(ctx, w, h, f, log)
	stopTotals()
	s := w.Stats()
	log.Info("totals", totalsAttrs(s)...)
	if err != nil {
		return a.queueError(queueArgs, err)
	}
	if forced {
		return &interruptedError{msg: "stopped at once by a second interrupt: running handlers were cut short and their messages made visible again"}
	}
	return nil
}

// pollMargin is how long after its wait time a long poll's answer is
// counted on to have arrived.
const pollMargin = time.Second

// runUntilInterrupted runs the worker until ctx is cancelled (the first
// interrupt), then shuts it down: gracefully, unless the second interrupt
// comes first. forced is true when it did.
//
// The second interrupt kills the commands at once, but the worker cuts its
// handlers short, which makes their messages visible again, only once the
// long polls under way at the first interrupt have ended: a long poll cut
// short on the client's side goes on at SQS's, and would take a message
// released meanwhile out of sight for a whole visibility timeout.
func runUntilInterrupted(ctx context.Context, w workerRunner, h sqsworker.Handler, f runFlags, log *slog.Logger) (forced bool, err error) {
	done := make(chan error, 1)
	go func() { done <- w.Run(context.WithoutCancel(ctx), h) }() // received from below, before returning
	select {
	case err := <-done:
		return false, err
	case <-ctx.Done():
	}
	pollsEnd := time.Now().Add(f.wait + pollMargin)
	log.Info(fmt.Sprintf("stopping: waiting up to %s for the long poll, and up to %s in all for running handlers; Ctrl-C again to stop now", f.wait, f.shutdownTimeout))
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	shutdown := make(chan struct{})
	go func() { // ended by shutdown, before returning
		defer close(shutdown)
		_ = w.Shutdown(sctx)
	}()
	select {
	case <-shutdown:
	case <-stopNow(ctx):
		forced = true
		wait := time.Until(pollsEnd)
		log.Warn("stopping now: killing running commands; their messages are made visible again once the long poll under way has ended",
			"in", max(wait, 0).Round(time.Millisecond))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-shutdown:
		}
		t.Stop()
		cancel()
		<-shutdown
	}
	return forced, <-done
}

// logTotals logs the worker's totals every interval, until stop.
func logTotals(w interface{ Stats() worker.Stats }, log *slog.Logger, every time.Duration) (stop func()) {
	if every <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				log.Info("totals so far", totalsAttrs(w.Stats())...)
			case <-done:
				return
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// totalsAttrs are the worker's counters as log attributes.
func totalsAttrs(s worker.Stats) []any {
	return []any{"received", s.Received, "succeeded", s.Succeeded, "failed", s.Failed,
		"retried", s.Retried, "dead_lettered", s.DeadLettered, "released", s.Released, "deleted", s.Deleted,
		"in_flight", s.InFlight, "breaker_opens", s.BreakerOpens}
}

// commandHandler runs a command per message. It is safe for concurrent use:
// its fields are read only.
type commandHandler struct {
	path       string
	args       []string
	queueURL   string
	env        []string // the environment without SQS_ variables
	out        io.Writer
	retryAfter time.Duration
	timeout    time.Duration // --handler-timeout, for messages
	// killAfter is the time between SIGTERM and SIGKILL to a command
	// stopped; killNow, the second interrupt, kills at once.
	killAfter time.Duration
	killNow   <-chan struct{}
	log       *slog.Logger
}

func (h *commandHandler) HandleMessage(ctx context.Context, m *sqsworker.Message) error {
	env, err := h.environment(m)
	if err != nil {
		return err
	}
	cmd := exec.Command(h.path, h.args...)
	cmd.Stdin = strings.NewReader(m.Body)
	cmd.Env = env
	prefix := "[" + m.ID + "] "
	stdout := &runLinePrefixer{w: h.out, prefix: prefix}
	stderr := &runLinePrefixer{w: h.out, prefix: prefix}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	inOwnProcessGroup(cmd)
	// Should a process the command started hold its output open after it
	// exited, the output is closed this long after.
	cmd.WaitDelay = h.killAfter
	if err := cmd.Start(); err != nil {
		return startError(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }() // received from by this call
	select {
	case err = <-waited:
	case <-ctx.Done():
		err = h.stop(cmd.Process.Pid, waited, m.ID)
	case <-h.killNow:
		// The second interrupt: the command is killed at once, and its
		// message released when the worker cuts this handler short.
		err = h.stop(cmd.Process.Pid, waited, m.ID)
		<-ctx.Done()
	}
	stdout.flush()
	stderr.flush()
	if ctx.Err() != nil {
		return h.stopped(ctx, err)
	}
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		switch code := ee.ExitCode(); code {
		case exitTempFail:
			// What the job needs is down, not the job: the breaker counts
			// it, and it is never dead-lettered for it.
			return sqsworker.RetryAfter(h.retryAfter, sqsworker.Unavailable(&exitStatusError{code}))
		case exitDataErr:
			return sqsworker.Permanent(&exitStatusError{code})
		default:
			return &exitStatusError{code}
		}
	}
	if errors.As(err, &ee) {
		return &classedError{"killed-by-signal", fmt.Errorf("command killed by a signal: %w", err)}
	}
	return fmt.Errorf("command: %w", err)
}

// environment is the command's environment for m: sqsworker's, and the
// message's details. An attribute too large for a variable is a permanent
// failure: no attempt would pass it.
func (h *commandHandler) environment(m *sqsworker.Message) ([]string, error) {
	env := append(slices.Clip(h.env),
		"SQS_MESSAGE_ID="+m.ID,
		"SQS_JOB_KEY="+idempotency.DefaultKey(m),
		"SQS_RECEIVE_COUNT="+strconv.Itoa(m.ReceiveCount),
		"SQS_GROUP_ID="+m.GroupID,
		"SQS_QUEUE_URL="+cmp.Or(m.QueueURL, h.queueURL),
	)
	names := make([]string, 0, len(m.MessageAttributes))
	for name := range m.MessageAttributes {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		kv := runAttrEnvName(name) + "=" + runAttrValue(m.MessageAttributes[name])
		if len(kv) > maxEnvVar && runtime.GOOS == "linux" {
			return nil, sqsworker.Permanent(&classedError{"environment-too-large", fmt.Errorf(
				"attribute %q is too large for the command's environment: %d bytes as %s, where a variable holds at most 128 KiB; send it in the body, or use --http",
				name, len(kv), runAttrEnvName(name))})
		}
		env = append(env, kv)
	}
	return env, nil
}

// startError is the failure of a command that did not start.
func startError(err error) error {
	if errors.Is(err, syscall.E2BIG) {
		return sqsworker.Permanent(&classedError{"environment-too-large", fmt.Errorf(
			"the command cannot start with this message: its environment (the message's attributes) and arguments are over the system's limit: %w", err)})
	}
	return &classedError{"command-not-started", fmt.Errorf("command: %w", err)}
}

// stop ends a command whose handler context ended: SIGTERM to its process
// group, SIGKILL to the group killAfter later (at once on the second
// interrupt). It returns the command's Wait error once the command has
// exited and no process of its group is left, so that a retry never runs
// alongside what the old attempt started; should one outlive SIGKILL (stuck
// in the kernel), it stops waiting for it groupGiveUp after, and says so.
func (h *commandHandler) stop(pgid int, waited <-chan error, id string) error {
	_ = signalGroup(pgid, syscall.SIGTERM)
	grace := time.NewTimer(h.killAfter)
	defer grace.Stop()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	killNow := h.killNow
	var giveUp <-chan time.Time
	kill := func() {
		if giveUp == nil {
			_ = signalGroup(pgid, syscall.SIGKILL)
			giveUp = time.After(groupGiveUp)
		}
	}
	var err error
	exited := false
	for {
		if exited && !groupExists(pgid) {
			return err
		}
		select {
		case err = <-waited:
			exited, waited = true, nil
		case <-grace.C:
			kill()
		case <-killNow:
			killNow = nil
			kill()
		case <-giveUp:
			giveUp = make(chan time.Time) // never again
			h.log.Warn("processes of a stopped command outlived SIGKILL", "message_id", id, "process_group", pgid)
			if exited {
				return err
			}
		case <-poll.C:
		}
	}
}

// stopped is the failure of a command its handler context stopped.
func (h *commandHandler) stopped(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	switch {
	case errors.Is(cause, worker.ErrHandlerTimeout):
		return &classedError{"timeout", fmt.Errorf("command stopped at the handler timeout (%s): %w (%w)", h.timeout, cause, err)}
	case errors.Is(cause, worker.ErrShutdown):
		return &classedError{"shutdown", fmt.Errorf("command stopped by the shutdown: %w (%w)", cause, err)}
	}
	return fmt.Errorf("command stopped: %w (%w)", cause, err)
}

// exitStatusError is a command's exit status other than 0.
type exitStatusError struct{ code int }

func (e *exitStatusError) Error() string {
	switch e.code {
	case exitTempFail:
		return "command exited with status 75 (EX_TEMPFAIL)"
	case exitDataErr:
		return "command exited with status 65 (EX_DATAERR)"
	}
	return fmt.Sprintf("command exited with status %d", e.code)
}

// ErrorClass names the failure in dead-letter metadata and logs.
func (e *exitStatusError) ErrorClass() string { return "exit-" + strconv.Itoa(e.code) }

// runBaseEnv returns env without the variables run sets per message, so
// that none leaks from sqsworker's own environment into a message's.
func runBaseEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "SQS_ATTR_"),
			name == "SQS_MESSAGE_ID", name == "SQS_JOB_KEY", name == "SQS_RECEIVE_COUNT", name == "SQS_GROUP_ID", name == "SQS_QUEUE_URL":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// runAttrEnvName is the environment variable of a message attribute.
func runAttrEnvName(name string) string {
	b := []byte("SQS_ATTR_" + strings.ToUpper(name))
	for i, c := range b {
		if !(c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	return string(b)
}

// runAttrValue is the text of an attribute's value: Binary ones in base64.
func runAttrValue(a sqsworker.MessageAttribute) string {
	if strings.HasPrefix(a.DataType, "Binary") {
		return base64.StdEncoding.EncodeToString(a.BinaryValue)
	}
	return a.StringValue
}

// httpHandler POSTs each message to an endpoint. It is safe for concurrent
// use.
type httpHandler struct {
	url         string
	logURL      string // url without its secrets
	contentType string
	client      *http.Client
	retryAfter  time.Duration
	timeout     time.Duration // --handler-timeout, for messages
	crashes     crashCounts
	// gate holds a weight of 1 for each request under way, of slots in
	// all; a job whose last request was reset with no answer (a suspect)
	// takes them all, and so runs alone, the requests after it waiting:
	// a crash resets every request under way, and only one alone tells
	// whose it was (see crashLimit).
	gate  *semaphore.Weighted
	slots int64
	// health is --http-health, resolved against url; "" for none.
	health string
}

// healthURL resolves --http-health's path (or URL) against --http's URL.
func healthURL(endpoint, health string) (string, error) {
	if endpoint == "" {
		return "", errors.New("it goes with --http: give --http URL too")
	}
	base, err := url.Parse(endpoint)
	if err != nil {
		return "", errors.New("--http is not a URL")
	}
	ref, err := url.Parse(health)
	if err != nil {
		return "", fmt.Errorf("want a path such as /healthz, or an http:// or https:// URL: %w", err)
	}
	u := base.ResolveReference(ref)
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", errors.New("want a path such as /healthz, or an http:// or https:// URL")
	}
	return u.String(), nil
}

// Asking --http-health after a reset: every healthPoll, for up to
// healthWait (the application may be restarting), each request within
// healthTimeout.
const (
	healthWait    = 10 * time.Second
	healthPoll    = 250 * time.Millisecond
	healthTimeout = 2 * time.Second
)

// askHealth asks --http-health until it answers 2xx, within healthWait or
// until ctx ends. It counts such an answer as one of the application's
// (see crashLimit).
func (h *httpHandler) askHealth(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, healthWait)
	defer cancel()
	for {
		rctx, rcancel := context.WithTimeout(ctx, healthTimeout)
		req, err := http.NewRequestWithContext(rctx, http.MethodGet, h.health, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = h.client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
				resp.Body.Close()
				if resp.StatusCode >= 200 && resp.StatusCode < 300 {
					rcancel()
					h.crashes.answers.Add(1)
					return
				}
			}
		}
		rcancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(healthPoll):
		}
	}
}

// crashLimit is how many times a job's request may be reset or closed with
// no answer, each time while it was the only request under way and after
// the application answered another since the job's last reset (or, for its
// first, since the start; --http-health's answer counts as one), before
// that is taken for the job's fault: an
// application that crashes on the job. A job whose request was reset runs
// alone from then on (httpHandler.gate), until it is answered.
// Until then a reset is taken for the application's, down or restarting
// (a deployment, a crash another job caused, an application down behind
// a proxy that accepts for it): it counts toward the circuit breaker and
// never dead-letters the job. A reset among other requests does not count,
// for a crash resets them all, whichever job caused it; nor does one with
// no answer from the application since the last, which may be down. Each
// job so reset runs alone after: a job that crashes the application then
// gets its resets counted, the others are answered. Past
// crashLimit its failures spend its attempts, so that it reaches the
// dead-letter queue rather than crash the application for ever. The
// counts are the process's own.
const crashLimit = 3

// crashKeys bounds the jobs whose resets are counted at once.
const crashKeys = 10_000

// crashCounts counts the resets of jobs' requests (see crashLimit). It is
// safe for concurrent use; its zero value is ready.
type crashCounts struct {
	// inFlight counts the requests under way; started and answers count
	// the requests started and answered so far.
	inFlight         atomic.Int64
	started, answers atomic.Uint64

	mu   sync.Mutex
	seed maphash.Seed
	jobs map[uint64]crashCount // by hash of the job key
}

// crashCount is a job's count of resets, and the answers counted at its
// last reset.
type crashCount struct {
	n       int
	answers uint64
}

// start counts a request starting; done must be called when it ends. It
// returns the request's mark, for reset.
func (c *crashCounts) start() (mark crashMark) {
	alone := c.inFlight.Add(1) == 1
	return crashMark{seq: c.started.Add(1), alone: alone}
}

// crashMark is a request's place among the others: its number, whether
// none was under way when it started, and, once it ended (done), whether
// it ran alone: none started before it ended either.
type crashMark struct {
	seq             uint64
	alone, isolated bool
}

// done counts the request marked m ending, and returns its mark, telling
// whether it ran alone.
func (c *crashCounts) done(m crashMark) crashMark {
	m.isolated = m.alone && c.started.Load() == m.seq
	c.inFlight.Add(-1)
	return m
}

// reset counts a reset of the request of key marked m (ended: see done),
// and returns the job's count of resets.
func (c *crashCounts) reset(key string, m crashMark) int {
	answers := c.answers.Load()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jobs == nil {
		c.jobs, c.seed = map[uint64]crashCount{}, maphash.MakeSeed()
	}
	h := maphash.String(c.seed, key)
	e, ok := c.jobs[h]
	if !ok && len(c.jobs) >= crashKeys {
		for k := range c.jobs { // one forgotten: its job's resets count anew
			delete(c.jobs, k)
			break
		}
	}
	if m.isolated && answers > e.answers {
		e.n++
	}
	e.answers = answers
	c.jobs[h] = e
	return e.n
}

// suspect reports whether key's request was reset with no answer since
// its last answer: its next request runs alone (see httpHandler.gate).
func (c *crashCounts) suspect(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.jobs) == 0 {
		return false
	}
	_, ok := c.jobs[maphash.String(c.seed, key)]
	return ok
}

// answered counts an answer of the application to key's request, and
// forgets key's resets.
func (c *crashCounts) answered(key string) {
	c.answers.Add(1)
	c.mu.Lock()
	if len(c.jobs) > 0 {
		delete(c.jobs, maphash.String(c.seed, key))
	}
	c.mu.Unlock()
}

func newHTTPHandler(endpoint, contentType string, concurrency int, retryAfter, responseHeaderTimeout time.Duration) *httpHandler {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = concurrency
	tr.ResponseHeaderTimeout = responseHeaderTimeout
	return &httpHandler{
		gate:        semaphore.NewWeighted(int64(concurrency)),
		slots:       int64(concurrency),
		url:         endpoint,
		logURL:      redactURL(endpoint),
		contentType: contentType,
		retryAfter:  retryAfter,
		client: &http.Client{
			Transport: tr,
			// A redirect of a POST would lose the body: it is a failure.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

func (h *httpHandler) HandleMessage(ctx context.Context, m *sqsworker.Message) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, strings.NewReader(m.Body))
	if err != nil {
		return sqsworker.Permanent(h.redact(err))
	}
	req.Header.Set("Content-Type", h.contentType)
	req.Header.Set("X-Sqs-Message-Id", m.ID)
	key := idempotency.DefaultKey(m)
	if validHeaderValue(key) {
		req.Header.Set("X-Sqs-Job-Key", key)
	} else {
		req.Header.Set("X-Sqs-Job-Key", url.PathEscape(key))
		req.Header.Set("X-Sqs-Job-Key-Encoded", "true")
	}
	req.Header.Set("X-Sqs-Receive-Count", strconv.Itoa(m.ReceiveCount))
	if m.GroupID != "" {
		req.Header.Set("X-Sqs-Group-Id", m.GroupID)
	}
	names := make([]string, 0, len(m.MessageAttributes))
	for name := range m.MessageAttributes {
		names = append(names, name)
	}
	slices.Sort(names)
	var encoded []string
	for _, name := range names {
		v := runAttrValue(m.MessageAttributes[name])
		if !validHeaderValue(v) {
			v = url.PathEscape(v)
			encoded = append(encoded, name)
		}
		req.Header.Set("X-Sqs-Attr-"+name, v)
	}
	if len(encoded) > 0 {
		req.Header.Set("X-Sqs-Encoded-Attrs", strings.Join(encoded, ", "))
	}
	w := int64(1)
	if h.crashes.suspect(key) {
		w = h.slots
	}
	if err := h.gate.Acquire(ctx, w); err != nil {
		// Not sent (a suspect waiting its turn alone): put off, not
		// failed.
		return sqsworker.RetryAfter(time.Second, nil)
	}
	defer h.gate.Release(w)
	mark := h.crashes.start()
	sent := time.Now()
	resp, err := h.client.Do(req)
	mark = h.crashes.done(mark)
	if err != nil {
		err = h.redact(err) // *url.Error: the method, the URL and the cause
		if ctx.Err() != nil {
			cause := context.Cause(ctx)
			switch {
			case errors.Is(cause, worker.ErrHandlerTimeout):
				return stillRunning(sent, m.ReceiveCount, &classedError{"timeout", fmt.Errorf("request stopped at the handler timeout (%s): %w", h.timeout, cause)})
			case errors.Is(cause, worker.ErrShutdown):
				return &classedError{"shutdown", fmt.Errorf("request stopped by the shutdown: %w", cause)}
			}
			return fmt.Errorf("request stopped: %w", cause)
		}
		if isReset(err) {
			if h.health != "" && mark.isolated {
				h.askHealth(ctx)
			}
			if n := h.crashes.reset(key, mark); n >= crashLimit {
				return &classedError{"connection-reset", fmt.Errorf("the connection was reset or closed with no answer on this job alone %d times, the application answering others (or --http-health) in between: taken for a job that crashes the application, a failure of the job's: %w", n, err)}
			}
		}
		err = connectionError(err)
		var ce *classedError
		if errors.As(err, &ce) && ce.class == "timeout" {
			return stillRunning(sent, m.ReceiveCount, err)
		}
		return err
	}
	h.crashes.answered(key)
	// Read a little of the body, so that the connection can be reused;
	// the body is not logged, it may echo the message's.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	code := resp.StatusCode
	serr := &httpStatusError{code: code, status: resp.Status}
	switch {
	case code >= 200 && code < 300:
		return nil
	case code >= 400 && code < 500 && strings.EqualFold(strings.TrimSpace(resp.Header.Get("X-Sqs-Permanent")), "true"):
		return sqsworker.Permanent(serr)
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		// The application is overloaded or down, not the message: these
		// count toward the circuit breaker and never dead-letter it. (A
		// proxy's 502 and 504 are not among them: behind a proxy, an
		// application that crashes on a job, or a job longer than the
		// proxy's timeout, gets them every time.)
		return sqsworker.RetryAfter(parseRetryAfter(resp.Header.Get("Retry-After"), h.retryAfter, time.Now()), sqsworker.Unavailable(serr))
	case endpointStatus[code]:
		// The endpoint refuses every request alike (a wrong path, method
		// or credentials): an operator's mistake, which would otherwise
		// dead-letter the whole queue in seconds.
		return sqsworker.Unavailable(&classedError{"endpoint-refused", fmt.Errorf("the endpoint %s refused the request, not the job (a wrong method or credentials?): %w", h.logURL, serr)})
	case code == http.StatusRequestTimeout, code == http.StatusConflict, code == http.StatusTooEarly:
		return serr
	case code >= 400 && code < 500:
		return sqsworker.Permanent(serr)
	}
	return serr
}

// endpointStatus are the 4xx statuses that say the endpoint refuses the
// request, whatever the job: no credentials, a method it does not serve, a
// proxy's authentication, a misdirected request. 403 and 404 are not among
// them: many applications answer them for one job's record or tenant.
var endpointStatus = map[int]bool{
	http.StatusUnauthorized: true, http.StatusMethodNotAllowed: true,
	http.StatusProxyAuthRequired: true, http.StatusMisdirectedRequest: true,
}

// redact removes the URL's secrets from err, whose text and Err fields
// would otherwise carry them into logs and dead-letter metadata.
func (h *httpHandler) redact(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = h.logURL
	}
	return err
}

// redactURL is raw without its user information and query string, which
// may hold credentials or tokens.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an invalid URL)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		u.RawQuery = "REDACTED"
	}
	u.ForceQuery = false
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// refuseDeadLetterQueue returns an error when the queue at url is the
// dead-letter queue of other queues: run would run their dead-lettered
// jobs again outside their own queues, delete those that succeed, and
// fail the others for good. When that cannot be known (see
// deadLetterSources), it says so on warn and goes on.
func refuseDeadLetterQueue(ctx context.Context, api sourcesAPI, url string, warn io.Writer) error {
	sources, err := deadLetterSources(ctx, api, url)
	if err != nil {
		fmt.Fprintf(warn, "warning: could not check that %s is no dead-letter queue (%v); running it anyway\n", queueName(url), err)
		return nil
	}
	if sources == "" {
		return nil
	}
	name := queueName(url)
	return fmt.Errorf("%s is the dead-letter queue of %s: run would run their dead-lettered jobs here, outside their own queues; send them back with sqsworker dlq replay %s, or pass --force to run this queue anyway",
		name, sources, name)
}

// sourcesAPI is what deadLetterSources calls.
type sourcesAPI interface {
	dlq.SourceLister
	dlq.QueueLister
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// maxSourceScan is the most queues deadLetterSources reads the redrive
// policies of, where it cannot ask ListDeadLetterSourceQueues, and
// sourceScanTimeout the longest it takes.
const (
	maxSourceScan     = 1000
	sourceScanTimeout = 15 * time.Second
)

// deadLetterSources returns the names of the queues whose dead-letter
// queue url is ("a, b and more"), "" when it is none. Where SQS refuses
// ListDeadLetterSourceQueues as an action it lacks (the local SQS) or a
// role without the permission, it reads the redrive policies of the queues
// ListQueues lists instead, up to maxSourceScan of them within
// sourceScanTimeout; it returns an error when neither way can say.
func deadLetterSources(ctx context.Context, api sourcesAPI, url string) (string, error) {
	out, err := api.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(url), MaxResults: aws.Int32(10)})
	if err == nil {
		more := aws.ToString(out.NextToken) != ""
		return sourceNames(out.QueueUrls, more), nil
	}
	if !dlq.IsUnsupportedAction(err) && !awserr.IsAccessDenied(err) {
		return "", fmt.Errorf("ListDeadLetterSourceQueues: %w", err)
	}
	// A bound of its own: a command does not wait long on a check.
	ctx, cancel := context.WithTimeout(ctx, sourceScanTimeout)
	defer cancel()
	srcs, more, lerr := sourcesByListing(ctx, api, url)
	if lerr != nil {
		return "", fmt.Errorf("ListDeadLetterSourceQueues: %w; and reading the redrive policies of the queues instead: %w", err, lerr)
	}
	return sourceNames(srcs, more), nil
}

// sourceNames joins the names of the queues at urls, with " and more" when
// more.
func sourceNames(urls []string, more bool) string {
	if len(urls) == 0 {
		return ""
	}
	names := make([]string, len(urls))
	for i, u := range urls {
		names[i] = queueName(u)
	}
	s := strings.Join(names, ", ")
	if more {
		s += " and more"
	}
	return s
}

// sourcesByListing returns the queues, among those ListQueues lists, whose
// redrive policy names the queue at url, up to 10 (more: there are more).
func sourcesByListing(ctx context.Context, api sourcesAPI, url string) (srcs []string, more bool, err error) {
	attr, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return nil, false, err
	}
	arn := attr.Attributes[string(types.QueueAttributeNameQueueArn)]
	var urls []string
	in := &sqs.ListQueuesInput{MaxResults: aws.Int32(1000)}
	for {
		out, err := api.ListQueues(ctx, in)
		if err != nil {
			return nil, false, err
		}
		urls = append(urls, out.QueueUrls...)
		if len(urls) > maxSourceScan {
			return nil, false, fmt.Errorf("more than %d queues to read the redrive policies of", maxSourceScan)
		}
		if aws.ToString(out.NextToken) == "" {
			break
		}
		in.NextToken = out.NextToken
	}
	for _, u := range urls {
		if u == url {
			continue
		}
		out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(u), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy}})
		if err != nil {
			if dlq.IsQueueMissing(err) {
				continue // deleted since it was listed
			}
			return nil, false, err
		}
		if p, err := dlq.ParseRedrivePolicy(out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]); err == nil && p.DeadLetterTargetARN == arn {
			if len(srcs) == 10 {
				return srcs, true, nil
			}
			srcs = append(srcs, u)
		}
	}
	return srcs, false, nil
}

// connectionError classes a request that got no response. A connection
// that could not be made (refused, an unknown or unreachable host, a dial
// timeout, a TLS certificate refused) or that was reset or closed says the
// application is not there (yet), or not reachable as configured: these
// count toward the worker's circuit breaker, so that a worker started
// before its application, an application restarting, or an endpoint
// misconfigured does not dead-letter every message. (A reset or a close
// may also be an application crashing on the job, which the client cannot
// tell from one not there, behind a proxy that accepts for it: see
// crashLimit.) Other timeouts are the job's.
func connectionError(err error) error {
	var dns *net.DNSError
	var timeout interface{ Timeout() bool }
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	var op *net.OpError
	dial := errors.As(err, &op) && op.Op == "dial"
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return sqsworker.Unavailable(&classedError{"connection-refused", err})
	case isReset(err):
		return sqsworker.Unavailable(&classedError{"connection-reset", err})
	case errors.As(err, &dns):
		return sqsworker.Unavailable(&classedError{"dns", err})
	case errors.As(err, &cert), errors.As(err, &rec):
		return sqsworker.Unavailable(&classedError{"tls", err})
	case dial:
		return sqsworker.Unavailable(&classedError{"unreachable", err})
	case errors.As(err, &timeout) && timeout.Timeout():
		return &classedError{"timeout", err}
	}
	return err
}

// stillRunning is the failure err, on attempt attempt, of a request sent at
// sent that got no answer in time: the application may still be running
// the job (most servers go on with a request whose client left), so its
// retry comes no sooner than the time the request was given, for as long
// again, nor sooner than the worker's backoff (run's is the default), not
// beside the run still under way. It is a failure all the same: its
// attempts count.
func stillRunning(sent time.Time, attempt int, err error) error {
	d := max(time.Since(sent), sqsworker.ExponentialBackoff{}.Delay(attempt, err))
	return sqsworker.RetryAfter(min(d, sqsworker.MaxDelay), err)
}

// isReset reports whether a request's connection was reset or closed
// before its response.
func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF)
}

// classedError gives an error a class of its own.
type classedError struct {
	class string
	err   error
}

func (e *classedError) Error() string      { return e.err.Error() }
func (e *classedError) Unwrap() error      { return e.err }
func (e *classedError) ErrorClass() string { return e.class }

// httpStatusError is a response status other than 2xx.
type httpStatusError struct {
	code   int
	status string
}

func (e *httpStatusError) Error() string { return "endpoint responded " + e.status }

// ErrorClass names the failure in dead-letter metadata and logs: http-4xx,
// http-5xx or http-3xx, and http-429 and http-503 (busy, down) apart.
func (e *httpStatusError) ErrorClass() string {
	switch e.code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return "http-" + strconv.Itoa(e.code)
	}
	return "http-" + strconv.Itoa(e.code/100) + "xx"
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date. It
// returns def when the header is missing or malformed.
func parseRetryAfter(v string, def time.Duration, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return def
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return def
		}
		return sqsworker.ClampDelay(time.Duration(min(secs, int64(sqsworker.MaxVisibilityTimeout/time.Second))) * time.Second)
	}
	if t, err := http.ParseTime(v); err == nil {
		return sqsworker.ClampDelay(t.Sub(now).Round(time.Second))
	}
	return def
}

// validHeaderValue reports whether v can be sent as an HTTP header value:
// no control characters other than tab.
func validHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// runLinePrefixer writes whole lines, each with a prefix, to w. It is used by
// one goroutine at a time (exec copies each output stream in one).
type runLinePrefixer struct {
	w      io.Writer
	prefix string
	buf    []byte
}

func (p *runLinePrefixer) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := bytes.IndexByte(p.buf, '\n')
		if i < 0 {
			break
		}
		p.line(p.buf[:i+1])
		p.buf = p.buf[i+1:]
	}
	for len(p.buf) >= maxOutputLine {
		p.line(append(p.buf[:maxOutputLine:maxOutputLine], '\n'))
		p.buf = p.buf[maxOutputLine:]
	}
	if len(p.buf) == 0 {
		p.buf = nil // let a large buffer go
	}
	return len(b), nil
}

// flush writes what is left of a line without its newline.
func (p *runLinePrefixer) flush() {
	if len(p.buf) > 0 {
		p.line(append(p.buf, '\n'))
		p.buf = nil
	}
}

func (p *runLinePrefixer) line(l []byte) {
	out := make([]byte, 0, len(p.prefix)+len(l))
	out = append(append(out, p.prefix...), l...)
	_, _ = p.w.Write(out) // a failing stderr must not fail the message
}

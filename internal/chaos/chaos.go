// Package chaos checks the toolkit's promise under faults: an at-least-once
// queue gives exactly-once effects, and the dead-letter queue holds only the
// jobs that are really broken.
//
// Run starts, for each scenario, fault proxies (package faultproxy) in front
// of the local SQS and DynamoDB endpoints (AWS_ENDPOINT_URL_SQS and
// AWS_ENDPOINT_URL_DYNAMODB, which must be on the loopback interface),
// creates the scenario's own queue (visibility timeout 5s, a dead-letter
// queue with maxReceiveCount 5 unless the scenario says otherwise; FIFO
// queues for the fifo- scenarios) and tables, preloads its jobs, and runs the
// chaosworker command (internal/cmd/chaosworker) as a child process in its
// own process group, talking to the services through the proxies only. It
// then injects the scenario's faults: kill -9 of the worker, refused or
// blackholed connections to SQS or DynamoDB for a wall-clock time, replies
// lost after their requests were applied, a SIGTERM with jobs in flight,
// poison messages (broken jobs are mixed among the good ones in the other
// scenarios too). When the queue is drained it stops the worker and checks
// every job:
//
//   - each good job's effect counter in the effects table is exactly 1: not
//     0 (lost), not 2 or more (applied twice);
//   - the main queue is empty;
//   - the dead-letter queue holds every poison job, with its failure reason
//     (a second copy of one, which an at-least-once move can leave, is
//     noted), and no good job;
//   - on a FIFO queue (the fifo- scenarios: 20 message groups), each
//     group's good jobs had their effects applied in the order they were
//     sent: the chaosworker appends a job's place in its group to the
//     group's order item with its effect;
//   - no log line shows a message body.
//
// Every scenario's worker output and the runner's own record of it go to a
// log file per scenario. Child processes and proxies are stopped, and
// queues and tables deleted, when a scenario ends, whether it passed, failed
// or was interrupted.
//
// The command internal/cmd/chaos runs it (`make chaos`); TestChaosShort runs
// the short version against the local stack.
package chaos

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Options configures Run. The zero value runs every scenario in short mode.
type Options struct {
	// Full runs every scenario at full size (10,000 jobs and 10 kills for
	// kill, the outages at their named lengths). Default: the short
	// version (2,000 jobs and 3 kills, shorter outages where the
	// scenario allows), a few minutes on two cores.
	Full bool
	// Scenarios are the names of the scenarios to run (see Scenarios).
	// Default all.
	Scenarios []string
	// Parallel is the number of scenarios run at once, each with its own
	// queues, tables, proxies and worker. Default: all of them in short
	// mode, 2 in full mode.
	Parallel int
	// WorkerBin is the chaosworker binary. Default: Run builds it with
	// `go build` into a temporary directory.
	WorkerBin string
	// WorkerArgs are added to every chaosworker's command line, such as
	// "-effect=update-item" to compare with the two-write effect.
	WorkerArgs []string
	// LogDir receives one log file per scenario, kept after the run.
	// Default: a new directory under os.TempDir().
	LogDir string
	// Logger receives the runner's progress. Default slog.Default().
	Logger *slog.Logger
}

// Result is the outcome of one scenario.
type Result struct {
	// Scenario is the scenario's name, and Label its name with the length
	// of its outage in this mode when that differs.
	Scenario, Label string
	// Jobs is the number of jobs sent: good and poison.
	Jobs int
	// Twice counts good jobs whose effect was applied more than once.
	Twice int
	// Lost counts good jobs whose effect was never applied.
	Lost int
	// FIFO is true for a scenario on a FIFO queue, and OutOfOrder then
	// counts good jobs whose effect was applied after that of a job sent
	// behind them in their message group.
	FIFO       bool
	OutOfOrder int
	// DeadLetteredHealthy counts good jobs found in the dead-letter queue.
	DeadLetteredHealthy int
	// DeadLetteredPoison counts poison jobs found in the dead-letter
	// queue, of PoisonJobs sent.
	DeadLetteredPoison, PoisonJobs int
	// Duration is the scenario's wall time, set-up and clean-up included.
	Duration time.Duration
	// Pass is true when every check held.
	Pass bool
	// Failures says which checks failed; Notes what else happened (worker
	// restarts, failure reasons found in the dead-letter queue, ...).
	Failures, Notes []string
	// LogFile is the scenario's log: the worker's output and the runner's.
	LogFile string
}

// Run runs the scenarios that opts selects and returns one Result per
// scenario, in the order of Scenarios. Its error is about the run itself
// (no local stack, the worker does not build, ctx cancelled); scenarios that
// fail their checks are Results with Pass false.
func Run(ctx context.Context, opts Options) ([]Result, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	log := opts.Logger
	selected, err := selectScenarios(opts.Scenarios)
	if err != nil {
		return nil, err
	}
	e, err := newEnv(ctx, log)
	if err != nil {
		return nil, err
	}
	if opts.LogDir == "" {
		opts.LogDir, err = os.MkdirTemp("", "sqsworker-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: log directory: %w", err)
		}
	} else if err := os.MkdirAll(opts.LogDir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: log directory: %w", err)
	}
	e.logDir = opts.LogDir
	if opts.WorkerBin == "" {
		bin, cleanup, err := buildWorker(ctx)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		opts.WorkerBin = bin
	}
	e.workerBin = opts.WorkerBin
	e.workerArgs = opts.WorkerArgs
	e.full = opts.Full
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = len(selected)
		if opts.Full {
			parallel = 2
		}
	}
	log.Info("chaos run", "mode", mode(opts.Full), "scenarios", len(selected), "parallel", parallel, "logs", opts.LogDir)

	results := make([]Result, len(selected))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, sc := range selected {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			results[i] = Result{Scenario: sc.name, Label: sc.name, Failures: []string{"not run: " + ctx.Err().Error()}}
			continue
		}
		wg.Go(func() {
			defer func() { <-sem }()
			results[i] = e.runScenario(ctx, sc)
			r := results[i]
			log.Info("scenario done", "scenario", r.Label, "pass", r.Pass, "time", r.Duration.Round(time.Second),
				"failures", strings.Join(r.Failures, "; "))
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return results, fmt.Errorf("chaos: run interrupted: %w", err)
	}
	return results, nil
}

func mode(full bool) string {
	if full {
		return "full"
	}
	return "short"
}

// selectScenarios returns the scenarios named, in their order in the list
// of all scenarios; all of them when none is named.
func selectScenarios(names []string) ([]scenario, error) {
	all := scenarios()
	if len(names) == 0 {
		return all, nil
	}
	var out []scenario
	var unknown []string
	for _, n := range names {
		if !slices.ContainsFunc(all, func(s scenario) bool { return s.name == n }) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("chaos: unknown scenario %s; the scenarios are %s",
			strings.Join(unknown, ", "), strings.Join(Scenarios(), ", "))
	}
	for _, s := range all {
		if slices.Contains(names, s.name) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Scenarios returns the names of every scenario, in the order Run runs
// them.
func Scenarios() []string {
	var names []string
	for _, s := range scenarios() {
		names = append(names, s.name)
	}
	return names
}

// AllPass reports whether every result passed.
func AllPass(results []Result) bool {
	for _, r := range results {
		if !r.Pass {
			return false
		}
	}
	return len(results) > 0
}

// WriteTable writes the results as a table, then the failures and notes of
// each scenario.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tjobs\teffects applied twice\tlost\tout of order\tdead-lettered (healthy)\tdead-lettered (poison)\ttime\tpass")
	for _, r := range results {
		pass := "FAIL"
		if r.Pass {
			pass = "ok"
		}
		order := "–" // a standard queue keeps no order
		if r.FIFO {
			order = strconv.Itoa(r.OutOfOrder)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%d\t%d/%d\t%s\t%s\n", r.Label, r.Jobs, r.Twice, r.Lost, order,
			r.DeadLetteredHealthy, r.DeadLetteredPoison, r.PoisonJobs, r.Duration.Round(time.Second), pass)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for _, r := range results {
		if len(r.Failures) == 0 && len(r.Notes) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s (log %s)\n", r.Label, r.LogFile)
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "  FAIL: %s\n", f)
		}
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "  note: %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

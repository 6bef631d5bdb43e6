// Command chaos runs the chaos scenarios of package internal/chaos against
// the local stack and prints a table of their outcomes: for each scenario,
// the jobs sent, the good jobs whose effect was applied twice or never, the
// good and the poison jobs found in the dead-letter queue, the wall time,
// and whether every check held. It exits 1 when a scenario fails, 2 when
// the run itself cannot go on.
//
//	eval "$(localstack/stack.sh env)"
//	go run ./internal/cmd/chaos                  # every scenario, short
//	go run ./internal/cmd/chaos -full            # every scenario at full size
//	go run ./internal/cmd/chaos -scenario kill   # one scenario (repeatable, or comma-separated)
//
// Ctrl-C stops the run: the workers are killed and the proxies, queues and
// tables removed before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sqsworker/sqsworker/internal/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// names collects -scenario flags.
type names []string

func (n *names) String() string { return strings.Join(*n, ",") }

func (n *names) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*n = append(*n, s)
		}
	}
	return nil
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts chaos.Options
	var selected names
	fs.BoolVar(&opts.Full, "full", false, "run every scenario at full size (10,000 jobs and 10 kills, outages at their named lengths)")
	fs.Var(&selected, "scenario", "scenario to run, repeatable or comma-separated (default all): "+strings.Join(chaos.Scenarios(), ", "))
	fs.IntVar(&opts.Parallel, "parallel", 0, "scenarios at once (default all in short mode, 2 in full mode)")
	fs.StringVar(&opts.LogDir, "logs", "", "directory of the scenarios' logs (default a new temporary directory)")
	fs.StringVar(&opts.WorkerBin, "worker", "", "chaosworker binary (default: built with go build)")
	workerArgs := fs.String("worker-args", "", "arguments added to every chaosworker's command line, e.g. -effect=update-item")
	verbose := fs.Bool("v", false, "log the runner's progress at debug level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "chaos: unexpected arguments %q\n", fs.Args())
		return 2
	}
	opts.Scenarios = selected
	opts.WorkerArgs = strings.Fields(*workerArgs)
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	opts.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	results, err := chaos.Run(ctx, opts)
	if len(results) > 0 {
		fmt.Fprintln(stdout)
		if werr := chaos.WriteTable(stdout, results); werr != nil {
			fmt.Fprintf(stderr, "chaos: %v\n", werr)
		}
		mode := "short"
		if opts.Full {
			mode = "full"
		}
		fmt.Fprintf(stdout, "\n%s run, wall time %s\n", mode, time.Since(start).Round(time.Second))
	}
	if err != nil {
		fmt.Fprintf(stderr, "chaos: %v\n", err)
		return 2
	}
	if !chaos.AllPass(results) {
		return 1
	}
	return 0
}

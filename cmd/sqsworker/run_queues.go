package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/worker"
)

// queueSpec is one --queue NAME[:priority[:reserved]] of run.
type queueSpec struct {
	name     string // a queue name, URL or ARN
	priority int
	reserved int
}

// parseQueueSpec parses NAME[:priority[:reserved]]. The fields after the
// name are read after its last /, so that a URL's port is part of its
// name, and after an ARN's first five colons.
func parseQueueSpec(s string) (queueSpec, error) {
	cut := strings.LastIndex(s, "/") + 1
	if strings.HasPrefix(s, "arn:") {
		for i, n := 0, 0; i < len(s) && n < 5; i++ {
			if s[i] == ':' {
				cut, n = i+1, n+1
			}
		}
	}
	fields := strings.Split(s[cut:], ":")
	spec := queueSpec{name: s[:cut] + fields[0]}
	const form = "want NAME[:PRIORITY[:RESERVED]], such as critical:3:4 (priority 3, 4 slots reserved)"
	if fields[0] == "" {
		return spec, fmt.Errorf("--queue %q: no queue name; %s", s, form)
	}
	if len(fields) > 3 {
		return spec, fmt.Errorf("--queue %q: too many fields; %s", s, form)
	}
	num := func(i int, what string) (int, error) {
		if i >= len(fields) || fields[i] == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(fields[i])
		if err != nil || n < 0 {
			return 0, fmt.Errorf("--queue %q: %s %q is not a whole number from 0 up; %s", s, what, fields[i], form)
		}
		return n, nil
	}
	var err1, err2 error
	spec.priority, err1 = num(1, "priority")
	spec.reserved, err2 = num(2, "reserved")
	return spec, errors.Join(err1, err2)
}

// parseQueueSpecs parses every --queue, naming each bad one.
func parseQueueSpecs(flags []string) ([]queueSpec, error) {
	var specs []queueSpec
	var errs []error
	seen := map[string]bool{}
	for _, f := range flags {
		spec, err := parseQueueSpec(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[spec.name] {
			errs = append(errs, fmt.Errorf("--queue %s is given twice: give each queue once", spec.name))
		}
		seen[spec.name] = true
		specs = append(specs, spec)
	}
	return specs, errors.Join(errs...)
}

// workerRunner is what run drives: a Worker, or a MultiWorker over the
// queues of --queue.
type workerRunner interface {
	Run(ctx context.Context, h sqsworker.Handler) error
	Shutdown(ctx context.Context) error
}

// multiTotals is a MultiWorker whose Stats are the sums over its queues,
// for run's totals.
type multiTotals struct{ *worker.MultiWorker }

func (m multiTotals) Stats() worker.Stats {
	var t worker.Stats
	for _, q := range m.MultiWorker.Stats() {
		s := q.Stats
		t.Received += s.Received
		t.Succeeded += s.Succeeded
		t.Failed += s.Failed
		t.Panics += s.Panics
		t.Retried += s.Retried
		t.Postponed += s.Postponed
		t.DeadLettered += s.DeadLettered
		t.Released += s.Released
		t.Deleted += s.Deleted
		t.AckFailures += s.AckFailures
		t.MoveFailures += s.MoveFailures
		t.InFlight += s.InFlight
		t.Extensions += s.Extensions
		t.LeasesLost += s.LeasesLost
		t.BreakerOpens += s.BreakerOpens
		t.BreakerProbes += s.BreakerProbes
	}
	return t
}

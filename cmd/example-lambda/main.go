// Command example-lambda is an SQS job handler run as an AWS Lambda function
// (runtime provided.al2023, arm64 or amd64) behind an SQS event source mapping
// with ReportBatchItemFailures. Build it with `make lambda`; the infra code
// deploys it and the tests run it under the Lambda Runtime Interface
// Emulator.
//
// The jobs it runs say in their body what to do, so that every outcome can be
// seen: "ok", "fail" (a transient error), "permanent", "panic",
// "retry-after:DURATION", "sleep:DURATION" (then succeed), "stall:DURATION"
// (sleep ignoring the context, as a handler stuck in a call without a
// timeout does, then succeed), "crash:DURATION" (end the process after
// DURATION, as an out-of-memory kill does, in the middle of the batch) and
// "fail-until:N" (fail until the N-th attempt).
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
)

func handle(ctx context.Context, m *sqsworker.Message) error {
	verb, arg, _ := strings.Cut(m.Body, ":")
	switch verb {
	case "ok":
		return nil
	case "fail":
		return errors.New("upstream unavailable")
	case "permanent":
		return sqsworker.Permanent(errors.New("malformed job"))
	case "panic":
		panic("job exploded")
	case "retry-after":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return sqsworker.Permanent(fmt.Errorf("bad duration %q: %w", arg, err))
		}
		return sqsworker.RetryAfter(d, errors.New("rate limited"))
	case "sleep":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return sqsworker.Permanent(fmt.Errorf("bad duration %q: %w", arg, err))
		}
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	case "stall":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return sqsworker.Permanent(fmt.Errorf("bad duration %q: %w", arg, err))
		}
		time.Sleep(d)
		return nil
	case "crash":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return sqsworker.Permanent(fmt.Errorf("bad duration %q: %w", arg, err))
		}
		time.Sleep(d)
		os.Exit(137)
	case "fail-until":
		n, err := strconv.Atoi(arg)
		if err != nil {
			return sqsworker.Permanent(fmt.Errorf("bad attempt count %q: %w", arg, err))
		}
		if m.ReceiveCount < n {
			return fmt.Errorf("attempt %d of %d", m.ReceiveCount, n)
		}
		return nil
	}
	return sqsworker.Permanent(fmt.Errorf("unknown job %q", verb))
}

func main() {
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	lambda.Start(sqsworker.HandlerFunc(handle), lambda.Config{
		Logger:  logger,
		Backoff: sqsworker.ExponentialBackoff{Base: 2 * time.Second, Cap: time.Minute},
	})
}

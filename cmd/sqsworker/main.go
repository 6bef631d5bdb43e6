// Command sqsworker operates SQS job queues: send jobs, watch queue figures,
// inspect dead-letter queues and replay chosen messages, and run a worker
// that hands each message to a command or an HTTP endpoint.
//
// It uses the AWS SDK's standard configuration: credentials, region,
// profiles, and endpoints such as AWS_ENDPOINT_URL_SQS for a local emulator.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRoot(os.Stdin, os.Stdout, os.Stderr).ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqsworker:", err)
		var ec exitCoder
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
}

// exitCoder is an error that chooses the process's exit code.
type exitCoder interface{ ExitCode() int }

// Command sqsworker operates SQS job queues: create and list queues, send
// jobs, watch queue figures, inspect dead-letter queues and replay chosen
// messages, and run a worker that hands each message to a command or an
// HTTP endpoint.
//
// It uses the AWS SDK's standard configuration: credentials, region,
// profiles, and endpoints such as AWS_ENDPOINT_URL_SQS for a local emulator.
//
// Exit status: 0 on success, 1 when the work failed, 2 for a mistake in the
// command line, 130 when Ctrl-C (SIGINT) cut a command short (143 for
// SIGTERM). A second Ctrl-C stops at once what the first let finish.
package main

import (
	"context"
	"fmt"
	"os"
)

func main() {
	ctx, stop := notifyInterrupts(context.Background())
	err := newRoot(os.Stdin, os.Stdout, os.Stderr).ExecuteContext(ctx)
	code := exitCode(ctx, err)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqsworker:", err)
	}
	os.Exit(code)
}

// exitCoder is an error that chooses the process's exit code.
type exitCoder interface{ ExitCode() int }

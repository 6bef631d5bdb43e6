package lambda_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// checkMarginLog asserts that an error log names Config.SafetyMargin, the
// time the invocation had, and the fix.
func checkMarginLog(t *testing.T, logs string) {
	t.Helper()
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "Config.SafetyMargin") &&
			strings.Contains(line, "safety_margin=5s") && strings.Contains(line, "function's timeout") {
			return
		}
	}
	t.Errorf("no error log names Config.SafetyMargin, the time left and the fix:\n%s", logs)
}

// A SafetyMargin not shorter than the function's timeout leaves no time to
// start any record: every record is released without running, again and
// again, until SQS dead-letters it. That is a configuration error, which
// the function names in an error log, with its fix, at every invocation.
// Before, the only log was a failed read of the queue's attributes (its
// time is cut at the time to start records, already past).
func TestSafetyMarginLeavingNoTime(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) (lambda.API, events.SQSEvent)
	}{
		{"fake", func(t *testing.T) (lambda.API, events.SQSEvent) {
			f := newFake("30")
			return f, received(t, f, "orders", "ok")
		}},
		{"emulator", func(t *testing.T) (lambda.API, events.SQSEvent) {
			sq := localtest.NewSQS(t)
			q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3})
			localtest.Send(t, sq, q.URL, "", "ok")
			return sq, sqstest.SQSEvent(q.ARN, receiveN(t, sq, q.URL, 1))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, ev := c.setup(t)
			var logs logBuffer
			var ran atomic.Int64
			h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran.Add(1); return nil })
			fn := newHandler(t, h, lambda.Config{Client: client, SafetyMargin: 5 * time.Second, DisableHeartbeat: true,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			resp := invokeBy(t, fn, ev, 2*time.Second)
			if len(resp.BatchItemFailures) != 1 || ran.Load() != 0 {
				t.Errorf("failures %v, ran %d: want the record released without running", failedIDs(resp), ran.Load())
			}
			checkMarginLog(t, logs.String())
		})
	}
}

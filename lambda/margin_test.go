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
// time is cut at the time to start records, already past). With that read
// given up, the redrive policy is unknown, and the record may wait in a
// fresh copy instead of being reported failed: either way it stays in its
// queue, once.
func TestSafetyMarginLeavingNoTime(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(t *testing.T) (lambda.API, events.SQSEvent, func() int)
	}{
		{"fake", func(t *testing.T) (lambda.API, events.SQSEvent, func() int) {
			f := newFake("30")
			return f, received(t, f, "orders", "ok"), func() int {
				v, fl, d := f.Depth(sqstest.QueueURL("orders"))
				return v + fl + d
			}
		}},
		{"emulator", func(t *testing.T) (lambda.API, events.SQSEvent, func() int) {
			sq := localtest.NewSQS(t)
			q := localtest.NewQueue(t, sq, localtest.QueueOptions{MaxReceiveCount: 3})
			localtest.Send(t, sq, q.URL, "", "ok")
			return sq, sqstest.SQSEvent(q.ARN, receiveN(t, sq, q.URL, 1)), func() int {
				v, i, d := localtest.Depth(t, sq, q.URL)
				return v + i + d
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, ev, depth := c.setup(t)
			var logs logBuffer
			var ran atomic.Int64
			h := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran.Add(1); return nil })
			fn := newHandler(t, h, lambda.Config{Client: client, SafetyMargin: 5 * time.Second, DisableHeartbeat: true,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			resp := invokeBy(t, fn, ev, 2*time.Second)
			if ran.Load() != 0 || depth() != 1 {
				t.Errorf("failures %v, ran %d, %d in the queue: want the record released without running (or waiting in a copy)", failedIDs(resp), ran.Load(), depth())
			}
			checkMarginLog(t, logs.String())
		})
	}
}

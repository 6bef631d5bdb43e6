package chaos_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/internal/chaos"
)

// requireStack skips the test when the local stack's endpoints are not set,
// or fails it in CI, where the stack must be there (as localtest.Require
// does).
func requireStack(t *testing.T) {
	t.Helper()
	sqsURL, ddbURL := chaos.Endpoints()
	if sqsURL != "" && ddbURL != "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no local SQS and DynamoDB endpoints: run the tests with `make test`, which starts the local stack")
	}
	t.Skip("no local SQS and DynamoDB endpoints (AWS_ENDPOINT_URL_SQS, AWS_ENDPOINT_URL_DYNAMODB); run `make test` or `make chaos`")
}

// TestChaosShort runs every scenario in short mode against the local stack:
// a few minutes on two cores.
func TestChaosShort(t *testing.T) {
	requireStack(t)
	if testing.Short() {
		t.Skip("the chaos scenarios take minutes; run without -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if d, ok := t.Deadline(); ok {
		ctx, cancel = context.WithDeadline(ctx, d.Add(-30*time.Second))
		defer cancel()
	}
	results, err := chaos.Run(ctx, chaos.Options{LogDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), nil))})
	var table strings.Builder
	if werr := chaos.WriteTable(&table, results); werr != nil {
		t.Error(werr)
	}
	t.Logf("\n%s", table.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if !r.Pass {
			t.Errorf("%s: %s\n%s", r.Label, strings.Join(r.Failures, "; "), logTail(r.LogFile, 60))
		}
	}
}

// logTail returns the last n lines of a scenario's log above the debug
// level, so that a failure in CI, whose temporary directory is gone once
// the test ends, can be read from the test's output.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	var lines []string
	for l := range strings.Lines(string(b)) {
		if !strings.Contains(l, `"level":"DEBUG"`) {
			lines = append(lines, l)
		}
	}
	return "log " + path + ", its last lines above debug:\n" + strings.Join(lines[max(0, len(lines)-n):], "")
}

func TestSelectUnknownScenario(t *testing.T) {
	_, err := chaos.Run(context.Background(), chaos.Options{Scenarios: []string{"no-such-scenario"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-scenario") {
		t.Fatalf("Run with an unknown scenario: %v; want an error naming it", err)
	}
}

func TestNonLoopbackEndpointRefused(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_SQS", "http://10.1.2.3:9324")
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://127.0.0.1:8000")
	_, err := chaos.Run(context.Background(), chaos.Options{Scenarios: []string{"kill"}})
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("Run against a remote endpoint: %v; want a refusal", err)
	}
}

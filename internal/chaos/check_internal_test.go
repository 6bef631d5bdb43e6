package chaos

import (
	"os"
	"path/filepath"
	"testing"
)

// The worker's retries are read from the line it logs as it stops, its own
// (by pid) and not another start's; a log without it is an error.
func TestWorkerRetries(t *testing.T) {
	log := filepath.Join(t.TempDir(), "scenario.log")
	lines := `{"time":"2026-12-03T11:32:40Z","level":"WARN","msg":"dependency unavailable; retrying","pid":30237,"retry_in":865394620}
{"time":"2026-12-03T11:32:45Z","level":"INFO","msg":"chaosworker stopped","pid":30237,"worker":"{Received:100 Succeeded:98 Failed:2 Panics:0 Retried:2 Postponed:1 DeadLettered:0 Released:0}","idempotency":"{Claimed:98}"}
{"time":"2026-12-03T11:32:45Z","level":"INFO","msg":"note","runner":"sigterm","note":"chaosworker stopped"}
{"time":"2026-12-03T11:33:05Z","level":"INFO","msg":"chaosworker stopped","pid":30469,"worker":"{Received:2 Succeeded:2 Failed:0 Retried:0 Postponed:0}"}
`
	if err := os.WriteFile(log, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[int]int{30237: 3, 30469: 0} {
		if n, err := workerRetries(log, pid); err != nil || n != want {
			t.Errorf("worker %d: %d, %v; want %d", pid, n, err, want)
		}
	}
	if _, err := workerRetries(log, 1); err == nil {
		t.Error("a worker that logged no figures: no error")
	}
}

package chaos

import (
	"os"
	"path/filepath"
	"testing"
)

// The messages the worker retried or postponed as it stopped are read from
// its own lines (by pid), those after its shutdown only, each message
// once; a worker that logged no shutdown is an error.
func TestRetriedAtStop(t *testing.T) {
	log := filepath.Join(t.TempDir(), "scenario.log")
	lines := `{"level":"WARN","msg":"handler failed; retrying","pid":30237,"message_id":"before-the-stop"}
{"level":"INFO","msg":"shutting down","pid":30237,"signal":"terminated"}
{"level":"WARN","msg":"dependency unavailable; retrying","pid":30237,"message_id":"a"}
{"level":"WARN","msg":"dependency unavailable; retrying","pid":30237,"message_id":"a"}
{"level":"DEBUG","msg":"message postponed","pid":30237,"message_id":"b"}
{"level":"WARN","msg":"dependency unavailable; retrying","pid":30469,"message_id":"another-worker"}
{"level":"INFO","msg":"note","runner":"sigterm","note":"shutting down"}
{"level":"INFO","msg":"shutting down","pid":30469,"signal":"terminated"}
`
	if err := os.WriteFile(log, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[int]int{30237: 2, 30469: 0} {
		if n, err := retriedAtStop(log, pid); err != nil || n != want {
			t.Errorf("worker %d: %d, %v; want %d", pid, n, err, want)
		}
	}
	if _, err := retriedAtStop(log, 1); err == nil {
		t.Error("a worker that logged no shutdown: no error")
	}
}

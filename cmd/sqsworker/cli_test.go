package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// runCLI runs the command line in-process, as main would, and returns what
// it printed and its exit code.
func runCLI(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := newRoot(strings.NewReader(stdin), &out, &errOut)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err != nil {
		errOut.WriteString("sqsworker: " + err.Error() + "\n")
	}
	return out.String(), errOut.String(), exitCode(ctx, err)
}

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var _ = io.Discard

// buildSQSWorker builds the command into a temporary directory, for tests
// of the process as a whole: signals, environment, exit status.
func buildSQSWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sqsworker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestUnknownOutputIsAUsageError(t *testing.T) {
	_, stderr, code := runCLI(t, "", "-o", "xml", "version")
	if code != 2 || !strings.Contains(stderr, `--output "xml"`) {
		t.Errorf("code %d, stderr %q", code, stderr)
	}
	_, stderr, code = runCLI(t, "", "version", "--no-such-flag")
	if code != 2 || !strings.Contains(stderr, "no-such-flag") {
		t.Errorf("code %d, stderr %q", code, stderr)
	}
}

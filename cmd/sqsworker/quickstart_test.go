package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// readmeGoBlock returns the first Go code block of the README section
// headed heading.
func readmeGoBlock(t *testing.T, heading string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README.md has no %q section", heading)
	}
	section := readme[i+len(heading)+2:]
	if next := strings.Index(section, "\n## "); next >= 0 {
		section = section[:next]
	}
	_, block, ok := strings.Cut(section, "```go\n")
	if !ok {
		t.Fatalf("the %q section has no Go code block", heading)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatalf("the %q section's Go code block does not end", heading)
	}
	return block
}

// The README's quick start compiles as written, with the toolkit of this
// checkout: it is built and vetted as a program of this module.
func TestREADMEQuickStartCompiles(t *testing.T) {
	t.Parallel()
	src := readmeGoBlock(t, "## Quick start")
	if !strings.HasPrefix(src, "package main\n") {
		t.Fatalf("the quick start is not a whole program:\n%s", src)
	}
	// A directory of this module, so that the program builds with its
	// requirements and the workspace's toolkit; the Go tool's patterns
	// (./...) skip names starting with _.
	dir, err := os.MkdirTemp(".", "_quickstart")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg := "./" + filepath.Base(dir)
	for _, args := range [][]string{
		{"build", "-o", filepath.Join(t.TempDir(), "quickstart"), pkg},
		{"vet", pkg},
	} {
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			t.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command("gofmt", "-l", dir).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("the quick start is not gofmt-formatted: %s %v", out, err)
	}
}

// The quick start says how to create the queue and where the idempotency
// table comes from.
func TestREADMEQuickStartMentionsSetUp(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	start := strings.Index(readme, "\n## Quick start\n")
	end := strings.Index(readme[start+1:], "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("no quick start section")
	}
	qs := readme[start : start+1+end]
	for _, want := range []string{"sqsworker queue create", "idempotency.CreateTable", "IdempotencyTable", `eval "$(localstack/stack.sh env)"`} {
		if !strings.Contains(qs, want) {
			t.Errorf("the quick start does not mention %s", want)
		}
	}
}

package dlq

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The audit log is created readable and writable by its owner only, is
// appended to, and is never opened through a symbolic link.
func TestOpenAuditLog(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	for i := range 2 {
		l, err := OpenAuditLog(path)
		if err != nil {
			t.Fatal(err)
		}
		a := Audit{Record: l.Record, Caller: "me"}
		if err := a.record(context.Background(), AuditRecord{Action: ActionPurge, DLQ: "q", Note: strings.Repeat("x", i)}); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600", fi.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines: %s", len(lines), b)
	}
	for _, line := range lines {
		var r AuditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Caller != "me" || r.Action != ActionPurge || r.Time.IsZero() {
			t.Errorf("line %s: %v", line, err)
		}
	}

	if runtime.GOOS == "windows" {
		return
	}
	// A symbolic link planted at the path is not followed, whether its
	// target exists or not; the target is left alone.
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, link := range []struct{ name, to string }{{"link", target}, {"dangling", filepath.Join(dir, "not-yet")}} {
		p := filepath.Join(dir, link.name)
		if err := os.Symlink(link.to, p); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenAuditLog(p); err == nil || !strings.Contains(err.Error(), "is a symbolic link: not followed") {
			t.Errorf("%s: %v", link.name, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("the link's target was written: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "not-yet")); !os.IsNotExist(err) {
		t.Errorf("the dangling link's target was created: %v", err)
	}
	// A log anyone may rewrite is refused; a directory is not a log.
	open := filepath.Join(dir, "open.jsonl")
	if err := os.WriteFile(open, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenAuditLog(open); err == nil || !strings.Contains(err.Error(), "can be written by anyone (mode 0666)") {
		t.Errorf("world-writable: %v", err)
	}
	if _, err := OpenAuditLog(dir); err == nil || !strings.Contains(err.Error(), "is not a regular file") {
		t.Errorf("directory: %v", err)
	}
}

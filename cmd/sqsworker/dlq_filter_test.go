package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/dlq"
)

// The filter flags make the library's filter, with relative times from
// now; every mistake is named in one usage error.
func TestDlqFilterFlags(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f, err := filterFlags{
		classes: []string{"a", "b"}, attrs: []string{"tenant=acme", "k=v=w"}, since: "3h ago", until: "2026-11-29T11:00:00Z",
		bodyContains: "order", jsonFields: []string{"order.id=7"},
	}.parse(now)
	if err != nil {
		t.Fatal(err)
	}
	want := `error-class in ("a", "b") and attr tenant="acme" and attr k="v=w" and failed at or after 2026-11-29T09:00:00Z and failed before 2026-11-29T11:00:00Z and body contains "order" and json order.id="7"`
	if f.String() != want || f.Validate() != nil {
		t.Errorf("filter\n got %s\nwant %s", f.String(), want)
	}
	if all, err := (filterFlags{}).parse(now); err != nil || all.String() != "all messages" {
		t.Errorf("no flags: %v, %q", err, all.String())
	}
	_, err = filterFlags{attrs: []string{"x", "=y", "z="}, jsonFields: []string{"a.=1", "b"}, since: "soon", classes: []string{" "}}.parse(now)
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("bad filters: %v is not a usage error", err)
	}
	for _, want := range []string{`--attr "x"`, `--attr "=y"`, `--attr "z="`, `--json-field "a.=1"`, `--json-field "b"`, `--since: "soon"`, "--error-class: empty class"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	_, err = filterFlags{since: "1h ago", until: "2h ago"}.parse(now)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--since 2026-11-29T11:00:00Z is not before --until 2026-11-29T10:00:00Z") {
		t.Errorf("since after until: %v", err)
	}
	var _ dlq.Filter = f
}

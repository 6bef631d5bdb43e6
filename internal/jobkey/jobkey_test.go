package jobkey

import (
	"testing"

	"github.com/sqsworker/sqsworker"
)

func TestDefault(t *testing.T) {
	m := &sqsworker.Message{ID: "copy-id", MessageAttributes: map[string]sqsworker.MessageAttribute{}}
	if got := Default(m); got != "message-id:copy-id" {
		t.Errorf("without failure metadata: %q", got)
	}
	m.MessageAttributes, _ = sqsworker.Failure{MessageID: "first-id", SourceQueue: "https://q", ErrorClass: "c"}.AddTo(m.MessageAttributes)
	if got := Default(m); got != "message-id:first-id" {
		t.Errorf("with failure metadata naming the first message: %q", got)
	}
}

func TestNew(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := New()
		if len(k) != len(GeneratedPrefix)+26 || k[:len(GeneratedPrefix)] != GeneratedPrefix || seen[k] {
			t.Fatalf("New() = %q: want %s and 26 characters, never twice", k, GeneratedPrefix)
		}
		seen[k] = true
	}
}

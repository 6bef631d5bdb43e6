package idempotency

import (
	"testing"
	"time"
)

func TestLRUEvictsOldestAndExpires(t *testing.T) {
	c := newLRU(2)
	now := time.Now()
	c.add("a", now.Add(time.Hour))
	c.add("b", now.Add(time.Hour))
	if !c.has("a", now) { // a is now the most recent
		t.Fatal("a missing")
	}
	c.add("c", now.Add(time.Hour)) // evicts b
	if c.has("b", now) || !c.has("a", now) || !c.has("c", now) {
		t.Error("wrong key evicted")
	}
	if c.has("a", now.Add(2*time.Hour)) {
		t.Error("expired key still cached")
	}
	if c.has("a", now) {
		t.Error("expired key not dropped")
	}
}

package idempotency

import (
	"testing"
	"time"
)

func TestLRUEvictsOldestAndExpires(t *testing.T) {
	c := newLRU(2)
	now := time.Now()
	rec := func(k string) *Record { return &Record{Key: k, Status: StatusCompleted, Expiry: now.Add(time.Hour)} }
	has := func(k string, at time.Time) bool { _, ok := c.get(k, at); return ok }
	c.add(rec("a"))
	c.add(rec("b"))
	if !has("a", now) { // a is now the most recent
		t.Fatal("a missing")
	}
	c.add(rec("c")) // evicts b
	if has("b", now) || !has("a", now) || !has("c", now) {
		t.Error("wrong key evicted")
	}
	if has("a", now.Add(2*time.Hour)) {
		t.Error("expired key still cached")
	}
	if has("a", now) {
		t.Error("expired key not dropped")
	}
}

// The cache hands out copies: changing one changes neither the cache nor
// the record it was filled from.
func TestLRUKeepsCopies(t *testing.T) {
	c := newLRU(1)
	r := &Record{Key: "k", Status: StatusCompleted, Expiry: time.Now().Add(time.Hour), Result: []byte("receipt")}
	c.add(r)
	r.Result[0] = 'X'
	got, _ := c.get("k", time.Now())
	got.Result[1] = 'Y'
	if again, _ := c.get("k", time.Now()); string(again.Result) != "receipt" {
		t.Errorf("cached result %q", again.Result)
	}
}

package fifoattempt

import (
	"testing"
	"time"
)

func TestRetry(t *testing.T) {
	var r Retry
	now := time.Now()
	if n := r.Pending(now); n != 0 {
		t.Fatalf("zero Retry: Pending = %d, want 0", n)
	}
	first := r.For(10, now)
	if first == "" {
		t.Fatal("For returned no ID")
	}
	if n := r.Pending(now.Add(time.Second)); n != 10 {
		t.Errorf("after a failed receive of 10: Pending = %d, want 10", n)
	}
	if id := r.For(10, now.Add(Window-time.Second)); id != first {
		t.Errorf("a retry within the window got %q, want the failed receive's %q", id, first)
	}
	// Fewer messages: a new ID, kept for its own retries.
	fewer := r.For(3, now.Add(2*time.Second))
	if fewer == first {
		t.Error("a retry asking for fewer messages got the failed receive's ID")
	}
	if id := r.For(3, now.Add(3*time.Second)); id != fewer {
		t.Errorf("got %q, want %q again", id, fewer)
	}
	// Past the window: a new ID.
	late := now.Add(2*time.Second + Window)
	if n := r.Pending(late); n != 0 {
		t.Errorf("past the window: Pending = %d, want 0", n)
	}
	if id := r.For(3, late); id == fewer {
		t.Error("a retry past the window got the old ID")
	}
	// Done: a new ID.
	kept := r.For(3, late)
	r.Done()
	if n := r.Pending(late); n != 0 {
		t.Errorf("after Done: Pending = %d, want 0", n)
	}
	if id := r.For(3, late); id == kept {
		t.Error("a receive after Done got the old ID")
	}
}

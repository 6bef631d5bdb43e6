package dlq

import (
	"strings"
	"testing"
	"time"
)

// A rate that keeps each message waiting for its turn past half its
// visibility timeout is refused, naming the visibility timeout it needs:
// the replay would otherwise leave nearly every message, SQS showing it
// again before its move.
func TestCheckPace(t *testing.T) {
	for _, c := range []struct {
		rate float64
		vis  time.Duration
		want string
	}{
		{0, time.Second, ""},
		{1, 2 * time.Second, ""},
		{4, 2 * time.Second, ""},
		{0.02, 100 * time.Second, ""},
		{0.02, 30 * time.Second, "give a visibility timeout of 1m40s or more"},
		{0.5, 2 * time.Second, "each message would wait 2s for its turn"},
		{0.3, 5 * time.Second, "give a visibility timeout of 7s or more"},
	} {
		err := CheckPace(c.rate, c.vis)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("rate %v, visibility %s: %v, want nil", c.rate, c.vis, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("rate %v, visibility %s: %v, want %q", c.rate, c.vis, err, c.want)
		}
	}
	if _, err := (&Queue{}).replay(t.Context(), ReplayConfig{PerSecond: 0.02}, true); err == nil || !strings.Contains(err.Error(), "1m40s") {
		t.Errorf("Replay at 0.02 a second with the default visibility: %v, want the pace refused", err)
	}
}

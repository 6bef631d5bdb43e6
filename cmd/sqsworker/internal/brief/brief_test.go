package brief

import (
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Second:              "30s",
		5 * time.Minute:               "5m",
		time.Hour:                     "1h",
		90 * time.Minute:              "1h30m",
		12 * time.Hour:                "12h",
		time.Hour + time.Second:       "1h0m1s",
		2*time.Minute + 5*time.Second: "2m5s",
		1500 * time.Millisecond:       "1.5s",
		0:                             "0s",
	} {
		if got := Duration(d); got != want {
			t.Errorf("Duration(%s) = %q, want %q", d, got, want)
		}
	}
}

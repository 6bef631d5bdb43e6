package visibility_test

import (
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/visibility"
)

// CheckFields names what is wrong whatever the queue, and nothing that
// depends on it: the zero Config, whose durations default from the
// queue's visibility timeout, passes.
func TestCheckFields(t *testing.T) {
	if err := (visibility.Config{}).CheckFields(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
	if err := (visibility.Config{Threshold: time.Hour, Interval: 2 * time.Hour}).CheckFields(); err != nil {
		t.Errorf("durations that only the queue can refuse: %v", err)
	}
	err := visibility.Config{Extension: 1500 * time.Millisecond, Threshold: -time.Second, Interval: -time.Second,
		MaxLifetime: 13 * time.Hour, MaxInFlight: -1}.CheckFields()
	for _, want := range []string{"Extension 1.5s", "Threshold -1s", "Interval -1s", "MaxLifetime 13h0m0s", "MaxInFlight -1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckFields: %v, want %q named", err, want)
		}
	}
}

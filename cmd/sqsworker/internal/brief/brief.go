// Package brief formats values for the command's text output and its web
// pages, so that both write them alike.
package brief

import (
	"strings"
	"time"
)

// Duration writes d without its zero minutes and seconds: "30s", "5m",
// "1h", "1h30m". Other durations are written as time.Duration.String
// writes them.
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

package worker

import "cmp"

// conns is how many SQS calls one queue's worker may have under way at once
// besides its handlers': its receive loops, its acknowledgement batches (as
// many as its loops, at least 4) and its heartbeat's calls
// (Heartbeat.MaxInFlight, default 4). Each handler goroutine may have one
// more under way, a dead-letter move or a delayed copy: the callers add
// the handler slots.
func conns(cfg Config) int {
	n := cfg.Pollers + max(4, cfg.Pollers)
	if !cfg.DisableHeartbeat {
		n += cmp.Or(cfg.Heartbeat.MaxInFlight, 4)
	}
	return n
}

package worker

import "cmp"

// conns is how many SQS calls one queue's worker may have under way at once
// besides its handlers': its receive loops, its acknowledgement batches (as
// many as its loops, at least 4) and its heartbeat's calls (see
// heartbeatCalls). Each handler goroutine may have one more under way, a
// dead-letter move or a delayed copy: the callers add the handler slots.
func conns(cfg Config) int {
	n := cfg.Pollers + max(4, cfg.Pollers)
	if !cfg.DisableHeartbeat {
		n += heartbeatCalls(cfg)
	}
	return n
}

// heartbeatCalls is the heartbeat's MaxInFlight: Heartbeat.MaxInFlight, by
// default as many as the receive loops, at least 4. The messages of one
// receive of each loop fall due in one round: at 4 calls at once, a round
// of 1,000 leases (100 loops) with SQS answering in a second outlasted the
// leases' time left, and cut healthy handlers short.
func heartbeatCalls(cfg Config) int {
	return cmp.Or(cfg.Heartbeat.MaxInFlight, max(4, cfg.Pollers))
}

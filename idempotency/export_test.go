package idempotency

import "time"

// SetLocalWait sets how long g's messages wait for a handler of their key
// under g (5s by default), for tests on a loaded machine, where a claim
// alone may take that long. Call it before g handles anything.
func SetLocalWait(g *Guard, d time.Duration) { g.localWait = d }

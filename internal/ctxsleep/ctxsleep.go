// Package ctxsleep waits for a duration unless a context ends first.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits until d has passed or ctx is done, whichever comes first, and
// reports whether it waited the full d. Its timer is stopped on return, so an
// early return leaves nothing behind.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

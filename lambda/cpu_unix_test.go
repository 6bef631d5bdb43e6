//go:build unix

package lambda_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the process has used so far, user and system,
// on every thread: benchmarks report it per message next to the wall time,
// which on a shared machine also counts the time spent waiting for a core.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Package bubble runs a test in a synctest bubble (testing/synctest), on
// fake time, as synctest.Test does, keeping the race detector's runtime out
// of a fault of its own.
//
// The Go runtime fires a bubble's timers under one race-detector context,
// the bubble's: from the bubble's timer runner, which fires those due once
// every goroutine of the bubble is blocked (starting a goroutine for each
// AfterFunc, a context's deadline among them), and from any goroutine of the
// bubble that fires a due timer itself (a timer made or reset with no time
// left, a receive from a due timer's channel). With more than one P, two
// threads can use that context at once; the race detector's runtime then
// crashes the test binary (SIGSEGV, or "ThreadSanitizer: CHECK failed")
// within a fraction of a second, on go1.26.8 with GOMAXPROCS 2. Without the
// race detector, or on one P, nothing is shared.
package bubble

import (
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
)

// Test runs f in a synctest bubble, as synctest.Test does. Built with the
// race detector, it runs the process on one P (GOMAXPROCS 1) for as long as
// a bubble of Test runs, then gives the process back the Ps it had: the
// race detector still finds the races, which it tells by the order of
// events, not by their running at the same time; tests on fake time are
// not slowed, other tests running beside them are.
func Test(t *testing.T, f func(*testing.T)) {
	t.Helper()
	if raceEnabled {
		onOneP()
		defer offOneP()
	}
	synctest.Test(t, f)
}

// The bubbles of Test running, and the GOMAXPROCS before the first of them.
var (
	mu      sync.Mutex
	running int
	procs   int
)

// onOneP counts a bubble in and, for the first, sets GOMAXPROCS to 1.
func onOneP() {
	mu.Lock()
	defer mu.Unlock()
	if running++; running == 1 {
		procs = runtime.GOMAXPROCS(1)
	}
}

// offOneP counts a bubble out and, for the last, sets GOMAXPROCS back.
func offOneP() {
	mu.Lock()
	defer mu.Unlock()
	if running--; running == 0 {
		runtime.GOMAXPROCS(procs)
	}
}

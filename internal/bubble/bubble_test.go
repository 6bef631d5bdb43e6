package bubble

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// In 50 bubbles of 200 goroutines each, half wait for a context's
// deadline (an AfterFunc the bubble's timer runner fires, starting a
// goroutine) while the other half, woken at the same fake instant, fire a
// timer of their own made with no time left. Under the race detector, with
// two Ps, synctest.Test crashed the test binary within 0.15 s in every run
// (10 of 10, a SIGSEGV or "ThreadSanitizer: CHECK failed"); Test runs them
// all. The process has two Ps at least, as on a machine of two cores or
// more, whatever this one has.
func TestTimersFiredTogether(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	for range 50 {
		Test(t, func(t *testing.T) {
			var wg sync.WaitGroup
			var rounds atomic.Int32
			for i := range 200 {
				wg.Go(func() {
					for range 5 {
						if i%2 == 0 {
							ctx, cancel := context.WithTimeout(context.Background(), time.Second)
							<-ctx.Done()
							cancel()
						} else {
							time.Sleep(time.Second)
							<-time.NewTimer(0).C
						}
						rounds.Add(1)
					}
				})
			}
			wg.Wait()
			if n := rounds.Load(); n != 1000 {
				t.Errorf("%d rounds of 1000", n)
			}
		})
	}
	if n := runtime.GOMAXPROCS(0); n < 2 {
		t.Errorf("GOMAXPROCS %d after the bubbles, want the 2 or more it had", n)
	}
}

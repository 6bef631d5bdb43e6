package worker

import "time"

// SetParkBase sets the first wait before a queue of m that cannot be used
// is tried again (10 s otherwise), before Run.
func (m *MultiWorker) SetParkBase(d time.Duration) {
	for _, w := range m.workers {
		w.parkBase = d
	}
}

// SetParkReset sets how long a queue of m is consumed before its next wait
// starts again from the first (5 minutes otherwise), before Run.
func (m *MultiWorker) SetParkReset(d time.Duration) {
	for _, w := range m.workers {
		w.parkReset = d
	}
}

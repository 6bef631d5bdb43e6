package worker

import "time"

// SetParkBase sets the first wait before a queue of m that cannot be used
// is tried again (10 s otherwise), before Run.
func (m *MultiWorker) SetParkBase(d time.Duration) {
	for _, w := range m.workers {
		w.parkBase = d
	}
}

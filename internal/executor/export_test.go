package executor

// Cost is a job's requests, for the emulator tests.
type Cost = cost

// ExpectedCostWith is the cost the documentation states, for the emulator
// tests.
var ExpectedCostWith = expectedCostWith

// ExpectedCostLate is the cost the documentation states for copies that
// come late, for the emulator tests.
var ExpectedCostLate = expectedCostLate

// Total is the number of requests.
func (c cost) Total() int { return c.total() }

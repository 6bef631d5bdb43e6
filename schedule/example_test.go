package schedule_test

import (
	"fmt"
	"time"
	_ "time/tzdata" // Europe/Paris on any machine

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/schedule"
)

// The body of an occurrence, built locally as EventBridge Scheduler sends
// it, its key for the idempotency middleware, and its payload.
func Example() {
	paris, _ := time.LoadLocation("Europe/Paris")
	body, _ := schedule.Envelope("nightly-report", time.Date(2026, 12, 1, 4, 0, 0, 0, paris), map[string]string{"report": "sales"})
	fmt.Println(body)

	m := &sqsworker.Message{ID: "1f0e", Body: body}
	fmt.Println(schedule.Key(m))

	o, _ := schedule.Parse(m)
	var p struct{ Report string }
	_ = o.Decode(&p)
	fmt.Println(o.Name, o.ScheduledTime, p.Report)

	// In the worker or on Lambda, the key of the idempotency middleware:
	_ = idempotency.Config{Key: schedule.Key}

	// Output:
	// {"sqsworker.schedule":{"name":"nightly-report","scheduledTime":"2026-12-01T03:00:00Z"},"payload":{"report":"sales"}}
	// schedule:nightly-report@2026-12-01T03:00:00Z
	// nightly-report 2026-12-01 03:00:00 +0000 UTC sales
}

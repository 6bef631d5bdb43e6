package producer

import (
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

// A NotBefore a little over 365 days ahead when the message is scheduled
// (schedule leaves it to Validate) and within them by the time Validate
// runs (a first send waits up to 10 s for the queue's attributes) is sent
// with NotBefore as the time it may run. It was sent with the time of the
// send, and ran at once.
func TestNotBeforeJustPastTheLongestDelay(t *testing.T) {
	now := time.Now()
	at := now.Add(sqsworker.MaxDelay - time.Second).Truncate(time.Millisecond)
	m := schedule(Message{Body: "job", NotBefore: at}, now.Add(-2*time.Second))
	if err := Validate(m, false); err != nil {
		t.Fatalf("Validate = %v, want the message valid by now", err)
	}
	attrs, n := fieldAttributes(m)
	for _, a := range attrs[:n] {
		if a.name != sqsworker.AttrNotBefore {
			continue
		}
		if want := sqsworker.NotBeforeAttribute(at); a.attr.StringValue != want.StringValue {
			t.Fatalf("sent with %s %q, want %q (NotBefore)", a.name, a.attr.StringValue, want.StringValue)
		}
		return
	}
	t.Fatalf("sent without %s: %+v", sqsworker.AttrNotBefore, attrs[:n])
}

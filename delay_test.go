package sqsworker_test

import (
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
)

func TestNotBeforeAttribute(t *testing.T) {
	at := time.UnixMilli(1796119278856).Add(300 * time.Microsecond)
	a := sqsworker.NotBeforeAttribute(at)
	if a.DataType != "Number" || a.StringValue != "1796119278857" {
		t.Errorf("NotBeforeAttribute = %+v: want the next millisecond, as a Number", a)
	}
	m := &sqsworker.Message{MessageAttributes: map[string]sqsworker.MessageAttribute{sqsworker.AttrNotBefore: a}}
	if got, ok := m.NotBefore(); !ok || got.Before(at) {
		t.Errorf("NotBefore() = %v, %v: before %v", got, ok, at)
	}
	for _, bad := range []string{"", "soon", "-5", "0", "1.5e3"} {
		m.MessageAttributes[sqsworker.AttrNotBefore] = sqsworker.MessageAttribute{DataType: "Number", StringValue: bad}
		if _, ok := m.NotBefore(); ok {
			t.Errorf("NotBefore() accepts %q", bad)
		}
	}
	if _, ok := (&sqsworker.Message{}).NotBefore(); ok {
		t.Error("a message without the attribute has a time")
	}
}

func TestPriorAttempts(t *testing.T) {
	for v, want := range map[string]int{"3": 3, "0": 0, "-1": 0, "x": 0,
		// Another producer's nonsense: no overflow once the receive count is added.
		"9223372036854775807": 1 << 20} {
		m := &sqsworker.Message{MessageAttributes: map[string]sqsworker.MessageAttribute{sqsworker.AttrPriorAttempts: {DataType: "Number", StringValue: v}}}
		if got := m.PriorAttempts(); got != want {
			t.Errorf("PriorAttempts(%q) = %d, want %d", v, got, want)
		}
	}
	if (&sqsworker.Message{}).PriorAttempts() != 0 {
		t.Error("a message without the attribute has prior attempts")
	}
	if sqsworker.ClampLongDelay(-time.Second) != 0 || sqsworker.ClampLongDelay(400*24*time.Hour) != sqsworker.MaxDelay || sqsworker.ClampLongDelay(30*time.Hour) != 30*time.Hour {
		t.Error("ClampLongDelay does not keep delays in [0, MaxDelay]")
	}
}

package schedule_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/schedule"
)

// template is the body template the sqsinfra Schedule construct gives
// EventBridge Scheduler for the schedule "nightly-report" with the payload
// {"report":"sales"} (its tests assert the same string).
const template = `{"sqsworker.schedule":{"name":"nightly-report","scheduledTime":"<aws.scheduler.scheduled-time>"},"payload":{"report":"sales"}}`

// fired is the body of an occurrence as EventBridge Scheduler sends it: the
// context attribute replaced by the scheduled time.
func fired(at string) *sqsworker.Message {
	return &sqsworker.Message{ID: "id-" + at, Body: strings.Replace(template, "<aws.scheduler.scheduled-time>", at, 1)}
}

func TestKeyOfTheConstructsTemplate(t *testing.T) {
	o, err := schedule.Parse(fired("2026-12-01T03:00:00Z"))
	if err != nil {
		t.Fatal(err)
	}
	if o.Name != "nightly-report" || !o.ScheduledTime.Equal(time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)) || string(o.Payload) != `{"report":"sales"}` {
		t.Errorf("occurrence %+v", o)
	}
	var p struct{ Report string }
	if err := o.Decode(&p); err != nil || p.Report != "sales" {
		t.Errorf("Decode: %+v %v", p, err)
	}
	if k := schedule.Key(fired("2026-12-01T03:00:00Z")); k != "schedule:nightly-report@2026-12-01T03:00:00Z" {
		t.Errorf("key %q", k)
	}
}

// An occurrence fired twice (two messages, two message IDs) has one key;
// each other occurrence has its own.
func TestKeyDeterministic(t *testing.T) {
	a, b := fired("2026-12-01T03:00:00Z"), fired("2026-12-01T03:00:00Z")
	b.ID = "another-message-id"
	if schedule.Key(a) != schedule.Key(b) {
		t.Errorf("one occurrence, two keys: %q %q", schedule.Key(a), schedule.Key(b))
	}
	seen := map[string]string{}
	for _, at := range []string{"2026-12-01T03:00:00Z", "2026-12-02T03:00:00Z", "2026-12-01T03:00:01Z", "2027-12-01T03:00:00Z"} {
		k := schedule.Key(fired(at))
		if prev, ok := seen[k]; ok {
			t.Errorf("%s and %s share the key %q", prev, at, k)
		}
		seen[k] = at
	}
	// A time with a fraction of a second (a hand-made envelope) keeps it:
	// two occurrences within one second are two jobs.
	if k := schedule.Key(fired("2026-12-01T03:00:00.25Z")); k != "schedule:nightly-report@2026-12-01T03:00:00.25Z" {
		t.Errorf("key of a time with a fraction %q", k)
	}
	// Another schedule at the same time has another key.
	other, _ := schedule.Envelope("hourly-sync", time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC), nil)
	if k := schedule.Key(&sqsworker.Message{Body: other}); k == schedule.Key(a) || k != "schedule:hourly-sync@2026-12-01T03:00:00Z" {
		t.Errorf("other schedule's key %q", k)
	}
}

// The same instant written in another zone, or built locally from a time
// in another zone, gives the same UTC key.
func TestKeyTimeZones(t *testing.T) {
	want := "schedule:nightly-report@2026-12-01T03:00:00Z"
	for _, at := range []string{"2026-12-01T04:00:00+01:00", "2026-11-30T22:00:00-05:00", "2026-12-01T03:00:00.000Z"} {
		if k := schedule.Key(fired(at)); k != want {
			t.Errorf("%s: key %q, want %q", at, k, want)
		}
	}
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	body, err := schedule.Envelope("nightly-report", time.Date(2026, 12, 1, 4, 0, 0, 0, paris), json.RawMessage(`{"report":"sales"}`))
	if err != nil {
		t.Fatal(err)
	}
	if body != fired("2026-12-01T03:00:00Z").Body {
		t.Errorf("local envelope %s differs from the scheduler's", body)
	}
	if k := schedule.Key(&sqsworker.Message{Body: body}); k != want {
		t.Errorf("local envelope's key %q", k)
	}
}

func TestNotEnvelope(t *testing.T) {
	for _, body := range []string{"", "plain text", `["a"]`, `{"order":42}`, `{not json`, `"sqsworker.schedule"`} {
		m := &sqsworker.Message{ID: "mid", Body: body}
		if _, err := schedule.Parse(m); !errors.Is(err, schedule.ErrNotEnvelope) {
			t.Errorf("%q: %v, want ErrNotEnvelope", body, err)
		}
		if k := schedule.Key(m); k != idempotency.DefaultKey(m) {
			t.Errorf("%q: key %q, want DefaultKey's %q", body, k, idempotency.DefaultKey(m))
		}
	}
	// The producer's idempotency-key attribute is still honoured.
	m := &sqsworker.Message{ID: "mid", Body: `{"order":42}`, MessageAttributes: map[string]sqsworker.MessageAttribute{
		idempotency.KeyAttribute: {DataType: "String", StringValue: "order-42"}}}
	if k := schedule.Key(m); k != "order-42" {
		t.Errorf("key %q, want the attribute's", k)
	}
}

func TestMalformedEnvelope(t *testing.T) {
	for body, problem := range map[string]string{
		`{"sqsworker.schedule":{"name":"n","scheduledTime":"yesterday"}}`:           `scheduledTime "yesterday" is not an RFC 3339 time`,
		`{"sqsworker.schedule":{"name":"n"}}`:                                       `scheduledTime "" is not an RFC 3339 time`,
		`{"sqsworker.schedule":{"name":"","scheduledTime":"2026-12-01T03:00:00Z"}}`: "the schedule name is empty",
		`{"sqsworker.schedule":"nightly"}`:                                          "is not an object with a name and a scheduledTime",
		`{"sqsworker.schedule":{"name":"n","scheduledTime":"2026-12-01T03:00:00Z"}`: "unexpected end of JSON input",
		// Keys that differ from the envelope's only in case, which
		// encoding/json would read as them.
		`{"SQSWorker.Schedule":{"name":"n","scheduledTime":"2026-12-01T03:00:00Z"}}`:                   `key "SQSWorker.Schedule": want "sqsworker.schedule"`,
		`{"sqsworker.schedule":{"name":"n","ScheduledTime":"2026-12-01T03:00:00Z"}}`:                   `key "ScheduledTime": want "scheduledTime"`,
		`{"sqsworker.schedule":{"name":"n","scheduledTime":"2026-12-01T03:00:00Z"},"Payload":{"a":1}}`: `key "Payload": want "payload"`,
		`{"sqsworker.schedule":null}`: "is not an object with a name and a scheduledTime",
		// The context attribute left unreplaced: the template sent as is.
		template: `scheduledTime "<aws.scheduler.scheduled-time>" is not an RFC 3339 time`,
	} {
		m := &sqsworker.Message{ID: "mid", Body: body}
		_, err := schedule.Parse(m)
		var me *schedule.MalformedError
		if !errors.As(err, &me) {
			t.Errorf("%s: %v, want a MalformedError", body, err)
			continue
		}
		if !strings.Contains(err.Error(), problem) || !strings.Contains(err.Error(), `want {"sqsworker.schedule"`) {
			t.Errorf("%s: error %q does not say %q and the expected form", body, err, problem)
		}
		if k := schedule.Key(m); k != idempotency.DefaultKey(m) {
			t.Errorf("%s: key %q, want DefaultKey's", body, k)
		}
	}
}

func TestEnvelope(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 999, time.UTC)
	body, err := schedule.Envelope("n", at, map[string]any{"html": "<b>&</b>"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"sqsworker.schedule":{"name":"n","scheduledTime":"2026-12-01T03:00:00Z"},"payload":{"html":"<b>&</b>"}}`; body != want {
		t.Errorf("Envelope = %s, want %s", body, want)
	}
	o, err := schedule.ParseBody(body)
	if err != nil || o.Key() != "schedule:n@2026-12-01T03:00:00Z" {
		t.Errorf("round trip: %+v %v", o, err)
	}
	if nobody, _ := schedule.Envelope("n", at, nil); !strings.HasSuffix(nobody, `"payload":null}`) {
		t.Errorf("nil payload: %s", nobody)
	}
	if _, err := schedule.Envelope("nightly report", at, nil); err == nil || !strings.Contains(err.Error(), "1 to 64 letters") {
		t.Errorf("bad name: %v", err)
	}
	if _, err := schedule.Envelope("n", at, func() {}); err == nil {
		t.Error("a function marshalled")
	}
}

package schedule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
)

// EnvelopeKey is the key of the schedule's part of an envelope.
const EnvelopeKey = "sqsworker.schedule"

// KeyPrefix starts the idempotency key of every occurrence (see Key).
const KeyPrefix = "schedule:"

// ErrNotEnvelope is the error of Parse for a body that is not a schedule
// envelope: not a JSON object, or one without EnvelopeKey.
var ErrNotEnvelope = errors.New("schedule: the message is not a schedule envelope (no " + EnvelopeKey + " object)")

// MalformedError is the error of Parse for a body that has EnvelopeKey but
// not a usable schedule name and scheduled time.
type MalformedError struct {
	// Problem says what is wrong with the envelope.
	Problem string
}

func (e *MalformedError) Error() string {
	return "schedule: malformed envelope: " + e.Problem +
		` (want {"` + EnvelopeKey + `":{"name":NAME,"scheduledTime":RFC3339},"payload":...})`
}

// Occurrence is one firing of a schedule, as its envelope carries it.
type Occurrence struct {
	// Name is the schedule's name (ScheduleProps.Name).
	Name string
	// ScheduledTime is the time the occurrence was scheduled for, in UTC
	// (EventBridge Scheduler's are whole seconds).
	ScheduledTime time.Time
	// Payload is the schedule's payload, as JSON ("null" when it has
	// none).
	Payload json.RawMessage
}

// Key is the occurrence's idempotency key: "schedule:" + Name + "@" +
// ScheduledTime in UTC RFC 3339, such as
// "schedule:nightly-report@2026-12-01T03:00:00Z", with its fraction of a
// second when it has one ("…T03:00:00.25Z"), so that two occurrences of
// one second are two jobs.
func (o Occurrence) Key() string {
	return KeyPrefix + o.Name + "@" + o.ScheduledTime.UTC().Format(time.RFC3339Nano)
}

// Decode unmarshals the payload into v.
func (o Occurrence) Decode(v any) error {
	if err := json.Unmarshal(o.Payload, v); err != nil {
		return fmt.Errorf("schedule: decoding the payload of %s: %w", o.Key(), err)
	}
	return nil
}

type meta struct {
	Name          string `json:"name"`
	ScheduledTime string `json:"scheduledTime"`
}

// Parse reads the occurrence in a message's body. It returns ErrNotEnvelope
// for a body that is not an envelope, and a *MalformedError for an envelope
// without a schedule name or with a scheduled time that is not RFC 3339. A
// scheduled time with an offset is converted to UTC; its fraction of a
// second, if any, is kept. Keys are matched exactly: a key of the envelope
// or of its schedule part that differs from one only in case ("Payload",
// "ScheduledTime") makes it malformed, not read as that one.
func Parse(m *sqsworker.Message) (Occurrence, error) {
	return ParseBody(m.Body)
}

// ParseBody is Parse of a message body.
func ParseBody(body string) (Occurrence, error) {
	b := bytes.TrimSpace([]byte(body))
	if len(b) == 0 || b[0] != '{' {
		return Occurrence{}, ErrNotEnvelope
	}
	var env map[string]json.RawMessage
	if err := json.Unmarshal(b, &env); err != nil {
		// An object that is not valid JSON cannot be told from a body of
		// another kind unless it has the key.
		if !bytes.Contains(b, []byte(`"`+EnvelopeKey+`"`)) {
			return Occurrence{}, ErrNotEnvelope
		}
		return Occurrence{}, &MalformedError{Problem: err.Error()}
	}
	if err := exactKeys(env, EnvelopeKey); err != nil {
		return Occurrence{}, err
	}
	sched, ok := env[EnvelopeKey]
	if !ok {
		return Occurrence{}, ErrNotEnvelope
	}
	if err := exactKeys(env, "payload"); err != nil {
		return Occurrence{}, err
	}
	var fields map[string]json.RawMessage
	var s meta
	if err := json.Unmarshal(sched, &fields); err != nil || fields == nil {
		problem := "null"
		if err != nil {
			problem = err.Error()
		}
		return Occurrence{}, &MalformedError{Problem: EnvelopeKey + " is not an object with a name and a scheduledTime: " + problem}
	}
	if err := exactKeys(fields, "name", "scheduledTime"); err != nil {
		return Occurrence{}, err
	}
	if err := json.Unmarshal(sched, &s); err != nil {
		return Occurrence{}, &MalformedError{Problem: EnvelopeKey + " is not an object with a name and a scheduledTime: " + err.Error()}
	}
	if strings.TrimSpace(s.Name) == "" {
		return Occurrence{}, &MalformedError{Problem: "the schedule name is empty"}
	}
	at, err := time.Parse(time.RFC3339Nano, s.ScheduledTime)
	if err != nil {
		return Occurrence{}, &MalformedError{Problem: fmt.Sprintf("scheduledTime %q is not an RFC 3339 time", s.ScheduledTime)}
	}
	payload := env["payload"]
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	return Occurrence{Name: s.Name, ScheduledTime: at.UTC(), Payload: payload}, nil
}

// exactKeys returns a *MalformedError when obj has a key that is one of
// names but for its case: encoding/json would read it as that one.
func exactKeys(obj map[string]json.RawMessage, names ...string) error {
	for k := range obj {
		for _, n := range names {
			if k != n && strings.EqualFold(k, n) {
				return &MalformedError{Problem: fmt.Sprintf("key %q: want %q (keys are matched exactly)", k, n)}
			}
		}
	}
	return nil
}

// Key is the idempotency key of a message, for idempotency.Config.Key:
// an envelope's Occurrence.Key ("schedule:NAME@TIME"), the same for every
// copy of one occurrence; for any other message, idempotency.DefaultKey
// (its idempotency-key attribute, else its message ID), so that one queue
// may carry scheduled and other jobs.
//
// A malformed envelope (see Parse) gets DefaultKey too: a key function
// cannot report an error, and "" would make the middleware dead-letter the
// message for a missing key, hiding what is wrong. The handler's Parse
// returns the *MalformedError; return it as sqsworker.Permanent so that
// the message goes to the dead-letter queue with that reason.
func Key(m *sqsworker.Message) string {
	if o, err := Parse(m); err == nil {
		return o.Key()
	}
	return idempotency.DefaultKey(m)
}

var nameRe = regexp.MustCompile(`^[0-9a-zA-Z._-]{1,64}$`)

// Envelope returns the body a schedule named name sends for its occurrence
// at: the envelope with at in UTC RFC 3339 (to the second) and payload
// marshalled to JSON (nil gives null; a json.RawMessage is taken as is).
// name must be what the Schedule construct accepts: 1 to 64 letters,
// digits, '-', '_' and '.'.
func Envelope(name string, at time.Time, payload any) (string, error) {
	if !nameRe.MatchString(name) {
		return "", fmt.Errorf("schedule: Envelope: the name must be 1 to 64 letters, digits, '-', '_' and '.', got %q", name)
	}
	p, err := marshal(payload)
	if err != nil {
		return "", fmt.Errorf("schedule: Envelope: marshalling the payload: %w", err)
	}
	b, err := marshal(struct {
		Schedule meta            `json:"sqsworker.schedule"`
		Payload  json.RawMessage `json:"payload"`
	}{meta{Name: name, ScheduledTime: at.UTC().Format(time.RFC3339)}, p})
	return string(b), err
}

// marshal is v as JSON without HTML escaping, as the Schedule construct
// writes its template.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

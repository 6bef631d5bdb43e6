package dlq

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Filter selects dead-letter messages. Every condition set must hold; the
// zero Filter selects every message.
type Filter struct {
	// ErrorClasses selects messages whose failure metadata has one of
	// these error classes. A message SQS's own redrive moved (its
	// RedriveSource set) never matches: the metadata it carries, if any,
	// is of an earlier failure (a replayed copy keeps its original's), not
	// of the one that brought it here, which SQS does not say.
	ErrorClasses []string
	// Attributes selects messages whose message attributes have all of
	// these values (String and Number attributes; failure metadata
	// attributes such as sqsworker.error-class count too).
	Attributes []Attribute
	// Since and Until select messages that failed at or after Since and
	// before Until (the failed-at time of their failure metadata; never a
	// message SQS's redrive moved, as for ErrorClasses). The zero time is no
	// bound.
	Since, Until time.Time
	// BodyContains selects messages whose body contains this text.
	BodyContains string
	// JSONFields selects messages whose body is JSON with all of these
	// values.
	JSONFields []JSONField
	// IDs selects messages whose ID in the dead-letter queue is one of
	// these: messages chosen one by one (from a listing or a dry run).
	// Their original message ID does not count: it is failure metadata,
	// which another message may carry too (a copy, or a forgery).
	IDs []string
}

// Attribute is a message attribute's name and value.
type Attribute struct {
	// Name is the attribute's name, such as "tenant".
	Name string
	// Value is its String or Number value, as written.
	Value string
}

// JSONField is a value at a dot path of a JSON body: "order.customer.id",
// "items.0.sku" (array elements by index). Value is compared with the text
// of a string; numerically with a number ("20" matches 20.0); as written
// with true, false and null; as compact JSON with an object or array.
type JSONField struct {
	// Path is the dot path of the field.
	Path string
	// Value is the value it must have.
	Value string
}

// Validate reports every mistake of the filter at once: empty error
// classes, attributes without a name or with an empty value (SQS attributes
// are never empty, so it would match nothing), malformed JSON paths, Since
// not before Until.
func (f Filter) Validate() error {
	var errs []error
	for _, c := range f.ErrorClasses {
		if strings.TrimSpace(c) == "" {
			errs = append(errs, errors.New("empty error class"))
		}
	}
	for _, a := range f.Attributes {
		switch {
		case a.Name == "":
			errs = append(errs, fmt.Errorf("attribute %q=%q: no name", a.Name, a.Value))
		case a.Value == "":
			errs = append(errs, fmt.Errorf("attribute %q: SQS attributes are never empty, so an empty value matches nothing", a.Name))
		}
	}
	for _, id := range f.IDs {
		if strings.TrimSpace(id) == "" {
			errs = append(errs, errors.New("empty message ID"))
		}
	}
	for _, j := range f.JSONFields {
		if !ValidJSONPath(j.Path) {
			errs = append(errs, fmt.Errorf("JSON field %q: want a dot path like order.customer.id or items.0.sku", j.Path))
		}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		errs = append(errs, fmt.Errorf("since %s is not before until %s", f.Since.UTC().Format(time.RFC3339), f.Until.UTC().Format(time.RFC3339)))
	}
	if len(errs) > 0 {
		return fmt.Errorf("dlq: invalid filter: %w", errors.Join(errs...))
	}
	return nil
}

// ValidJSONPath reports whether path is a dot path: names or indexes
// separated by single dots.
func ValidJSONPath(path string) bool {
	return path != "" && !strings.Contains("."+path+".", "..")
}

// Match reports whether m passes every condition. Conditions on the failure
// metadata (error class, time) never match a message without it, nor one
// SQS's redrive moved, whose metadata is of an earlier failure.
func (f Filter) Match(m *Message) bool {
	failed := m.HasFailure && !m.Redriven()
	if len(f.IDs) > 0 && !slices.Contains(f.IDs, m.ID) {
		return false
	}
	if len(f.ErrorClasses) > 0 {
		ok := false
		for _, c := range f.ErrorClasses {
			if failed && m.Failure.ErrorClass == c {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, a := range f.Attributes {
		if v, ok := m.Attribute(a.Name); !ok || v != a.Value {
			return false
		}
	}
	if !f.Since.IsZero() || !f.Until.IsZero() {
		at := m.Failure.FailedAt
		if !failed || at.IsZero() || (!f.Since.IsZero() && at.Before(f.Since)) || (!f.Until.IsZero() && !at.Before(f.Until)) {
			return false
		}
	}
	if f.BodyContains != "" && !strings.Contains(m.Body, f.BodyContains) {
		return false
	}
	if len(f.JSONFields) > 0 {
		var doc any
		dec := json.NewDecoder(strings.NewReader(m.Body))
		dec.UseNumber()
		if dec.Decode(&doc) != nil {
			return false
		}
		for _, jf := range f.JSONFields {
			if !jsonFieldIs(doc, jf.Path, jf.Value) {
				return false
			}
		}
	}
	return true
}

// jsonFieldIs reports whether the value at a dot path of doc is want (see
// [JSONField]).
func jsonFieldIs(doc any, path, want string) bool {
	v := doc
	for _, part := range strings.Split(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[part]; !ok {
				return false
			}
		case []any:
			i, err := strconv.Atoi(part)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	switch x := v.(type) {
	case string:
		return x == want
	case json.Number:
		if x.String() == want {
			return true
		}
		a, err1 := x.Float64()
		b, err2 := strconv.ParseFloat(want, 64)
		return err1 == nil && err2 == nil && a == b
	case nil:
		return want == "null"
	case bool:
		return strconv.FormatBool(x) == want
	default:
		b, err := json.Marshal(x)
		return err == nil && string(b) == want
	}
}

// String describes the filter for people and for the audit log: "all
// messages" for the zero Filter.
func (f Filter) String() string {
	var parts []string
	if len(f.ErrorClasses) == 1 {
		parts = append(parts, fmt.Sprintf("error-class=%q", f.ErrorClasses[0]))
	} else if len(f.ErrorClasses) > 1 {
		q := make([]string, len(f.ErrorClasses))
		for i, c := range f.ErrorClasses {
			q[i] = strconv.Quote(c)
		}
		parts = append(parts, "error-class in ("+strings.Join(q, ", ")+")")
	}
	for _, a := range f.Attributes {
		parts = append(parts, fmt.Sprintf("attr %s=%q", a.Name, a.Value))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "failed at or after "+f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "failed before "+f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.BodyContains != "" {
		parts = append(parts, fmt.Sprintf("body contains %q", f.BodyContains))
	}
	for _, j := range f.JSONFields {
		parts = append(parts, fmt.Sprintf("json %s=%q", j.Path, j.Value))
	}
	switch n := len(f.IDs); {
	case n == 1:
		parts = append(parts, fmt.Sprintf("message %s", f.IDs[0]))
	case n > 1:
		parts = append(parts, fmt.Sprintf("%d chosen messages", n))
	}
	if len(parts) == 0 {
		return "all messages"
	}
	return strings.Join(parts, " and ")
}

// ParseTime reads a point in time as operators write it: RFC 3339
// ("2026-11-29T14:00:00Z"), or a duration before now ("2h ago", "90m",
// "7d ago").
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d := strings.TrimSpace(strings.TrimSuffix(s, "ago"))
	var dur time.Duration
	var err error
	if days, ok := strings.CutSuffix(d, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		dur = time.Duration(n) * 24 * time.Hour
	} else {
		dur, err = time.ParseDuration(d)
	}
	if err != nil || dur < 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2006-01-02T15:04:05Z07:00) nor a duration ago (2h ago, 90m, 7d ago)", s)
	}
	return now.Add(-dur), nil
}

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// replayFilter selects dead-letter messages. Every condition set must hold;
// a message matches one of several error classes.
type replayFilter struct {
	classes      []string
	attrs        []nameValue
	since, until time.Time // on failed-at; zero when not set
	bodyContains string
	jsonFields   []nameValue
}

type nameValue struct{ name, value string }

// filterFlags are the replay flags that make a replayFilter.
type filterFlags struct {
	classes      []string
	attrs        []string
	since, until string
	bodyContains string
	jsonFields   []string
}

// parse checks the flags and builds the filter, with relative times taken
// from now. Every mistake is named, in one usage error.
func (ff filterFlags) parse(now time.Time) (replayFilter, error) {
	var f replayFilter
	var errs []error
	for _, c := range ff.classes {
		if strings.TrimSpace(c) == "" {
			errs = append(errs, errors.New("--error-class: empty class"))
			continue
		}
		f.classes = append(f.classes, c)
	}
	for _, a := range ff.attrs {
		name, value, ok := strings.Cut(a, "=")
		switch {
		case !ok || name == "":
			errs = append(errs, fmt.Errorf("--attr %q: want name=value", a))
		case value == "":
			errs = append(errs, fmt.Errorf("--attr %q: SQS attributes are never empty, so an empty value matches nothing", a))
		default:
			f.attrs = append(f.attrs, nameValue{name, value})
		}
	}
	for _, j := range ff.jsonFields {
		path, value, ok := strings.Cut(j, "=")
		if !ok || path == "" || strings.Contains("."+path+".", "..") {
			errs = append(errs, fmt.Errorf("--json-field %q: want path=value, the path in dots like order.customer.id or items.0.sku", j))
			continue
		}
		f.jsonFields = append(f.jsonFields, nameValue{path, value})
	}
	var err error
	if ff.since != "" {
		if f.since, err = parseWhen(ff.since, now); err != nil {
			errs = append(errs, fmt.Errorf("--since: %w", err))
		}
	}
	if ff.until != "" {
		if f.until, err = parseWhen(ff.until, now); err != nil {
			errs = append(errs, fmt.Errorf("--until: %w", err))
		}
	}
	if !f.since.IsZero() && !f.until.IsZero() && !f.since.Before(f.until) {
		errs = append(errs, fmt.Errorf("--since %s is not before --until %s", fmtTime(f.since), fmtTime(f.until)))
	}
	f.bodyContains = ff.bodyContains
	if len(errs) > 0 {
		return replayFilter{}, usageError{errors.Join(errs...)}
	}
	return f, nil
}

// parseWhen reads a point in time: RFC 3339 ("2026-11-29T14:00:00Z"), or a
// duration before now ("2h ago", "90m", "7d ago").
func parseWhen(s string, now time.Time) (time.Time, error) {
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

// match reports whether m passes every condition.
func (f replayFilter) match(m *dlqMessage) bool {
	if len(f.classes) > 0 {
		ok := false
		for _, c := range f.classes {
			if m.hasMeta && m.failure.ErrorClass == c {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	for _, a := range f.attrs {
		if v, ok := m.msg.Attribute(a.name); !ok || v != a.value {
			return false
		}
	}
	if !f.since.IsZero() || !f.until.IsZero() {
		at := m.failure.FailedAt
		if !m.hasMeta || at.IsZero() || (!f.since.IsZero() && at.Before(f.since)) || (!f.until.IsZero() && !at.Before(f.until)) {
			return false
		}
	}
	if f.bodyContains != "" && !strings.Contains(m.msg.Body, f.bodyContains) {
		return false
	}
	if len(f.jsonFields) > 0 {
		var doc any
		dec := json.NewDecoder(strings.NewReader(m.msg.Body))
		dec.UseNumber()
		if dec.Decode(&doc) != nil {
			return false
		}
		for _, jf := range f.jsonFields {
			if !jsonFieldIs(doc, jf.name, jf.value) {
				return false
			}
		}
	}
	return true
}

// jsonFieldIs reports whether the value at a dot path of doc is want: the
// text of a string; a number equal to want's; true, false or null as
// written; an object or array as compact JSON.
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

// String describes the filter for people and for the audit log.
func (f replayFilter) String() string {
	var parts []string
	if len(f.classes) == 1 {
		parts = append(parts, fmt.Sprintf("error-class=%q", f.classes[0]))
	} else if len(f.classes) > 1 {
		q := make([]string, len(f.classes))
		for i, c := range f.classes {
			q[i] = strconv.Quote(c)
		}
		parts = append(parts, "error-class in ("+strings.Join(q, ", ")+")")
	}
	for _, a := range f.attrs {
		parts = append(parts, fmt.Sprintf("attr %s=%q", a.name, a.value))
	}
	if !f.since.IsZero() {
		parts = append(parts, "failed at or after "+f.since.UTC().Format(time.RFC3339Nano))
	}
	if !f.until.IsZero() {
		parts = append(parts, "failed before "+f.until.UTC().Format(time.RFC3339Nano))
	}
	if f.bodyContains != "" {
		parts = append(parts, fmt.Sprintf("body contains %q", f.bodyContains))
	}
	for _, j := range f.jsonFields {
		parts = append(parts, fmt.Sprintf("json %s=%q", j.name, j.value))
	}
	if len(parts) == 0 {
		return "all messages"
	}
	return strings.Join(parts, " and ")
}

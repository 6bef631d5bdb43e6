package main

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
)

func TestDlqParseWhen(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"2026-11-29T10:30:00Z":           time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC),
		"2026-11-29T10:30:00.5+01:00":    time.Date(2026, 11, 29, 9, 30, 0, 5e8, time.UTC),
		"2h ago":                         now.Add(-2 * time.Hour),
		"  90m ago ":                     now.Add(-90 * time.Minute),
		"1h30m":                          now.Add(-90 * time.Minute),
		"7d ago":                         now.Add(-7 * 24 * time.Hour),
		"0s ago":                         now,
		"2026-11-29T10:30:00.123456789Z": time.Date(2026, 11, 29, 10, 30, 0, 123456789, time.UTC),
	} {
		got, err := parseWhen(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("parseWhen(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-2h", "2 hours ago", "2026-11-29", "xd ago", "ago"} {
		if _, err := parseWhen(in, now); err == nil {
			t.Errorf("parseWhen(%q) accepted", in)
		}
	}
}

func TestDlqJSONField(t *testing.T) {
	var doc any
	dec := json.NewDecoder(strings.NewReader(`{"order":{"id":42,"total":12.50,"customer":"c-1","paid":true,"note":null,
		"items":[{"sku":"A"},{"sku":"B"}],"tags":["x","y"]}}`))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, value string
		want        bool
	}{
		{"order.id", "42", true},
		{"order.id", "42.0", true},
		{"order.id", "43", false},
		{"order.total", "12.5", true},
		{"order.customer", "c-1", true},
		{"order.customer", `"c-1"`, false},
		{"order.paid", "true", true},
		{"order.note", "null", true},
		{"order.items.1.sku", "B", true},
		{"order.items.2.sku", "B", false},
		{"order.items.x", "B", false},
		{"order.tags", `["x","y"]`, true},
		{"order.missing", "", false},
		{"order.id.deeper", "42", false},
	} {
		if got := jsonFieldIs(doc, tc.path, tc.value); got != tc.want {
			t.Errorf("%s=%s: %v, want %v", tc.path, tc.value, got, tc.want)
		}
	}
}

func TestDlqFilterMatchAndDescription(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f, err := filterFlags{
		classes: []string{"a", "b"}, attrs: []string{"tenant=acme"}, since: "3h ago", until: "2026-11-29T11:00:00Z",
		bodyContains: "order", jsonFields: []string{"order.id=7"},
	}.parse(now)
	if err != nil {
		t.Fatal(err)
	}
	want := `error-class in ("a", "b") and attr tenant="acme" and failed at or after 2026-11-29T09:00:00Z and failed before 2026-11-29T11:00:00Z and body contains "order" and json order.id="7"`
	if f.String() != want {
		t.Errorf("description\n got %s\nwant %s", f.String(), want)
	}
	msg := func(class string, failedAt time.Time, tenant, body string) *dlqMessage {
		attrs := map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: tenant}}
		attrs, _ = sqsworker.Failure{ErrorClass: class, FailedAt: failedAt, MessageID: "m", SourceQueue: "q"}.AddTo(attrs)
		sdk := map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
		}
		return newDLQMessage("q", types.Message{MessageId: aws.String("id"), Body: aws.String(body), MessageAttributes: sdk})
	}
	in := now.Add(-2 * time.Hour)
	body := `{"order":{"id":7}}`
	for _, tc := range []struct {
		m    *dlqMessage
		want bool
	}{
		{msg("a", in, "acme", body), true},
		{msg("b", in, "acme", body), true},
		{msg("c", in, "acme", body), false},
		{msg("a", in, "globex", body), false},
		{msg("a", now.Add(-4*time.Hour), "acme", body), false},
		{msg("a", now.Add(-time.Hour), "acme", body), false},               // at --until: excluded
		{msg("a", now.Add(-3*time.Hour), "acme", body), true},              // at --since: included
		{msg("a", in, "acme", `{"order":{"id":8}}`), false},                // json field
		{msg("a", in, "acme", `{"ordre":{"id":7}}`), false},                // body contains
		{msg("a", time.Time{}, "acme", body), false},                       // no failure time
		{newDLQMessage("q", types.Message{Body: aws.String(body)}), false}, // no metadata
	} {
		if got := f.match(tc.m); got != tc.want {
			t.Errorf("%+v: match %v, want %v", tc.m.failure, got, tc.want)
		}
	}
	if all, err := (filterFlags{}).parse(now); err != nil || all.String() != "all messages" ||
		!all.match(newDLQMessage("q", types.Message{Body: aws.String("x")})) {
		t.Errorf("empty filter: %v, %q", err, all.String())
	}
	_, err = filterFlags{attrs: []string{"x", "=y", "z="}, jsonFields: []string{"a.=1", "b"}, since: "soon", classes: []string{" "}}.parse(now)
	var ue usageError
	if !errors.As(err, &ue) {
		t.Fatalf("bad filters: %v is not a usage error", err)
	}
	for _, want := range []string{`--attr "x"`, `--attr "=y"`, `--attr "z="`, `--json-field "a.=1"`, `--json-field "b"`, `--since: "soon"`, "--error-class: empty class"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// The replay count: added, incremented, made room for by keeping the
// failure metadata as one attribute, or left out when there is no room.
func TestDlqCopyAttributes(t *testing.T) {
	mk := func(own int, replays string) *dlqMessage {
		attrs := map[string]sqsworker.MessageAttribute{}
		for i := range own {
			attrs[string(rune('a'+i))] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
		}
		if replays != "" {
			attrs[AttrReplays] = sqsworker.MessageAttribute{DataType: "Number", StringValue: replays}
		}
		attrs, _ = sqsworker.Failure{ErrorClass: "c", Error: "e", MessageID: "orig", SourceQueue: "q", FailedAt: time.Unix(1e9, 0)}.AddTo(attrs)
		sdk := map[string]types.MessageAttributeValue{}
		for k, v := range attrs {
			sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
		}
		return newDLQMessage("q", types.Message{MessageId: aws.String("dlq-id"), MessageAttributes: sdk})
	}
	for _, tc := range []struct {
		own      int
		replays  string
		want     int
		n        int
		compact  bool
		noteLike string
	}{
		{0, "", 1, 8 + 1, false, ""},
		{1, "", 1, 1 + 8 + 1, false, ""},
		{1, "1", 2, 1 + 1 + 8, false, ""}, // 10 with the count already there
		{2, "", 1, 2 + 1 + 1, true, "kept as the one attribute"},
		{8, "", 1, 8 + 1 + 1, true, ""}, // the runtime kept it as one attribute already
		{9, "", 0, 9 + 1, true, "not added"},
		{8, "4", 5, 8 + 1 + 1, true, ""},
	} {
		m := mk(tc.own, tc.replays)
		attrs, replays, note := copyAttributes(m)
		_, compact := attrs[sqsworker.AttrFailure]
		if replays != tc.want || len(attrs) != tc.n || compact != tc.compact || (tc.noteLike == "") != (note == "") || !strings.Contains(note, tc.noteLike) {
			t.Errorf("%d own attributes, replays %q: count %d, %d attributes (compact %v), note %q", tc.own, tc.replays, replays, len(attrs), compact, note)
		}
		if replays > 0 && aws.ToString(attrs[AttrReplays].StringValue) != strconv.Itoa(replays) {
			t.Errorf("count attribute %v", attrs[AttrReplays])
		}
		got := map[string]sqsworker.MessageAttribute{}
		for k, v := range attrs {
			got[k] = sqsworker.MessageAttribute{DataType: aws.ToString(v.DataType), StringValue: aws.ToString(v.StringValue)}
		}
		f, ok := sqsworker.ParseFailure(got)
		a, _ := json.Marshal(f)
		b, _ := json.Marshal(m.failure)
		if !ok || string(a) != string(b) {
			t.Errorf("%d own attributes: failure metadata %+v, want %+v", tc.own, f, m.failure)
		}
	}
}

package dlq

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
)

func TestParseTime(t *testing.T) {
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
		got, err := ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-2h", "2 hours ago", "2026-11-29", "xd ago", "ago"} {
		if _, err := ParseTime(in, now); err == nil {
			t.Errorf("ParseTime(%q) accepted", in)
		}
	}
}

func TestJSONField(t *testing.T) {
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

// testMessage is a dead-letter message with failure metadata, as ReceiveMessage
// returns it.
func testMessage(f sqsworker.Failure, body string, attrs map[string]sqsworker.MessageAttribute) *Message {
	attrs, _ = f.AddTo(attrs)
	sdk := map[string]types.MessageAttributeValue{}
	for k, v := range attrs {
		sdk[k] = types.MessageAttributeValue{DataType: aws.String(v.DataType), StringValue: aws.String(v.StringValue)}
	}
	return newMessage("q", types.Message{MessageId: aws.String("dlq-id"), Body: aws.String(body), MessageAttributes: sdk})
}

func TestFilterMatchAndDescription(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	f := Filter{
		ErrorClasses: []string{"a", "b"}, Attributes: []Attribute{{"tenant", "acme"}},
		Since: now.Add(-3 * time.Hour), Until: time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC),
		BodyContains: "order", JSONFields: []JSONField{{"order.id", "7"}},
	}
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	want := `error-class in ("a", "b") and attr tenant="acme" and failed at or after 2026-11-29T09:00:00Z and failed before 2026-11-29T11:00:00Z and body contains "order" and json order.id="7"`
	if f.String() != want {
		t.Errorf("description\n got %s\nwant %s", f.String(), want)
	}
	msg := func(class string, failedAt time.Time, tenant, body string) *Message {
		return testMessage(sqsworker.Failure{ErrorClass: class, FailedAt: failedAt, MessageID: "m", SourceQueue: "q"},
			body, map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: tenant}})
	}
	in := now.Add(-2 * time.Hour)
	body := `{"order":{"id":7}}`
	for _, tc := range []struct {
		m    *Message
		want bool
	}{
		{msg("a", in, "acme", body), true},
		{msg("b", in, "acme", body), true},
		{msg("c", in, "acme", body), false},
		{msg("a", in, "globex", body), false},
		{msg("a", now.Add(-4*time.Hour), "acme", body), false},
		{msg("a", now.Add(-time.Hour), "acme", body), false},                  // at Until: excluded
		{msg("a", now.Add(-3*time.Hour), "acme", body), true},                 // at Since: included
		{msg("a", in, "acme", `{"order":{"id":8}}`), false},                   // json field
		{msg("a", in, "acme", `{"ordre":{"id":7}}`), false},                   // body contains
		{msg("a", time.Time{}, "acme", body), false},                          // no failure time
		{redriven(msg("a", in, "acme", body)), false},                         // metadata of an earlier failure
		{newMessage("q", types.Message{Body: aws.String(body)}), false},       // no metadata
		{newMessage("q", types.Message{Body: aws.String("not json")}), false}, // no metadata
	} {
		if got := f.Match(tc.m); got != tc.want {
			t.Errorf("%+v: match %v, want %v", tc.m.Failure, got, tc.want)
		}
	}
	if f := (Filter{Attributes: []Attribute{{"tenant", "acme"}}}); !f.Match(redriven(msg("a", in, "acme", body))) {
		t.Error("a message SQS's redrive moved did not match a filter without failure conditions")
	}
	if all := (Filter{}); all.Validate() != nil || all.String() != "all messages" || !all.Match(newMessage("q", types.Message{Body: aws.String("x")})) {
		t.Errorf("zero filter: %v, %q", all.Validate(), all.String())
	}
	err := Filter{
		ErrorClasses: []string{" "}, Attributes: []Attribute{{"", "y"}, {"z", ""}},
		JSONFields: []JSONField{{"a.", "1"}, {"", "2"}}, Since: now, Until: now.Add(-time.Hour),
	}.Validate()
	for _, want := range []string{"empty error class", `attribute ""="y": no name`, `attribute "z": SQS attributes are never empty`, `JSON field "a."`, `JSON field ""`, "is not before until"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestFilterIDs(t *testing.T) {
	m := testMessage(sqsworker.Failure{ErrorClass: "a", MessageID: "orig-1", SourceQueue: "q"}, "x", nil) // ID "dlq-id"
	for _, tc := range []struct {
		ids  []string
		want bool
	}{
		{[]string{"dlq-id"}, true},
		{[]string{"other", "dlq-id"}, true},
		{[]string{"orig-1"}, false}, // the original ID is metadata anyone can send
		{[]string{"other"}, false},
		{nil, true},
	} {
		if got := (Filter{IDs: tc.ids}).Match(m); got != tc.want {
			t.Errorf("IDs %v: match %v, want %v", tc.ids, got, tc.want)
		}
	}
	if s := (Filter{IDs: []string{"a"}}).String(); s != "message a" {
		t.Errorf("one ID: %q", s)
	}
	if s := (Filter{ErrorClasses: []string{"c"}, IDs: []string{"a", "b"}}).String(); s != `error-class="c" and 2 chosen messages` {
		t.Errorf("two IDs: %q", s)
	}
	if err := (Filter{IDs: []string{" "}}).Validate(); err == nil || !strings.Contains(err.Error(), "empty message ID") {
		t.Errorf("empty ID: %v", err)
	}
}

// redriven is m as SQS's redrive would have moved it: its failure metadata
// that of an earlier failure (a replayed copy's, kept from its original).
func redriven(m *Message) *Message {
	m.RedriveSource = "arn:aws:sqs:us-east-1:000000000000:q"
	return m
}

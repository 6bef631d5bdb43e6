package sqsmsg

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
)

func TestFromSDK(t *testing.T) {
	in := &types.Message{
		MessageId: aws.String("id-1"), Body: aws.String("body"), ReceiptHandle: aws.String("rh"),
		Attributes: map[string]string{
			sqsworker.AttrReceiveCount:    "3",
			sqsworker.AttrSentTimestamp:   "1764374400000",
			sqsworker.AttrFirstReceived:   "1764374401500",
			sqsworker.AttrMessageGroupID:  "g",
			sqsworker.AttrDeduplicationID: "d",
			sqsworker.AttrSequenceNumber:  "18889",
			sqsworker.AttrSenderID:        "AIDAEXAMPLE",
		},
		MessageAttributes: map[string]types.MessageAttributeValue{
			"s": {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
			"b": {DataType: aws.String("Binary"), BinaryValue: []byte{0, 1}},
		},
	}
	m := FromSDK("https://q", in)
	if m.ID != "id-1" || m.Body != "body" || m.ReceiptHandle != "rh" || m.QueueURL != "https://q" {
		t.Errorf("FromSDK = %+v", m)
	}
	if m.ReceiveCount != 3 || !m.SentAt.Equal(time.UnixMilli(1764374400000)) || !m.FirstReceivedAt.Equal(time.UnixMilli(1764374401500)) ||
		m.GroupID != "g" || m.DeduplicationID != "d" {
		t.Errorf("typed fields: %+v", m)
	}
	if m.Attributes[sqsworker.AttrSequenceNumber] != "18889" || m.Attributes[sqsworker.AttrSenderID] != "AIDAEXAMPLE" {
		t.Errorf("system attributes not kept: %v", m.Attributes)
	}
	if a := m.MessageAttributes["s"]; a.DataType != "String.json" || a.StringValue != `{"a":1}` {
		t.Errorf("string attribute = %+v", a)
	}
	if a := m.MessageAttributes["b"]; a.DataType != "Binary" || !bytes.Equal(a.BinaryValue, []byte{0, 1}) {
		t.Errorf("binary attribute = %+v", a)
	}

	bare := FromSDK("u", &types.Message{MessageId: aws.String("x"), Attributes: map[string]string{sqsworker.AttrReceiveCount: "many"}})
	if bare.MessageAttributes != nil || bare.ReceiveCount != 0 || !bare.SentAt.IsZero() {
		t.Errorf("FromSDK of a bare message = %+v", bare)
	}
}

func TestToSDKAttributes(t *testing.T) {
	if ToSDKAttributes(nil) != nil {
		t.Error("ToSDKAttributes(nil) != nil")
	}
	out := ToSDKAttributes(map[string]sqsworker.MessageAttribute{
		"s": {DataType: "Number", StringValue: "42"},
		"b": {DataType: "Binary.gz", BinaryValue: []byte{7}, StringValue: "ignored"},
	})
	if s := out["s"]; aws.ToString(s.DataType) != "Number" || aws.ToString(s.StringValue) != "42" || s.BinaryValue != nil {
		t.Errorf("string attribute = %+v", s)
	}
	if b := out["b"]; aws.ToString(b.DataType) != "Binary.gz" || b.StringValue != nil || !bytes.Equal(b.BinaryValue, []byte{7}) {
		t.Errorf("binary attribute = %+v", b)
	}
	// What MessageSize counts is what is sent.
	m := map[string]sqsworker.MessageAttribute{"b": {DataType: "Binary", BinaryValue: []byte{1, 2}, StringValue: "xyz"}}
	if got := sqsworker.MessageSize("", m); got != len("b")+len("Binary")+2 {
		t.Errorf("MessageSize = %d", got)
	}
}

// TestCarry: a copy keeps its message's X-Ray header and group; a FIFO
// queue's copy of a message without a group gets DefaultGroup, a standard
// queue's none.
func TestCarry(t *testing.T) {
	const xray = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"
	for _, c := range []struct {
		group, trace string
		fifo         bool
		wantGroup    string // "": none
	}{
		{"orders-7", xray, true, "orders-7"},
		{"", "", true, DefaultGroup},
		{"tenant-a", "", false, "tenant-a"},
		{"", xray, false, ""},
	} {
		in := &sqs.SendMessageInput{}
		Carry(in, c.group, c.trace, c.fifo)
		if got := aws.ToString(in.MessageGroupId); got != c.wantGroup || (c.wantGroup == "") != (in.MessageGroupId == nil) {
			t.Errorf("Carry(%q, fifo=%v): group %v, want %q", c.group, c.fifo, in.MessageGroupId, c.wantGroup)
		}
		th := in.MessageSystemAttributes[string(types.MessageSystemAttributeNameForSendsAWSTraceHeader)]
		if aws.ToString(th.StringValue) != c.trace || (c.trace == "") != (in.MessageSystemAttributes == nil) {
			t.Errorf("Carry(trace %q): system attributes %v", c.trace, in.MessageSystemAttributes)
		}
		if in.MessageDeduplicationId != nil {
			t.Errorf("Carry set a deduplication ID")
		}
	}
}

// TestPackUnpacked: the attributes Pack packs come back from Unpacked as
// they were, binary and custom types included, beside those it kept; the
// packed attribute is gone from the handler's copy, and the message itself
// is left as received. A message without packed attributes, or with a
// value that does not parse, is returned as it is.
func TestPackUnpacked(t *testing.T) {
	attrs := map[string]sqsworker.MessageAttribute{
		"a":                     {DataType: "String", StringValue: `quote " and ünïcode`},
		"n":                     {DataType: "Number.int", StringValue: "42"},
		"b":                     {DataType: "Binary", BinaryValue: []byte{0, 1, 255}},
		sqsworker.AttrNotBefore: {DataType: "Number", StringValue: "1764374400000"},
	}
	keep := func(name string) bool { return name == sqsworker.AttrNotBefore }
	packed, ok := Pack(attrs, keep)
	if !ok || len(packed) != 2 || packed[sqsworker.AttrNotBefore].StringValue != attrs[sqsworker.AttrNotBefore].StringValue || len(attrs) != 4 {
		t.Fatalf("Pack = %v, %v; want the kept attribute and the packed one, attrs unchanged", packed, ok)
	}
	m := &sqsworker.Message{ID: "id-1", MessageAttributes: packed}
	got := Unpacked(m)
	if got == m || len(got.MessageAttributes) != len(attrs) || got.ID != "id-1" || len(m.MessageAttributes) != 2 {
		t.Fatalf("Unpacked: %+v; want a copy with the four attributes, m unchanged", got)
	}
	for k, v := range attrs {
		g := got.MessageAttributes[k]
		if g.DataType != v.DataType || g.StringValue != v.StringValue || !bytes.Equal(g.BinaryValue, v.BinaryValue) {
			t.Errorf("attribute %s = %+v, want %+v", k, g, v)
		}
	}
	if _, ok := Pack(map[string]sqsworker.MessageAttribute{"a": attrs["a"], sqsworker.AttrNotBefore: attrs[sqsworker.AttrNotBefore]}, keep); ok {
		t.Error("Pack packed a single attribute: it saves nothing")
	}
	plain := &sqsworker.Message{MessageAttributes: attrs}
	bad := &sqsworker.Message{MessageAttributes: map[string]sqsworker.MessageAttribute{sqsworker.AttrPackedAttributes: {DataType: "String", StringValue: "{not json"}}}
	if Unpacked(plain) != plain || Unpacked(bad) != bad || Unpacked(&sqsworker.Message{}) == nil {
		t.Error("Unpacked changed a message without packed attributes, or with a value that does not parse")
	}
	// An attribute beside the packed one wins over one of its name inside.
	clash := map[string]sqsworker.MessageAttribute{"a": {DataType: "String", StringValue: "beside"}}
	clash[sqsworker.AttrPackedAttributes] = packed[sqsworker.AttrPackedAttributes]
	if v := Unpacked(&sqsworker.Message{MessageAttributes: clash}).MessageAttributes["a"].StringValue; v != "beside" {
		t.Errorf("attribute a = %q, want the one beside the packed attribute", v)
	}
}

// TestPackMergesAndKeepsHTML: attributes already packed go into the new
// packed value (one level, never nested), an attribute beside them wins,
// and characters JSON would escape for HTML are kept as they are, so that
// packing costs no more room than it must.
func TestPackMergesAndKeepsHTML(t *testing.T) {
	keep := func(name string) bool { return name == "kept" }
	first, ok := Pack(map[string]sqsworker.MessageAttribute{
		"a": {DataType: "String", StringValue: "<b>&</b>"}, "b": {DataType: "String", StringValue: "old"},
	}, keep)
	if !ok || !strings.Contains(first[sqsworker.AttrPackedAttributes].StringValue, "<b>&</b>") {
		t.Fatalf("Pack = %v, %v; want HTML characters unescaped", first, ok)
	}
	attrs := map[string]sqsworker.MessageAttribute{
		sqsworker.AttrPackedAttributes: first[sqsworker.AttrPackedAttributes],
		"b":                            {DataType: "String", StringValue: "new"},
		"c":                            {DataType: "String", StringValue: "c"},
		"kept":                         {DataType: "String", StringValue: "k"},
	}
	again, ok := Pack(attrs, keep)
	if !ok || len(again) != 2 {
		t.Fatalf("Pack again = %v, %v; want the kept attribute and one packed", again, ok)
	}
	got := Unpacked(&sqsworker.Message{MessageAttributes: again}).MessageAttributes
	want := map[string]string{"a": "<b>&</b>", "b": "new", "c": "c", "kept": "k"}
	if len(got) != len(want) {
		t.Errorf("unpacked %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k].StringValue != v {
			t.Errorf("attribute %s = %q, want %q", k, got[k].StringValue, v)
		}
	}
}

// parseMillis reads timestamps as strconv.ParseInt does, whatever the
// string.
func FuzzParseMillis(f *testing.F) {
	for _, s := range []string{"1733234567890", "0", "", "-1", "+12", "1_000", "0x10", "9223372036854775807", "9223372036854775808", "12345678901234567890", " 1", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, gerr := parseMillis(s)
		want, werr := strconv.ParseInt(s, 10, 64)
		if got != want || (gerr == nil) != (werr == nil) {
			t.Errorf("parseMillis(%q) = %d, %v; ParseInt: %d, %v", s, got, gerr, want, werr)
		}
	})
}

// BenchmarkFillSystemFields: the attributes of a standard queue's message
// as the worker receives them, and of a FIFO queue's.
func BenchmarkFillSystemFields(b *testing.B) {
	standard := map[string]string{sqsworker.AttrReceiveCount: "1", sqsworker.AttrSentTimestamp: "1764374400000",
		sqsworker.AttrFirstReceived: "1764374401500", sqsworker.AttrSenderID: "AIDAEXAMPLE"}
	fifo := map[string]string{sqsworker.AttrReceiveCount: "1", sqsworker.AttrSentTimestamp: "1764374400000",
		sqsworker.AttrFirstReceived: "1764374401500", sqsworker.AttrSenderID: "AIDAEXAMPLE",
		sqsworker.AttrMessageGroupID: "g", sqsworker.AttrDeduplicationID: "d", sqsworker.AttrSequenceNumber: "18889"}
	for name, attrs := range map[string]map[string]string{"standard": standard, "fifo": fifo} {
		b.Run(name, func(b *testing.B) {
			m := sqsworker.Message{Attributes: attrs}
			for range b.N {
				FillSystemFields(&m)
			}
		})
	}
}

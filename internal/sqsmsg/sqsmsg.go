// Package sqsmsg converts between the SDK's SQS types and sqsworker's.
package sqsmsg

import (
	"bytes"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
)

// FromSDK builds a Message from a message returned by ReceiveMessage.
func FromSDK(queueURL string, in *types.Message) *sqsworker.Message {
	m := new(sqsworker.Message)
	Fill(m, queueURL, in)
	return m
}

// Fill sets every field of m from a message returned by ReceiveMessage, so
// that a runtime can build a received batch's messages in one array.
func Fill(m *sqsworker.Message, queueURL string, in *types.Message) {
	*m = sqsworker.Message{
		ID:            aws.ToString(in.MessageId),
		Body:          aws.ToString(in.Body),
		ReceiptHandle: aws.ToString(in.ReceiptHandle),
		Attributes:    in.Attributes,
		QueueURL:      queueURL,
	}
	if len(in.MessageAttributes) > 0 {
		m.MessageAttributes = make(map[string]sqsworker.MessageAttribute, len(in.MessageAttributes))
		for k, v := range in.MessageAttributes {
			m.MessageAttributes[k] = sqsworker.MessageAttribute{
				DataType:    aws.ToString(v.DataType),
				StringValue: aws.ToString(v.StringValue),
				BinaryValue: v.BinaryValue,
			}
		}
	}
	FillSystemFields(m)
}

// FillSystemFields sets the typed fields of m (ReceiveCount, SentAt,
// FirstReceivedAt, GroupID, DeduplicationID) from its system attributes.
// Malformed values leave the field at its zero value.
func FillSystemFields(m *sqsworker.Message) {
	a := m.Attributes
	m.ReceiveCount, _ = strconv.Atoi(a[sqsworker.AttrReceiveCount])
	m.SentAt = millis(a[sqsworker.AttrSentTimestamp])
	m.FirstReceivedAt = millis(a[sqsworker.AttrFirstReceived])
	m.GroupID = a[sqsworker.AttrMessageGroupID]
	m.DeduplicationID = a[sqsworker.AttrDeduplicationID]
}

func millis(s string) time.Time {
	ms, err := parseMillis(s)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// parseMillis parses a timestamp attribute. Where an int holds one, it is
// strconv.Atoi, whose path for short decimal strings takes a tenth of the
// instructions of ParseInt's, on every message received.
func parseMillis(s string) (int64, error) {
	if strconv.IntSize == 64 {
		n, err := strconv.Atoi(s)
		return int64(n), err
	}
	return strconv.ParseInt(s, 10, 64)
}

// ToSDKAttributes converts message attributes for SendMessage.
func ToSDKAttributes(in map[string]sqsworker.MessageAttribute) map[string]types.MessageAttributeValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(in))
	for k, v := range in {
		out[k] = ToSDKAttribute(v)
	}
	return out
}

// ToSDKAttribute converts one attribute to the SDK's type, as
// ToSDKAttributes does.
func ToSDKAttribute(v sqsworker.MessageAttribute) types.MessageAttributeValue {
	av := types.MessageAttributeValue{DataType: aws.String(v.DataType)}
	if strings.HasPrefix(v.DataType, "Binary") {
		av.BinaryValue = v.BinaryValue
	} else {
		av.StringValue = aws.String(v.StringValue)
	}
	return av
}

// DefaultGroup is the MessageGroupId of a copy sent to a FIFO queue when its
// message had no group: it came from a standard queue.
const DefaultGroup = "sqsworker"

// Carry sets on in what a copy of a message carries over besides its body
// and message attributes: its X-Ray trace header (traceHeader, its
// AWSTraceHeader system attribute; none when empty) and its group. A FIFO
// queue needs a group: the message's, or DefaultGroup. On a standard queue a
// message's group is its tenant in a fair queue: its copy keeps it, so that
// SQS goes on scheduling the copy among its tenant's messages rather than as
// a message of no tenant. A standard queue's message without a group gets
// none. The deduplication ID, which each kind of copy sets its own way, is
// left to the caller.
func Carry(in *sqs.SendMessageInput, group, traceHeader string, fifo bool) {
	if traceHeader != "" {
		in.MessageSystemAttributes = map[string]types.MessageSystemAttributeValue{
			string(types.MessageSystemAttributeNameForSendsAWSTraceHeader): {DataType: aws.String("String"), StringValue: aws.String(traceHeader)},
		}
	}
	switch {
	case group != "":
		in.MessageGroupId = aws.String(group)
	case fifo:
		in.MessageGroupId = aws.String(DefaultGroup)
	}
}

// packed is one attribute in sqsworker.AttrPackedAttributes.
type packed struct {
	DataType    string `json:"t"`
	StringValue string `json:"s,omitempty"`
	BinaryValue []byte `json:"b,omitempty"`
}

// Pack returns attrs with the attributes keep does not name packed into one,
// sqsworker.AttrPackedAttributes, beside those it names, and true; or attrs
// and false when fewer than two would go in it. Attributes attrs already
// holds packed go in it too (an attribute beside them wins, as Unpacked
// has it); attrs holding a packed value that does not parse are left as
// they are. attrs is not changed.
func Pack(attrs map[string]sqsworker.MessageAttribute, keep func(name string) bool) (map[string]sqsworker.MessageAttribute, bool) {
	in := make(map[string]packed, len(attrs))
	if a, ok := attrs[sqsworker.AttrPackedAttributes]; ok {
		if err := json.Unmarshal([]byte(a.StringValue), &in); err != nil {
			return attrs, false
		}
	}
	out := make(map[string]sqsworker.MessageAttribute, 4)
	for k, v := range attrs {
		switch {
		case k == sqsworker.AttrPackedAttributes:
		case keep(k):
			out[k] = v
		default:
			in[k] = packed{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
		}
	}
	if len(in) < 2 {
		return attrs, false
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // "<" as itself, not six bytes of escape
	if err := enc.Encode(in); err != nil {
		return attrs, false
	}
	out[sqsworker.AttrPackedAttributes] = sqsworker.MessageAttribute{DataType: "String", StringValue: strings.TrimSuffix(b.String(), "\n")}
	return out, true
}

// Unpacked returns m, or, when m carries sqsworker.AttrPackedAttributes
// (see Pack), a copy of m whose MessageAttributes hold the attributes
// packed in it instead, beside the others: what the handler sees. An
// attribute of the same name beside it wins; a value that does not parse
// is left as it is.
func Unpacked(m *sqsworker.Message) *sqsworker.Message {
	a, ok := m.MessageAttributes[sqsworker.AttrPackedAttributes]
	if !ok {
		return m
	}
	var in map[string]packed
	if err := json.Unmarshal([]byte(a.StringValue), &in); err != nil {
		return m
	}
	c := *m
	c.MessageAttributes = make(map[string]sqsworker.MessageAttribute, len(m.MessageAttributes)+len(in))
	for k, v := range in {
		c.MessageAttributes[k] = sqsworker.MessageAttribute{DataType: v.DataType, StringValue: v.StringValue, BinaryValue: v.BinaryValue}
	}
	maps.Copy(c.MessageAttributes, m.MessageAttributes)
	delete(c.MessageAttributes, sqsworker.AttrPackedAttributes)
	return &c
}

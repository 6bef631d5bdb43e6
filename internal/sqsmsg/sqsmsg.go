// Package sqsmsg converts between the SDK's SQS types and sqsworker's.
package sqsmsg

import (
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
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
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// ToSDKAttributes converts message attributes for SendMessage.
func ToSDKAttributes(in map[string]sqsworker.MessageAttribute) map[string]types.MessageAttributeValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]types.MessageAttributeValue, len(in))
	for k, v := range in {
		av := types.MessageAttributeValue{DataType: aws.String(v.DataType)}
		if strings.HasPrefix(v.DataType, "Binary") {
			av.BinaryValue = v.BinaryValue
		} else {
			av.StringValue = aws.String(v.StringValue)
		}
		out[k] = av
	}
	return out
}

package sqstest

import (
	"strings"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQSEvent builds the event Lambda's SQS event source mapping would deliver
// for messages received from the queue with the given ARN (received with all
// system and message attributes), so that tests can invoke a function with
// real receipt handles.
func SQSEvent(queueARN string, msgs []types.Message) events.SQSEvent {
	region := Region
	if p := strings.Split(queueARN, ":"); len(p) == 6 {
		region = p[3]
	}
	ev := events.SQSEvent{Records: make([]events.SQSMessage, len(msgs))}
	for i, m := range msgs {
		r := events.SQSMessage{
			MessageId:              aws.ToString(m.MessageId),
			ReceiptHandle:          aws.ToString(m.ReceiptHandle),
			Body:                   aws.ToString(m.Body),
			Md5OfBody:              aws.ToString(m.MD5OfBody),
			Md5OfMessageAttributes: aws.ToString(m.MD5OfMessageAttributes),
			Attributes:             m.Attributes,
			EventSourceARN:         queueARN,
			EventSource:            "aws:sqs",
			AWSRegion:              region,
		}
		if len(m.MessageAttributes) > 0 {
			r.MessageAttributes = make(map[string]events.SQSMessageAttribute, len(m.MessageAttributes))
			for k, v := range m.MessageAttributes {
				r.MessageAttributes[k] = events.SQSMessageAttribute{
					DataType: aws.ToString(v.DataType), StringValue: v.StringValue, BinaryValue: v.BinaryValue,
				}
			}
		}
		ev.Records[i] = r
	}
	return ev
}

package lambda

import (
	"fmt"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
)

// NewMessage builds a sqsworker.Message from an event record, with every field
// the worker runtime fills.
func NewMessage(r *events.SQSMessage, queueURL string) *sqsworker.Message {
	m := new(sqsworker.Message)
	fill(m, r, queueURL)
	return m
}

// fill sets every field of m from r, so that an invocation can keep its
// records' messages in one array (see record).
func fill(m *sqsworker.Message, r *events.SQSMessage, queueURL string) {
	*m = sqsworker.Message{
		ID:            r.MessageId,
		Body:          r.Body,
		ReceiptHandle: r.ReceiptHandle,
		Attributes:    r.Attributes,
		QueueURL:      queueURL,
	}
	if len(r.MessageAttributes) > 0 {
		m.MessageAttributes = make(map[string]sqsworker.MessageAttribute, len(r.MessageAttributes))
		for k, v := range r.MessageAttributes {
			a := sqsworker.MessageAttribute{DataType: v.DataType, BinaryValue: v.BinaryValue}
			if v.StringValue != nil {
				a.StringValue = *v.StringValue
			}
			m.MessageAttributes[k] = a
		}
	}
	sqsmsg.FillSystemFields(m)
}

// QueueURLFromARN returns the URL of the queue an SQS ARN names
// (arn:PARTITION:sqs:REGION:ACCOUNT:NAME), such as
// https://sqs.eu-west-1.amazonaws.com/123456789012/jobs.
func QueueURLFromARN(arn string) (string, error) {
	p := strings.Split(arn, ":")
	if len(p) != 6 || p[0] != "arn" || p[2] != "sqs" || p[3] == "" || p[4] == "" || p[5] == "" {
		return "", fmt.Errorf("lambda: %q is not an SQS queue ARN", arn)
	}
	domain := "amazonaws.com"
	if p[1] == "aws-cn" {
		domain = "amazonaws.com.cn"
	}
	return fmt.Sprintf("https://sqs.%s.%s/%s/%s", p[3], domain, p[4], p[5]), nil
}

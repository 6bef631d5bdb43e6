package dlq

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
)

// Two dead-letter messages are taken for copies of one job only when all
// but their failure text and time are equal: any other difference (an
// attribute's value, its type, string against binary, one attribute more,
// the source queue, the original ID, the body) makes them two jobs; so
// does a message SQS's redrive moved, whatever it carries.
func TestJobIdentityStrict(t *testing.T) {
	base := func() types.Message {
		attrs, _ := sqsworker.Failure{ErrorClass: "c", Error: "boom", SourceQueue: "https://q/orders", MessageID: "orig-1",
			FailedAt: time.Unix(100, 0)}.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "7"}})
		return types.Message{MessageId: aws.String("dlq-1"), Body: aws.String("job"), MessageAttributes: sdkAttributes(attrs),
			Attributes: map[string]string{}}
	}
	id := func(m types.Message) string {
		s, ok := jobIdentity(newMessage("https://q/orders-dlq", m))
		if !ok {
			return "none"
		}
		return s
	}
	first := id(base())
	bin := func(v string) func(*types.Message) {
		return func(m *types.Message) {
			m.MessageAttributes["sig"] = types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte(v)}
		}
	}
	a, b := base(), base()
	bin("\x01")(&a)
	bin("\x02")(&b)
	if id(a) == id(b) {
		t.Error("binary attributes of other bytes: taken for the same job")
	}
	same := base()
	attrs, _ := sqsworker.Failure{ErrorClass: "other", Error: "boom again", SourceQueue: "https://q/orders", MessageID: "orig-1",
		FailedAt: time.Unix(200, 0)}.AddTo(map[string]sqsworker.MessageAttribute{"tenant": {DataType: "String", StringValue: "7"}})
	same.MessageId, same.MessageAttributes = aws.String("dlq-2"), sdkAttributes(attrs)
	if id(same) != first {
		t.Error("a copy failing with another text and time is another job")
	}
	for name, change := range map[string]func(*types.Message){
		"attribute value": func(m *types.Message) {
			m.MessageAttributes["tenant"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("8")}
		},
		"attribute type": func(m *types.Message) {
			m.MessageAttributes["tenant"] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String("7")}
		},
		"binary attribute": func(m *types.Message) {
			m.MessageAttributes["tenant"] = types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: []byte("7")}
		},
		"one attribute more": func(m *types.Message) {
			m.MessageAttributes["region"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("eu")}
		},
		"attribute name": func(m *types.Message) {
			m.MessageAttributes["tenan"] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("t7")}
			delete(m.MessageAttributes, "tenant")
		},
		"source queue": func(m *types.Message) {
			m.MessageAttributes[sqsworker.AttrFailureSourceQueue] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("https://q/billing")}
		},
		"original ID": func(m *types.Message) {
			m.MessageAttributes[sqsworker.AttrFailureMessageID] = types.MessageAttributeValue{DataType: aws.String("String"), StringValue: aws.String("orig-2")}
		},
		"body": func(m *types.Message) { m.Body = aws.String("job ") },
		"moved by SQS": func(m *types.Message) {
			m.Attributes[sqsworker.AttrDeadLetterSource] = "arn:aws:sqs:us-east-1:1:orders"
		},
		"replayed before": func(m *types.Message) {
			m.MessageAttributes[AttrReplays] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String("1")}
		},
	} {
		m := base()
		change(&m)
		if got := id(m); got == first {
			t.Errorf("%s differs: taken for the same job", name)
		}
	}
}

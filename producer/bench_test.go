package producer_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
)

// stubSend answers every send at once: the benchmark measures the
// Producer's own work.
type stubSend struct{}

func (stubSend) SendMessage(context.Context, *sqs.SendMessageInput, ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return &sqs.SendMessageOutput{MessageId: aws.String("id")}, nil
}

func (stubSend) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id, MessageId: aws.String("id")})
	}
	return out, nil
}

// BenchmarkSendTraced is Send of a 64 KiB message with a trace context
// added by Config.Attributes, as sqsotel.Inject adds it.
func BenchmarkSendTraced(b *testing.B) {
	p, err := producer.New(stubSend{}, producer.Config{QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
		MaxMessageSize: producer.MaxMessageSize,
		Attributes: func(context.Context) map[string]sqsworker.MessageAttribute {
			return map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		}})
	if err != nil {
		b.Fatal(err)
	}
	m := producer.Message{Body: strings.Repeat("x", 64<<10)}
	b.SetBytes(int64(len(m.Body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Send(context.Background(), m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSendBatchKeys is SendBatch of ten small messages without keys of
// their own, with the keys the Producer generates and without them.
func BenchmarkSendBatchKeys(b *testing.B) {
	for _, c := range []struct {
		name    string
		disable bool
	}{{"generated", false}, {"disabled", true}} {
		b.Run(c.name, func(b *testing.B) {
			p, err := producer.New(stubSend{}, producer.Config{QueueURL: "https://sqs.eu-west-1.amazonaws.com/123456789012/jobs",
				MaxMessageSize: producer.MaxMessageSize, DisableGeneratedKeys: c.disable})
			if err != nil {
				b.Fatal(err)
			}
			msgs := make([]producer.Message, 10)
			for i := range msgs {
				msgs[i].Body = `{"order":42,"customer":"c-7"}`
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := p.SendBatch(context.Background(), msgs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

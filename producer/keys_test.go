package producer_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
)

// keysProducer returns a Producer of a queue of the fake, recording its
// calls; hook, if not nil, is its Config.Attributes.
func keysProducer(t *testing.T, fifo, disable bool, hook func(context.Context) map[string]sqsworker.MessageAttribute) (*producer.Producer, *attributesHookAPI) {
	t.Helper()
	return keysProducerLogged(t, fifo, disable, hook, nil)
}

func keysProducerLogged(t *testing.T, fifo, disable bool, hook func(context.Context) map[string]sqsworker.MessageAttribute, log *slog.Logger) (*producer.Producer, *attributesHookAPI) {
	t.Helper()
	api := &attributesHookAPI{Fake: sqstest.NewFake()}
	name, attrs := "jobs", map[string]string(nil)
	if fifo {
		name, attrs = "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	}
	p, err := producer.New(api, producer.Config{QueueURL: api.CreateQueue(name, attrs), MaxMessageSize: producer.MaxMessageSize,
		DisableGeneratedKeys: disable, Attributes: hook, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return p, api
}

func keyOf(attrs map[string]types.MessageAttributeValue) string {
	return aws.ToString(attrs[producer.IdempotencyKeyAttribute].StringValue)
}

func attrsN(n int) map[string]sqsworker.MessageAttribute {
	out := make(map[string]sqsworker.MessageAttribute, n)
	for i := range n {
		out[fmt.Sprint("a", i)] = sqsworker.MessageAttribute{DataType: "String", StringValue: "v"}
	}
	return out
}

// A message of a standard queue sent without a key gets one of its own,
// the same in every attempt of its call and in no other message; a key
// given, in IdempotencyKey or as the attribute, is kept.
func TestGeneratedKeys(t *testing.T) {
	t.Parallel()
	p, api := keysProducer(t, false, false, nil)
	msgs := make([]producer.Message, 12)
	for i := range msgs {
		msgs[i].Body = fmt.Sprint("m", i)
	}
	msgs[1].IdempotencyKey = "own"
	msgs[2].Attributes = map[string]sqsworker.MessageAttribute{producer.IdempotencyKeyAttribute: {DataType: "String", StringValue: "attr"}}
	if _, err := p.SendBatch(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Send(context.Background(), producer.Message{Body: "single"}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	check := func(body, key string) {
		t.Helper()
		switch body {
		case "m1":
			if key != "own" {
				t.Errorf("m1 sent with the key %q, want its own", key)
			}
			return
		case "m2":
			if key != "attr" {
				t.Errorf("m2 sent with the key %q, want its attribute's", key)
			}
			return
		}
		if !strings.HasPrefix(key, "auto:") || len(key) != len("auto:")+26 || seen[key] {
			t.Errorf("%s sent with the key %q, want auto: and 26 characters of its own", body, key)
		}
		seen[key] = true
	}
	for _, b := range api.batches {
		for _, e := range b.Entries {
			check(aws.ToString(e.MessageBody), keyOf(e.MessageAttributes))
		}
	}
	for _, s := range api.sends {
		check(aws.ToString(s.MessageBody), keyOf(s.MessageAttributes))
	}
	if len(seen) != 11 {
		t.Errorf("%d generated keys, want 11", len(seen))
	}
	if msgs[0].IdempotencyKey != "" {
		t.Errorf("the caller's message was changed: %+v", msgs[0])
	}
}

// No key is generated for a FIFO queue (its deduplication ID drops a call
// sent again), nor with DisableGeneratedKeys.
func TestNoGeneratedKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		fifo, disable bool
	}{{"fifo", true, false}, {"disabled", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p, api := keysProducer(t, c.fifo, c.disable, nil)
			m := producer.Message{Body: "x"}
			if c.fifo {
				m.GroupID = "g"
			}
			if _, err := p.Send(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			if _, err := p.SendBatch(context.Background(), []producer.Message{m}); err != nil {
				t.Fatal(err)
			}
			if len(api.sends[0].MessageAttributes) != 0 || len(api.batches[0].Entries[0].MessageAttributes) != 0 {
				t.Errorf("sent with attributes %v and %v, want none", api.sends[0].MessageAttributes, api.batches[0].Entries[0].MessageAttributes)
			}
		})
	}
}

// The key is added only where it takes nothing else's room: a message
// with ten attributes of its own, or nine with the context's, or eight
// (one is left for a dead-letter copy's failure metadata), or a body at
// the queue's size, is sent without it, not refused, and the context's
// attributes are kept.
func TestGeneratedKeyLeftOutWhenNoRoom(t *testing.T) {
	t.Parallel()
	trace := func(context.Context) map[string]sqsworker.MessageAttribute {
		return map[string]sqsworker.MessageAttribute{"traceparent": {DataType: "String", StringValue: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
	}
	var logs strings.Builder
	p, api := keysProducerLogged(t, false, false, trace, slog.New(slog.NewTextHandler(&logs, nil)))
	for _, c := range []struct {
		name          string
		m             producer.Message
		attrs         int
		keyed, traced bool
	}{
		{"ten attributes", producer.Message{Body: "ten", Attributes: attrsN(10)}, 10, false, false},
		{"nine and the trace", producer.Message{Body: "nine", Attributes: attrsN(9)}, 10, false, true},
		{"eight and the trace", producer.Message{Body: "eight", Attributes: attrsN(8)}, 9, false, true},
		{"seven and the trace", producer.Message{Body: "seven", Attributes: attrsN(7)}, 9, true, true},
		{"a body at the queue's size", producer.Message{Body: strings.Repeat("b", producer.MaxMessageSize-len("traceparent")-len("String")-55)}, 1, false, true},
	} {
		api.sends = nil
		if _, err := p.Send(context.Background(), c.m); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := api.sends[0].MessageAttributes
		_, traced := got["traceparent"]
		if len(got) != c.attrs || (keyOf(got) != "") != c.keyed || traced != c.traced {
			t.Errorf("%s: sent with %d attributes, key %q, traced %v; want %d, a generated key %v, traced %v", c.name, len(got), keyOf(got), traced, c.attrs, c.keyed, c.traced)
		}
	}
	// A message invalid on its own is refused with its own error, which
	// counts neither the key nor the trace.
	_, err := p.Send(context.Background(), producer.Message{Body: "eleven", Attributes: attrsN(sqsworker.MaxMessageAttributes + 1)})
	if err == nil || !strings.Contains(err.Error(), "11 ") {
		t.Errorf("eleven attributes: %v, want the refusal of its 11", err)
	}
	// What was left out is counted, each message, and warned of once
	// each: the trace of the first, the key of all but the seventh.
	if got, want := p.Stats(), (producer.Stats{ContextAttributesLeftOut: 1, GeneratedKeysLeftOut: 4}); got != want {
		t.Errorf("Stats %+v, want %+v", got, want)
	}
	if n := strings.Count(logs.String(), "without the attributes of Config.Attributes"); n != 1 {
		t.Errorf("%d warnings of the trace left out, want 1:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "without an idempotency key (generated"); n != 1 {
		t.Errorf("%d warnings of the key left out, want 1:\n%s", n, logs.String())
	}
}

// sendOnly is a client without GetQueueAttributes: the Producer cannot
// read the queue's MaximumMessageSize.
type sendOnly struct{ api *attributesHookAPI }

func (s sendOnly) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return s.api.SendMessage(ctx, in, opts...)
}

func (s sendOnly) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return s.api.SendMessageBatch(ctx, in, opts...)
}

// While the queue's MaximumMessageSize is not known, the key is added only
// to a message within 256 KiB with it, the limit of older queues: a
// message SQS took without the key is not refused for it.
func TestGeneratedKeyWithinOlderQueuesSizeWhenUnknown(t *testing.T) {
	t.Parallel()
	api := &attributesHookAPI{Fake: sqstest.NewFake()}
	p, err := producer.New(sendOnly{api}, producer.Config{QueueURL: api.CreateQueue("jobs", nil)})
	if err != nil {
		t.Fatal(err)
	}
	near := producer.Message{Body: strings.Repeat("n", 256<<10-20)}
	if _, err := p.SendBatch(context.Background(), []producer.Message{near, {Body: "small"}}); err != nil {
		t.Fatal(err)
	}
	for _, e := range api.batches[0].Entries {
		keyed := keyOf(e.MessageAttributes) != ""
		if small := aws.ToString(e.MessageBody) == "small"; keyed != small {
			t.Errorf("a body of %d bytes sent with a key %v, want %v", len(aws.ToString(e.MessageBody)), keyed, small)
		}
	}
}

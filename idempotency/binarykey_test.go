package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A producer that sends the idempotency-key attribute as Binary (the bytes
// of a UUID, say) has its duplicates recognised: two sends of one job, with
// two message IDs, run once. Before, DefaultKey read the attribute's string
// value alone, found it empty, and keyed each send by its message ID: both
// ran.
func TestBinaryKeyAttribute(t *testing.T) {
	t.Parallel()
	binary := func(id string, key []byte) *sqsworker.Message {
		return &sqsworker.Message{ID: id, Body: "payload", MessageAttributes: map[string]sqsworker.MessageAttribute{
			idempotency.KeyAttribute: {DataType: "Binary", BinaryValue: key},
		}}
	}
	a, b := binary("send-1", []byte{0x12, 0xff, 0x00}), binary("send-2", []byte{0x12, 0xff, 0x00})
	if ka, kb := idempotency.DefaultKey(a), idempotency.DefaultKey(b); ka != kb || ka == "message-id:send-1" {
		t.Errorf("keys %q and %q, want one key from the attribute", ka, kb)
	}
	if ka, kc := idempotency.DefaultKey(a), idempotency.DefaultKey(binary("send-3", []byte{0x12, 0xfe, 0x00})); ka == kc {
		t.Errorf("two binary keys, one key %q", ka)
	}
	g, _ := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	for _, m := range []*sqsworker.Message{a, b} {
		if err := h.HandleMessage(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 1 {
		t.Errorf("%d runs of one job sent twice with a binary key, want 1", runs.Load())
	}
}

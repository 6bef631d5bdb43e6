package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Keys that are not valid UTF-8 (the raw bytes of a digest, say, from
// Config.Key) are refused as Permanent, naming the fix, without a request:
// DynamoDB would store them altered, each invalid byte as U+FFFD, so that
// two different keys became one record and the second job was taken for a
// duplicate of the first, acknowledged without running. A KeyPrefix that
// is not valid UTF-8 is refused too.
func TestKeyNotUTF8Refused(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	db := localtest.NewCountingDynamoDB(t, &counter)
	store := newStore(t, db, idempotency.StoreConfig{})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet(), Key: func(m *sqsworker.Message) string {
		k, _ := m.Attribute("raw-key")
		return k
	}})
	var runs atomic.Int64
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil }))
	counter.Reset()
	for _, key := range []string{"digest-\xff\x01", "digest-\xfe\x01"} {
		m := msg("", "payload")
		m.MessageAttributes["raw-key"] = sqsworker.MessageAttribute{DataType: "String", StringValue: key}
		err := h.HandleMessage(context.Background(), m)
		var p *sqsworker.PermanentError
		if !errors.As(err, &p) || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("key %q: %v, want Permanent naming the problem", key, err)
		}
	}
	if runs.Load() != 0 || counter.Total() != 0 {
		t.Errorf("%d runs, %d requests, want none", runs.Load(), counter.Total())
	}
	_, err := idempotency.NewDynamoStore(context.Background(), db, idempotency.StoreConfig{Table: store.Config().Table, KeyPrefix: "tenant-\xff"})
	if err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
		t.Errorf("KeyPrefix not UTF-8: %v, want refused", err)
	}
}

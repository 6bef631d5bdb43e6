package batch_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/batch"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A chunk delayed (Delay or NotBefore, up to sqsworker.MaxDelay) past the
// batch's expiry (Config.TTL) would run once DynamoDB's TTL may have
// deleted its batch: it would fail for good as a chunk of an unknown batch,
// and the batch never complete. Create refuses such a spec, naming the
// chunk and the fix, before recording anything or sending any chunk; a
// chunk delayed within the TTL is accepted. On the fake SQS and on the
// local SQS.
func TestChunkDelayedPastTTL(t *testing.T) {
	t.Parallel()
	for _, emulator := range []bool{false, true} {
		name := "fake"
		if emulator {
			name = "emulator"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ttl := 2 * time.Hour
			var (
				e     *fakeEnv
				depth func() int // the chunks on the queue
			)
			if emulator {
				em := newEmulatorEnv(t, 0)
				c, err := batch.New(context.Background(), em.db, em.sqs, batch.Config{Table: em.table, TTL: ttl, Logger: quiet()})
				if err != nil {
					t.Fatal(err)
				}
				e, em.coord = &em.fakeEnv, c
				depth = func() int { v, f, d := localtest.Depth(t, em.sqs, em.work); return v + f + d }
			} else {
				e = newFakeEnv(t, batch.Config{TTL: ttl})
				depth = func() int { v, f, d := e.sqs.Depth(e.work); return v + f + d }
			}
			ctx := context.Background()
			for _, tc := range []struct {
				id  string
				set func(m *producer.Message)
			}{
				{"delay", func(m *producer.Message) { m.Delay = 3 * time.Hour }},
				{"not-before", func(m *producer.Message) { m.NotBefore = time.Now().Add(2*time.Hour + time.Minute) }},
			} {
				s := e.spec(tc.id, 3)
				tc.set(&s.Chunks[2])
				err := e.coord.Create(ctx, s)
				if err == nil || !strings.Contains(err.Error(), "chunk 2") || !strings.Contains(err.Error(), "TTL") {
					t.Errorf("%s: Create of a chunk delayed past the batch's TTL: %v, want an error naming the chunk and the TTL", tc.id, err)
				}
				var unknown *batch.UnknownBatchError
				if _, err := e.coord.Get(ctx, tc.id); !errors.As(err, &unknown) {
					t.Errorf("%s: the refused batch was recorded: %v", tc.id, err)
				}
			}
			if n := depth(); n != 0 {
				t.Errorf("%d chunks sent", n)
			}
			s := e.spec("within", 2)
			s.Chunks[1].Delay = time.Hour
			if err := e.coord.Create(ctx, s); err != nil {
				t.Errorf("Create of a chunk delayed within the TTL: %v", err)
			}
		})
	}
}

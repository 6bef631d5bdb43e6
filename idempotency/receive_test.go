package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
)

// The claim of a FIFO queue's message is taken over by a later receive of
// the same message, and by nothing else: not by the same receive, an
// earlier one, another message with the key (a producer's duplicate), or a
// claim made without a Receive (a standard queue's message); nor is a
// completed record. The holder taken over can no longer extend or
// complete its claim.
func TestClaimTakenOverByALaterReceive(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := b.direct
		until := time.Now().Add(time.Hour)
		first, existing, err := s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 2})
		if err != nil || existing != nil {
			t.Fatalf("first claim: %v, %+v", err, existing)
		}
		for _, by := range []idempotency.Receive{
			{MessageID: "m1", Count: 2}, // the same receive
			{MessageID: "m1", Count: 1}, // an earlier one
			{MessageID: "m2", Count: 9}, // another message with the key
			{},                          // a standard queue's message
		} {
			_, existing, err := s.Claim(ctx, "k", "h", until, by)
			if err != nil || existing == nil || existing.Token != first {
				t.Fatalf("claim by %+v: %v, %+v; want the first claim's record", by, err, existing)
			}
			if want := (idempotency.Receive{MessageID: "m1", Count: 2}); existing.Holder != want {
				t.Errorf("claim by %+v: the record's holder is %+v, want %+v", by, existing.Holder, want)
			}
		}
		second, existing, err := s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 3})
		if err != nil || existing != nil || second == "" || second == first {
			t.Fatalf("claim by the next receive: %q, %v, %+v; want it taken over", second, err, existing)
		}
		if err := s.ExtendLease(ctx, "k", first, until.Add(time.Hour)); !errors.Is(err, idempotency.ErrNotHolder) {
			t.Errorf("the first holder's extension: %v, want ErrNotHolder", err)
		}
		if err := s.Complete(ctx, "k", first, nil); !errors.Is(err, idempotency.ErrNotHolder) {
			t.Errorf("the first holder's completion: %v, want ErrNotHolder", err)
		}
		if err := s.Complete(ctx, "k", second, nil); err != nil {
			t.Fatalf("the second holder's completion: %v", err)
		}
		_, existing, err = s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 4})
		if err != nil || existing == nil || existing.Status != idempotency.StatusCompleted {
			t.Errorf("claim of a completed key by a later receive: %v, %+v; want the completed record", err, existing)
		}
	})
}

// fifoMsg is msg received on a FIFO queue, in group "g", for the n-th time.
func fifoMsg(key string, n int) *sqsworker.Message {
	m := msg(key, "payload")
	m.GroupID, m.ReceiveCount = "g", n
	return m
}

// Through the middleware: a FIFO queue's message received again after
// its holder died runs at once; on a standard queue it waits for the dead
// holder's lease, as SQS may deliver a standard queue's message again
// while its first receive is still in flight.
func TestGuardNextReceiveTakesOverTheDeadHolder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, _ := idempotency.New(b.store, idempotency.Config{Logger: quiet()})
		ctx := context.Background()
		until := time.Now().Add(time.Hour) // a lease and grace far from their end
		runs := 0
		work := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			runs++
			return idempotency.AddWrites(ctx, effectWrite(b.effects, "dead"))
		}))

		standard := msg("dead", "payload")
		standard.ReceiveCount = 1
		if _, _, err := b.direct.Claim(ctx, "dead", idempotency.BodyHash(standard), until, idempotency.Receive{}); err != nil {
			t.Fatal(err)
		}
		standard.ReceiveCount = 2
		if err := work.HandleMessage(ctx, standard); !sqsworker.IsPostponed(err) || runs != 0 {
			t.Fatalf("standard queue, next receive: %v, %d runs; want postponed, no run", err, runs)
		}

		m := fifoMsg("dead", 1)
		if err := b.direct.Release(ctx, "dead", b.holder("dead")); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.direct.Claim(ctx, "dead", idempotency.BodyHash(m), until, idempotency.Receive{MessageID: m.ID, Count: 1}); err != nil {
			t.Fatal(err)
		}
		if err := work.HandleMessage(ctx, fifoMsg("dead", 2)); err != nil || runs != 1 {
			t.Fatalf("FIFO queue, next receive: %v, %d runs; want one run", err, runs)
		}
		if n := b.applied("dead"); n != 1 {
			t.Errorf("effect applied %d times, want 1", n)
		}
		if err := work.HandleMessage(ctx, fifoMsg("dead", 3)); err != nil || runs != 1 {
			t.Errorf("FIFO queue, the receive after the job completed: %v, %d runs; want acknowledged as a duplicate", err, runs)
		}
	})
}

// A holder that did not die (it lost the message's lease and its handler
// ignores its context) and is taken over by the message's next receive:
// its writes are refused (ErrNotHolder), and the effect is applied once,
// by the new holder.
func TestTakenOverHolderThatGoesOnAppliesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		old, next := guards(b)
		release := make(chan struct{})
		oldDone := make(chan error, 1)
		claimed := make(chan struct{})
		go func() {
			oldDone <- old.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
				close(claimed)
				<-release // ignoring its context
				return idempotency.AddWrites(context.WithoutCancel(ctx), effectWrite(b.effects, "alive"))
			})).HandleMessage(context.Background(), fifoMsg("alive", 1))
		}()
		<-claimed
		err := next.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			return idempotency.AddWrites(ctx, effectWrite(b.effects, "alive"))
		})).HandleMessage(context.Background(), fifoMsg("alive", 2))
		if err != nil {
			t.Fatalf("the next receive: %v", err)
		}
		close(release)
		if err := <-oldDone; !errors.Is(err, idempotency.ErrNotHolder) {
			t.Errorf("the old holder: %v, want ErrNotHolder", err)
		}
		if n := b.applied("alive"); n != 1 {
			t.Errorf("effect applied %d times, want 1", n)
		}
	})
}

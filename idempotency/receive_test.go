package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
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
		later := until.Add(time.Hour) // a LapsedBy that the first claim's lease ends before
		first, existing, err := s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 2, LapsedBy: later})
		if err != nil || existing != nil {
			t.Fatalf("first claim: %v, %+v", err, existing)
		}
		for _, by := range []idempotency.Receive{
			{MessageID: "m1", Count: 2, LapsedBy: later}, // the same receive
			{MessageID: "m1", Count: 1, LapsedBy: later}, // an earlier one
			{MessageID: "m2", Count: 9, LapsedBy: later}, // another message with the key
			{MessageID: "m1", Count: 3, LapsedBy: until}, // the next, too soon
			{}, // a standard queue's message
		} {
			_, existing, err := s.Claim(ctx, "k", "h", until, by)
			if err != nil || existing == nil || existing.Token != first {
				t.Fatalf("claim by %+v: %v, %+v; want the first claim's record", by, err, existing)
			}
			if want := (idempotency.Receive{MessageID: "m1", Count: 2}); existing.Holder != want {
				t.Errorf("claim by %+v: the record's holder is %+v, want %+v", by, existing.Holder, want)
			}
		}
		second, existing, err := s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 3, LapsedBy: later})
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
		_, existing, err = s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 4, LapsedBy: later})
		if err != nil || existing == nil || existing.Status != idempotency.StatusCompleted || existing.Holder != (idempotency.Receive{}) {
			t.Errorf("claim of a completed key by a later receive: %v, %+v; want the completed record", err, existing)
		}
	})
}

// A claim is taken over by the Grace its holder recorded, not the taker's:
// workers of one queue configured otherwise (a deployment under way, a
// ClaimGrace or a visibility timeout changed) neither cut short the wait
// that lets a holder still running be cancelled, nor wait longer than it
// and spend a receive. The holder's deadline is 10s past; its lease ends
// 30s after it (ClaimGrace). A holder that recorded a Grace of 5s (LossLag
// 25s) is not taken over by a receive whose own Grace, 25s, would; one that
// recorded 25s (LossLag 5s) is, by a receive whose own Grace, 5s, would
// not. Alike, they take over or not as before. The new claim records the
// taker's own Grace.
func TestTakeOverByTheHoldersGrace(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		s := b.direct
		now := time.Now()
		deadline := now.Add(-10 * time.Second)
		for i, c := range []struct {
			holders, takers time.Duration
			taken           bool
		}{
			{holders: 5 * time.Second, takers: 25 * time.Second, taken: false},
			{holders: 25 * time.Second, takers: 5 * time.Second, taken: true},
			{holders: 25 * time.Second, takers: 25 * time.Second, taken: true},
			{holders: 5 * time.Second, takers: 5 * time.Second, taken: false},
		} {
			key := fmt.Sprint("grace-", i)
			first, _, err := s.Claim(ctx, key, "h", deadline.Add(30*time.Second), idempotency.Receive{MessageID: "m1", Count: 1, Grace: c.holders, LapsedBy: now})
			if err != nil || first == "" {
				t.Fatalf("%s: the holder's claim: %q, %v", key, first, err)
			}
			by := idempotency.Receive{MessageID: "m1", Count: 2, Grace: c.takers, LapsedBy: now.Add(-time.Second)}
			token, existing, err := s.Claim(ctx, key, "h", now.Add(time.Hour), by)
			if err != nil {
				t.Fatalf("%s: the next receive's claim: %v", key, err)
			}
			if taken := existing == nil; taken != c.taken {
				t.Errorf("holder's Grace %s, taker's %s: taken over %v, want %v", c.holders, c.takers, taken, c.taken)
			}
			_, held, err := s.Claim(ctx, key, "h", now, idempotency.Receive{})
			if err != nil || held == nil {
				t.Fatalf("%s: reading the record: %v, %+v", key, err, held)
			}
			want := idempotency.Receive{MessageID: "m1", Count: 1, Grace: c.holders}
			if c.taken {
				want = idempotency.Receive{MessageID: "m1", Count: 2, Grace: c.takers}
				if held.Token != token {
					t.Errorf("%s: the record's token is not the taker's", key)
				}
			}
			if held.Holder != want {
				t.Errorf("%s: the record's holder is %+v, want %+v", key, held.Holder, want)
			}
		}
	})
}

// A holder whose heartbeat lags more than the next receive's (its LossLag
// 5s, the next receive's 1s: an Interval of 0.5s) is waited for in the
// handler all the same, when SQS has just delivered the message again, and
// the job runs once: not postponed for the next receive's own LossLag, which
// would spend a receive.
func TestGuardWaitsForAHolderThatLagsMore(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, _ := idempotency.New(b.store, idempotency.Config{Logger: quiet()})
		runs := 0
		work := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			runs++
			return idempotency.AddWrites(ctx, effectWrite(b.effects, "lags"))
		}))
		m := fifoMsg("lags", 2)
		first := *m
		first.ReceiveCount = 1
		// The holder's deadline has just passed; its lease ends with the
		// grace (30s), of which it recorded 25s.
		by := idempotency.Receive{MessageID: m.ID, Count: 1, Grace: 25 * time.Second}
		if _, _, err := b.direct.Claim(context.Background(), "lags", idempotency.BodyHash(&first), time.Now().Add(30*time.Second), by); err != nil {
			t.Fatal(err)
		}
		ext, err := visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: m.QueueURL, VisibilityTimeout: time.Hour, Interval: 500 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, lease := ext.Track(context.Background(), m, time.Now())
		defer lease.Release()
		start := time.Now()
		if err := work.HandleMessage(ctx, m); err != nil || runs != 1 {
			t.Fatalf("next receive: %v, %d runs; want it to wait for the holder's LossLag, then run once", err, runs)
		}
		if took := time.Since(start); took < 5*time.Second {
			t.Errorf("ran after %s, before the holder's LossLag (5s) and a second had passed", took)
		}
		if n := b.applied("lags"); n != 1 {
			t.Errorf("effect applied %d times, want 1", n)
		}
	})
}

// fifoMsg is msg received on a FIFO queue, in group "g", for the n-th time.
func fifoMsg(key string, n int) *sqsworker.Message {
	m := msg(key, "payload")
	m.QueueURL, m.GroupID, m.ReceiveCount = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo", "g", n
	return m
}

// held returns a context holding m's lease, as the worker's heartbeat gives
// its handler: a visibility timeout of an hour, so that no extension is due
// while a test runs (its heartbeat checks every 10s, LossLag 20s).
func held(t *testing.T, m *sqsworker.Message) context.Context {
	t.Helper()
	ext, err := visibility.New(sqstest.NewFake(), visibility.Config{QueueURL: m.QueueURL, VisibilityTimeout: time.Hour, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, lease := ext.Track(context.Background(), m, time.Now())
	t.Cleanup(lease.Release)
	return ctx
}

// Through the middleware, held by the heartbeat: a FIFO queue's message
// received again after its holder died runs once the holder's visibility
// deadline lies the heartbeat's LossLag and a second in the past (here,
// 21s), not at the end of its claim's lease, ClaimGrace (30s) included: it
// waits for that in its handler, when it is due within the longer of
// LossLag and ClaimGrace, and two seconds, and is postponed until then
// otherwise. On a standard queue (a fair queue's message, with its group,
// included), or without the heartbeat, it waits for the
// whole lease, as SQS may deliver a standard queue's message again while
// its first receive is still in flight. The holder's Grace rules, which its
// claim records: a next receive of another ClaimGrace (a minute) waits as
// long.
func TestGuardNextReceiveTakesOverTheDeadHolder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		// The holder's configuration, which its claim records, rules
		// the takeover, whatever the next receive's ClaimGrace.
		for _, claimGrace := range []time.Duration{0, time.Minute} {
			key := fmt.Sprint("dead-", claimGrace)
			g, _ := idempotency.New(b.store, idempotency.Config{Logger: quiet(), ClaimGrace: claimGrace})
			ctx := context.Background()
			runs := 0
			work := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
				runs++
				return idempotency.AddWrites(ctx, effectWrite(b.effects, key))
			}))
			// dead leaves the claim of m's first receive, whose lease (its
			// visibility deadline and the grace) ends in leaseLeft.
			dead := func(m *sqsworker.Message, leaseLeft time.Duration) {
				t.Helper()
				if tok := b.holder(key); tok != "" {
					if err := b.direct.Release(ctx, key, tok); err != nil {
						t.Fatal(err)
					}
				}
				first := *m
				first.ReceiveCount = 1
				// Recorded as a FIFO receive's claim whatever the queue,
				// so that only the next receive's own queue decides, with
				// the Grace a Guard of the default ClaimGrace (30s) and
				// this heartbeat (LossLag 20s) records.
				by := idempotency.Receive{MessageID: m.ID, Count: 1, Grace: 10 * time.Second}
				if _, _, err := b.direct.Claim(ctx, key, idempotency.BodyHash(&first), time.Now().Add(leaseLeft), by); err != nil {
					t.Fatal(err)
				}
			}
			postponed := func(what string, ctx context.Context, m *sqsworker.Message) time.Duration {
				t.Helper()
				err := work.HandleMessage(ctx, m)
				ra, ok := errors.AsType[*sqsworker.RetryAfterError](err)
				if !sqsworker.IsPostponed(err) || !ok || runs != 0 {
					t.Fatalf("%s: %v, %d runs; want postponed, no run", what, err, runs)
				}
				return ra.Delay
			}

			standard := fifoMsg(key, 2)
			standard.QueueURL = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs" // a fair queue: a group, no .fifo
			dead(standard, time.Minute)
			postponed("standard queue, next receive", held(t, standard), standard)

			m := fifoMsg(key, 2)
			dead(m, time.Minute)
			postponed("FIFO queue without the heartbeat, next receive", ctx, m)
			// Its deadline a minute ahead, as its record says: the
			// takeover is further off than this Guard waits in a handler
			// (its LossLag or ClaimGrace, and two seconds).
			dead(m, 90*time.Second)
			if d := postponed("FIFO queue, next receive long before the takeover", held(t, m), m); d > 85*time.Second || d < 75*time.Second {
				t.Errorf("postponed %s, want until the holder's deadline is 21s past (81s), not the lease's end (90s) nor sooner", d)
			}
			dead(m, 10*time.Second) // its deadline 20s ago: the takeover a second away
			if err := work.HandleMessage(held(t, m), m); err != nil || runs != 1 {
				t.Fatalf("FIFO queue, next receive a second before the takeover: %v, %d runs; want it to wait, then run once", err, runs)
			}
			if n := b.applied(key); n != 1 {
				t.Errorf("effect applied %d times, want 1", n)
			}
			m = fifoMsg(key, 3)
			if err := work.HandleMessage(held(t, m), m); err != nil || runs != 1 {
				t.Errorf("FIFO queue, the receive after the job completed: %v, %d runs; want acknowledged as a duplicate", err, runs)
			}
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
		letGo := sync.OnceFunc(func() { close(release) })
		t.Cleanup(letGo)
		oldDone := make(chan error, 1)
		claimed := make(chan struct{})
		first := fifoMsg("alive", 1)
		firstCtx := held(t, first)
		go func() {
			oldDone <- old.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
				close(claimed)
				<-release // ignoring its context
				return idempotency.AddWrites(context.WithoutCancel(ctx), effectWrite(b.effects, "alive"))
			})).HandleMessage(firstCtx, first)
		}()
		select {
		case <-claimed:
		case err := <-oldDone:
			t.Fatalf("the first receive: %v, want its handler run", err)
		}
		// Its visibility deadline 25s past, its lease (with the grace)
		// not yet ended, as the store knows it.
		b.setLease("alive", time.Now().Add(5*time.Second))
		second := fifoMsg("alive", 2)
		err := next.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			return idempotency.AddWrites(ctx, effectWrite(b.effects, "alive"))
		})).HandleMessage(held(t, second), second)
		if err != nil {
			t.Fatalf("the next receive: %v", err)
		}
		letGo()
		if err := <-oldDone; !errors.Is(err, idempotency.ErrNotHolder) {
			t.Errorf("the old holder: %v, want ErrNotHolder", err)
		}
		if n := b.applied("alive"); n != 1 {
			t.Errorf("effect applied %d times, want 1", n)
		}
	})
}

// A claim recorded without a Receive (a standard queue's message, a claim
// without the heartbeat, or a record written before the holder was
// recorded) is taken over by no receive before its lease ends.
func TestClaimWithoutReceiveNotTakenOver(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		until := time.Now().Add(time.Hour)
		first, _, err := b.direct.Claim(ctx, "plain", "h", until, idempotency.Receive{})
		if err != nil {
			t.Fatal(err)
		}
		_, existing, err := b.direct.Claim(ctx, "plain", "h", until, idempotency.Receive{MessageID: "id-plain", Count: 5, LapsedBy: until.Add(time.Hour)})
		if err != nil || existing == nil || existing.Token != first || existing.Holder != (idempotency.Receive{}) {
			t.Errorf("claim by a receive: %v, %+v; want the first claim's record, without a holder", err, existing)
		}
	})
}

// The holder is recorded under the attribute names StoreConfig gives.
func TestTakeOverWithAttributeNamesOfItsOwn(t *testing.T) {
	localtest.RequireDynamoDB(t)
	t.Parallel()
	db := localtest.NewDynamoDB(t)
	s := newStore(t, db, idempotency.StoreConfig{HolderAttr: "by_message", ReceivesAttr: "by_receive"})
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	first, _, err := s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 1, LapsedBy: until.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	item := itemOf(t, db, s.Config().Table, "k")
	if item["by_message"] != "m1" || item["by_receive"] != "1" {
		t.Errorf("item %v, want the holder under by_message and by_receive", item)
	}
	second, existing, err := s.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 2, LapsedBy: until.Add(time.Hour)})
	if err != nil || existing != nil || second == first {
		t.Errorf("claim by the next receive: %v, %+v; want it taken over", err, existing)
	}
}

// A claim its message's next receive may take over (a FIFO queue's, with the
// heartbeat) is given up when its extensions fail for the heartbeat's
// LossLag past the visibility deadline it recorded (here 3s, then 1s), not
// at the end of ClaimGrace (30s): the next receive takes it over then, and
// the handler must have stopped by then. The heartbeat itself still holds
// the message (SQS answers; DynamoDB refuses the claim's extensions).
func TestTakeableClaimGivenUpAtLossLag(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, _ := idempotency.New(b.store, idempotency.Config{Logger: quiet()})
		ctx, m := leasedOn(t, "leased.fifo", "lapse", "payload", visibility.Config{VisibilityTimeout: 3 * time.Second})
		b.fail(idempotency.OpExtendLease, false)
		defer b.heal()
		start := time.Now()
		var cause error
		var took time.Duration
		err := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, _ *sqsworker.Message) error {
			select {
			case <-ctx.Done():
				cause, took = context.Cause(ctx), time.Since(start)
			case <-time.After(time.Minute):
			}
			return ctx.Err()
		})).HandleMessage(ctx, m)
		if !errors.Is(cause, idempotency.ErrNotHolder) {
			t.Fatalf("the handler's context ended with %v after %s (middleware: %v), want the claim given up", cause, took, err)
		}
		if took > 20*time.Second {
			t.Errorf("claim given up after %s, want at its recorded deadline and LossLag (about 4s), before the grace (30s) ends", took)
		}
	})
}

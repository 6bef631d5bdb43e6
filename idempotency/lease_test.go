package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
)

// wait returns what ch delivers, failing the test if nothing comes within a
// minute: a bound for hangs, not a timed assertion.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("no %s after a minute", what)
		panic("unreachable")
	}
}

// leasedContext returns a context carrying a real visibility lease on a
// message received from an in-memory queue, as the worker's heartbeat gives
// its handlers: visibility timeout vis, extended by vis when less than half is
// left. The Extender runs until the test ends. The message has key in the
// idempotency-key attribute and body as body.
func leasedContext(t testing.TB, key, body string, vis time.Duration) (context.Context, *sqsworker.Message) {
	t.Helper()
	return leasedContextWith(t, key, body, visibility.Config{VisibilityTimeout: vis})
}

// leasedContextWith is leasedContext with the heartbeat's configuration
// (its QueueURL is set, and its Logger discards).
func leasedContextWith(t testing.TB, key, body string, hb visibility.Config) (context.Context, *sqsworker.Message) {
	t.Helper()
	return leasedOn(t, "leased", key, body, hb)
}

// leasedOn is leasedContextWith on the queue named queue: a FIFO queue
// (the message in group "g") if its name ends in ".fifo".
func leasedOn(t testing.TB, queue, key, body string, hb visibility.Config) (context.Context, *sqsworker.Message) {
	t.Helper()
	vis := hb.VisibilityTimeout
	f := sqstest.NewFake()
	attrs := map[string]string{"VisibilityTimeout": strconv.Itoa(int(vis / time.Second))}
	fifo := strings.HasSuffix(queue, ".fifo")
	if fifo {
		attrs["FifoQueue"] = "true"
	}
	url := f.CreateQueue(queue, attrs)
	f.Send(url, body, func(in *sqs.SendMessageInput) {
		in.MessageAttributes = map[string]types.MessageAttributeValue{
			idempotency.KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(key)},
		}
		if fifo {
			in.MessageGroupId, in.MessageDeduplicationId = aws.String("g"), aws.String(key)
		}
	})
	out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	if err != nil || len(out.Messages) != 1 {
		t.Fatalf("receiving: %v, %d messages", err, len(out.Messages))
	}
	receivedAt := time.Now()
	m := sqsmsg.FromSDK(url, &out.Messages[0])
	hb.QueueURL, hb.Logger = url, slog.New(slog.NewTextHandler(io.Discard, nil))
	ext, err := visibility.New(f, hb)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ext.Run(ctx)
	}()
	hctx, lease := ext.Track(context.Background(), m, receivedAt)
	t.Cleanup(func() {
		lease.Release()
		cancel()
		<-done
	})
	return hctx, m
}

// Defect 2: during a DynamoDB brownout the holder's lease extensions fail,
// while the visibility heartbeat keeps its message: its claim holds (with
// its grace), so a duplicate send arriving after the message's first
// visibility deadline is postponed, not run. One effect.
func TestClaimHeldThroughBrownout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		holder, other := guards(b)
		var eff effects
		started := make(chan struct{})
		finish := make(chan struct{})
		var cancelled error
		work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			if visibility.FromContext(ctx) != nil {
				close(started)
				<-finish
				cancelled = context.Cause(ctx)
			}
			eff.add(m.ID)
			return nil
		})
		ctx, m := leasedContext(t, "brownout", "payload", 2*time.Second)
		firstDeadline := visibility.FromContext(ctx).Deadline()
		done := make(chan error, 1)
		go func() { done <- holder.Middleware(work).HandleMessage(ctx, m) }()
		wait(t, started, "start")
		b.fail(idempotency.OpExtendLease, true)
		localtest.Eventually(t, time.Minute, func() bool {
			return b.failures(idempotency.OpExtendLease) > 0 && time.Now().After(firstDeadline.Add(500*time.Millisecond))
		}, "no lease extension tried before the message's first visibility deadline")

		dup := msg("brownout", "payload")
		dup.ID = m.ID // effects count by ID: the duplicate send's effect would count twice
		if err := other.Middleware(work).HandleMessage(context.Background(), dup); !isPostponed(err) {
			t.Errorf("duplicate during the brownout: %v, want it postponed while the holder runs", err)
		}
		b.heal()
		close(finish)
		if err := wait(t, done, "end of the holder"); err != nil {
			t.Errorf("holder: %v", err)
		}
		if cancelled != nil {
			t.Errorf("the holder's context was cancelled: %v", cancelled)
		}
		if err := other.Middleware(work).HandleMessage(context.Background(), dup); err != nil {
			t.Errorf("duplicate after the holder completed: %v", err)
		}
		if n := eff.snapshot()[m.ID]; n != 1 {
			t.Errorf("%d effects, want 1", n)
		}
		if s := other.Stats(); s.Duplicates != 1 {
			t.Errorf("duplicate's guard stats %+v, want the retried duplicate acknowledged", s)
		}
	})
}

// Defect 2: a holder whose claim was taken over (its lease extensions went
// unanswered in a brownout, and another holder claimed the key) sees its
// context cancelled with ErrNotHolder, and its failure does not release the
// new holder's claim.
func TestTakenOverHolderCancelled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		holder, _ := idempotency.New(b.store, idempotency.Config{Logger: quiet()})
		started := make(chan struct{})
		cause := make(chan error, 1)
		work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			close(started)
			select {
			case <-ctx.Done():
				cause <- context.Cause(ctx)
				return context.Cause(ctx)
			case <-time.After(30 * time.Second):
				cause <- errors.New("the context was not cancelled within 30s")
				return nil
			}
		})
		ctx, m := leasedContext(t, "taken", "payload", 2*time.Second)
		done := make(chan error, 1)
		go func() { done <- holder.Middleware(work).HandleMessage(ctx, m) }()
		wait(t, started, "start")
		b.fail(idempotency.OpExtendLease, true)
		b.takeOver("taken")
		localtest.Eventually(t, time.Minute, func() bool { return b.failures(idempotency.OpExtendLease) > 0 }, "no lease extension tried")
		b.heal()
		if got := wait(t, cause, "handler outcome"); !errors.Is(got, idempotency.ErrNotHolder) {
			t.Errorf("holder's context: %v, want cancelled with ErrNotHolder", got)
		}
		if err := wait(t, done, "end of the holder"); !errors.Is(err, idempotency.ErrNotHolder) {
			t.Errorf("holder returned %v", err)
		}
		if tok := b.holder("taken"); tok != "another-holder" {
			t.Errorf("the key is held by %q after the old holder ended, want the new holder", tok)
		}
	})
}

// Defect 2: a failed Complete is retried through a brownout, so that the
// record is completed and a duplicate is acknowledged, not run again once
// the claim's lease ends.
func TestCompleteRetriedThroughBrownout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, other := guards(b)
		var runs atomic.Int64
		work := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil })
		b.fail(idempotency.OpComplete, false)
		done := make(chan error, 1)
		go func() { done <- g.Middleware(work).HandleMessage(context.Background(), msg("completing", "payload")) }()
		// More failures than one Complete request makes: the SDK's three
		// attempts, each of which net/http may replay once on a reused
		// connection.
		failures := 7
		if _, mem := b.store.(*idempotency.MemStore); mem {
			failures = 3
		}
		awaitFailures(t, b, idempotency.OpComplete, failures, done)
		b.heal()
		if err := wait(t, done, "end of the handler"); err != nil {
			t.Errorf("handler: %v", err)
		}
		if err := other.Middleware(work).HandleMessage(context.Background(), msg("completing", "payload")); err != nil {
			t.Errorf("duplicate: %v, want acknowledged", err)
		}
		if s := other.Stats(); runs.Load() != 1 || s.Duplicates != 1 {
			t.Errorf("runs %d, duplicate's guard stats %+v: want the duplicate acknowledged as completed", runs.Load(), s)
		}
	})
}

// Defect 2: a claim whose lease (grace included) ends without a successful
// extension is taken as lost: the handler's context is cancelled with
// ErrNotHolder, before another holder may take the key over.
func TestLapsedClaimCancelsHandler(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, err := idempotency.New(b.store, idempotency.Config{Lease: 500 * time.Millisecond, ClaimGrace: 500 * time.Millisecond, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		cause := make(chan error, 1)
		work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			select {
			case <-ctx.Done():
				cause <- context.Cause(ctx)
				return ctx.Err()
			case <-time.After(30 * time.Second):
				cause <- errors.New("the context was not cancelled within 30s")
				return nil
			}
		})
		if err := g.Middleware(work).HandleMessage(context.Background(), msg("lapsing", "payload")); !errors.Is(err, context.Canceled) {
			t.Errorf("handler: %v", err)
		}
		if got := <-cause; !errors.Is(got, idempotency.ErrNotHolder) {
			t.Errorf("handler's context: %v, want cancelled with ErrNotHolder", got)
		}
		if s := g.Stats(); s.LostClaims != 1 || s.Released != 1 {
			t.Errorf("stats %+v, want 1 lost claim, released", s)
		}
	})
}

// ClaimGrace has a default, and a negative or overlong one is refused.
func TestClaimGraceValidated(t *testing.T) {
	if idempotency.DefaultClaimGrace != 30*time.Second {
		t.Errorf("DefaultClaimGrace = %s; the documentation says 30s", idempotency.DefaultClaimGrace)
	}
	store := idempotency.NewMemStore(0)
	for _, grace := range []time.Duration{-time.Second, 13 * time.Hour} {
		if _, err := idempotency.New(store, idempotency.Config{ClaimGrace: grace}); err == nil || !strings.Contains(err.Error(), "ClaimGrace") {
			t.Errorf("ClaimGrace %s: %v, want an error naming it", grace, err)
		}
	}
	for _, grace := range []time.Duration{0, time.Millisecond, 12 * time.Hour} {
		if _, err := idempotency.New(store, idempotency.Config{ClaimGrace: grace}); err != nil {
			t.Errorf("ClaimGrace %s: %v", grace, err)
		}
	}
}

// A result that fits MaxResultSize but makes the item too large for
// DynamoDB: the completion is refused for good (not retried for 30s) and
// made again without the result.
func TestOversizedItemCompletesWithoutResult(t *testing.T) {
	t.Parallel()
	g, _ := idempotency.New(newStore(t, localtest.NewDynamoDB(t), idempotency.StoreConfig{}), idempotency.Config{
		MaxResultSize: 400 << 10, Logger: quiet(),
		OnDuplicate: func(_ context.Context, _ *sqsworker.Message, r *idempotency.Record) error {
			if r.Result != nil {
				return fmt.Errorf("result of %d bytes saved", len(r.Result))
			}
			return nil
		},
	})
	h := g.Middleware(sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
		idempotency.SetResult(ctx, make([]byte, 400<<10))
		return nil
	}))
	for i := range 2 {
		if err := h.HandleMessage(context.Background(), msg("oversized", "payload")); err != nil {
			t.Fatalf("delivery %d: %v", i, err)
		}
	}
	if s := g.Stats(); s.Claimed != 1 || s.Duplicates != 1 || s.StoreErrors != 1 {
		t.Errorf("stats %+v, want one refused completion, then a duplicate", s)
	}
}

// A holder whose claim another holder took while its handler ran, with
// writes to commit: the commit fails its condition, none of the writes
// applies, and the job's error is ErrNotHolder marked PartlyUnavailable,
// which spends no attempt: on its last receive a failure would dead-letter
// a job another holder runs. Its next receive finds the key completed,
// held or free. Before, the commit's ErrNotHolder was the job's failure.
func TestCommitOfATakenClaimPutsTheJobOff(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		g, _ := idempotency.New(b.store, idempotency.Config{Logger: quiet()})
		work := sqsworker.HandlerFunc(func(ctx context.Context, m *sqsworker.Message) error {
			b.takeOver("taken-writes")
			return idempotency.AddWrites(ctx, effectWrite(b.effects, "taken-writes"))
		})
		err := g.Middleware(work).HandleMessage(context.Background(), msg("taken-writes", "payload"))
		if !errors.Is(err, idempotency.ErrNotHolder) || !sqsworker.IsPartlyUnavailable(err) {
			t.Errorf("commit of a claim another holder took: %v, want ErrNotHolder marked PartlyUnavailable", err)
		}
		if n := b.applied("taken-writes"); n != 0 {
			t.Errorf("the writes applied %d times, want none", n)
		}
		if tok := b.holder("taken-writes"); tok != "another-holder" {
			t.Errorf("the key is held by %q, want the other holder", tok)
		}
	})
}

package visibility_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/visibility"
)

// slowSQS applies a call after before, then answers it after after, both
// chosen by the call's first receipt handle: SQS slow to answer, or a call
// applied whose answer came late (a lost reply the SDK sent again).
type slowSQS struct {
	*sqstest.Fake
	delay func(handle string) (before, after time.Duration)
}

func (s *slowSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	before, after := s.delay(aws.ToString(in.Entries[0].ReceiptHandle))
	select {
	case <-time.After(before):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out, err := s.Fake.ChangeMessageVisibilityBatch(context.Background(), in, opts...)
	select {
	case <-time.After(after):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return out, err
}

func lostCount(ctxs []context.Context) int {
	n := 0
	for _, c := range ctxs {
		if errors.Is(context.Cause(c), visibility.ErrLeaseLost) {
			n++
		}
	}
	return n
}

// A lease whose extension SQS applied, its answer read after the lease's
// deadline as the Extender counts it, is not taken for lost while its call
// is under way: ten leases with 2 s left, extended at once, answered 3 s
// later, while other calls of the round wait for a turn. They were ended
// as lost, their handlers cut short, while SQS kept their messages hidden.
func TestExtensionAnsweredLateIsNotLost(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 50)
		late := map[string]bool{}
		for _, m := range msgs[:10] {
			late[m.ReceiptHandle] = true
		}
		api := &slowSQS{Fake: f, delay: func(h string) (time.Duration, time.Duration) {
			if late[h] {
				return 0, 3 * time.Second
			}
			return 2500 * time.Millisecond, 0
		}}
		e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, MaxInFlight: 2, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		var ctxs []context.Context
		for i, m := range msgs {
			at := now.Add(-16 * time.Second) // 14 s left
			if i < 10 {
				at = now.Add(-28 * time.Second) // 2 s left: sent first
			}
			c, _ := e.Track(context.Background(), m, at)
			if i < 10 {
				ctxs = append(ctxs, c)
			}
		}
		e.Round(context.Background())
		if n := lostCount(ctxs); n > 0 {
			t.Errorf("%d of the 10 leases SQS extended were ended as lost; stats %+v", n, e.Stats())
		}
		if s := e.Stats(); s.Extended != 50 || s.Lost != 0 {
			t.Errorf("stats %+v, want 50 extended, none lost", s)
		}
	})
}

// With a 2 s visibility timeout (an Interval of 333 ms), an SQS that
// answers every call in 400 ms keeps the lease: the call is given up to 2 s
// while its leases have that long left. It was cut at the Interval, and
// the lease lost.
func TestShortVisibilityCallOutlastsTheInterval(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 2*time.Second, 1)
		api := &slowSQS{Fake: f, delay: func(string) (time.Duration, time.Duration) { return 0, 400 * time.Millisecond }}
		e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 2 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(ctx) })
		lctx, lease := e.Track(context.Background(), msgs[0], time.Now())
		time.Sleep(10 * time.Second)
		if lctx.Err() != nil {
			t.Errorf("lease ended (%v) with SQS answering every call in 400 ms; stats %+v", context.Cause(lctx), e.Stats())
		}
		lease.Release()
		cancel()
		wg.Wait()
	})
}

// 1,000 leases received at once, SQS answering each call in a second: with
// as many calls at once as the worker's receive loops (100), none is lost.
// (With 4, about 400 were, in two minutes.)
func TestThousandLeasesSlowSQS(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1000)
		api := &slowSQS{Fake: f, delay: func(string) (time.Duration, time.Duration) { return 500 * time.Millisecond, 500 * time.Millisecond }}
		e, err := visibility.New(api, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, MaxInFlight: 100, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.Run(ctx) })
		var ctxs []context.Context
		for _, m := range msgs {
			c, _ := e.Track(context.Background(), m, time.Now())
			ctxs = append(ctxs, c)
		}
		time.Sleep(2 * time.Minute)
		cancel()
		wg.Wait()
		if n := lostCount(ctxs); n > 0 {
			t.Errorf("%d leases lost; stats %+v", n, e.Stats())
		}
	})
}

// Near SQS's 12 hours, which it counts from its own receive (2 s before the
// Extender is told of it here), the last extension ends 30 s short of 12
// hours from the receive the Extender knows, and SQS takes it: the message
// stays hidden until then and the lease expires, not lost. An extension
// planned to end at 12 hours was refused, and the lease ended an Extension
// early (at 11 h with a 1 h visibility timeout).
func TestLastExtensionWithinSQSsTwelveHours(t *testing.T) {
	for _, vis := range []time.Duration{30 * time.Second, time.Hour} {
		bubble.Test(t, func(t *testing.T) {
			f, url, msgs := setup(t, vis, 1)
			e, stop := running(t, f, visibility.Config{QueueURL: url, VisibilityTimeout: vis})
			time.Sleep(2 * time.Second) // the receive's answer on its way
			start := time.Now()
			ctx, lease := e.Track(context.Background(), msgs[0], start)
			<-ctx.Done()
			stop()
			if !errors.Is(context.Cause(ctx), visibility.ErrMaxLifetime) {
				t.Errorf("visibility %s: lease ended with %v, want ErrMaxLifetime", vis, context.Cause(ctx))
			}
			if held := lease.Deadline().Sub(start); held < 12*time.Hour-31*time.Second {
				t.Errorf("visibility %s: the message held until %s after its receive, want 12h less 30s", vis, held)
			}
			if s := e.Stats(); s.Lost != 0 || s.Expired != 1 {
				t.Errorf("visibility %s: stats %+v", vis, s)
			}
		})
	}
}

// missingAnswer answers a call naming none of its entries, neither
// successful nor failed.
type missingAnswer struct{ *sqstest.Fake }

func (missingAnswer) ChangeMessageVisibilityBatch(context.Context, *sqs.ChangeMessageVisibilityBatchInput, ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return &sqs.ChangeMessageVisibilityBatchOutput{}, nil
}

// An entry the answer does not name is not counted as extended: its lease
// keeps its deadline, and is lost when that passes. It was counted as
// extended, the lease's deadline moved while SQS's had not.
func TestEntryMissingFromTheAnswerIsNotExtended(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 30*time.Second, 1)
		e, err := visibility.New(missingAnswer{f}, visibility.Config{QueueURL: url, VisibilityTimeout: 30 * time.Second, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		ctx, lease := e.Track(context.Background(), msgs[0], start.Add(-20*time.Second))
		e.Round(context.Background())
		if s := e.Stats(); s.Extended != 0 || lease.Deadline() != start.Add(10*time.Second) || ctx.Err() != nil {
			t.Errorf("stats %+v, deadline in %s, lease %v; want not extended, 10s left, held", s, lease.Deadline().Sub(start), context.Cause(ctx))
		}
		lease.Release()
	})
}

// hangOrFail fails at once the calls that carry the receipt handle fail,
// and holds the others until their context ends (SQS swallowing them).
type hangOrFail struct {
	*sqstest.Fake
	fail string
}

func (h *hangOrFail) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	if aws.ToString(in.Entries[0].ReceiptHandle) == h.fail {
		return nil, errors.New("connection reset")
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A lease whose extension failed at once is seen lost within LossLag of its
// deadline while another call of the round hangs for its own leases' time
// (up to 2 s): the round looks at its leases every Interval meanwhile. It
// was seen only when the hanging call ended, 1.8 s after its deadline with
// a LossLag of 1.33 s.
func TestLossSeenWithinLossLagWhileACallHangs(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f, url, msgs := setup(t, 4*time.Second, 11)
		e, err := visibility.New(&hangOrFail{Fake: f, fail: msgs[0].ReceiptHandle},
			visibility.Config{QueueURL: url, VisibilityTimeout: 4 * time.Second, MaxInFlight: 2, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		ctx, lease := e.Track(context.Background(), msgs[0], now.Add(-3800*time.Millisecond)) // 200 ms left
		for _, m := range msgs[1:] {
			e.Track(context.Background(), m, now.Add(-2*time.Second)) // 2 s left
		}
		lost := make(chan time.Time, 1)
		go func() {
			<-ctx.Done()
			lost <- time.Now()
		}()
		e.Round(context.Background())
		synctest.Wait()
		var lostAt time.Time
		select {
		case lostAt = <-lost:
		default:
		}
		if lostAt.IsZero() || lostAt.Sub(lease.Deadline()) > lease.LossLag() {
			t.Errorf("the lease was seen lost %s after its deadline (at %v), want within LossLag %s", lostAt.Sub(lease.Deadline()), lostAt.Sub(now), lease.LossLag())
		}
	})
}

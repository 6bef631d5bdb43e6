package ackbatch_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/bubble"
)

// Batches that become ready together while fewer senders wait than there
// are batches each get a call at once, as MaxInFlight allows: the second is
// not left behind the first's call because the one idle sender was already
// woken for the first.
func TestReadyBatchesGetTheirOwnSender(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(func(int, call) (map[string]failure, error) {
			time.Sleep(time.Second) // a slow call
			return nil, nil
		})
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Interval: time.Hour, MaxInFlight: 4, Result: r.add})
		for _, e := range entries("a", ackbatch.MaxBatch) { // a full batch: one sender starts
			b.Add(ackbatch.Delete, e)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait() // its call returned: the sender waits for a batch
		for _, e := range entries("d", 5) {
			b.Add(ackbatch.Delete, e)
		}
		for _, e := range entries("v", 5) {
			b.Add(ackbatch.ChangeVisibility, e)
		}
		closeOK(t, b) // flushes both kinds at once: two batches, one idle sender
		calls := api.made()
		if len(calls) != 3 {
			t.Fatalf("%d calls, want 3", len(calls))
		}
		if calls[1].at != calls[2].at {
			t.Errorf("the batches flushed together were sent at %s and %s: the second waited for the first's call", calls[1].at, calls[2].at)
		}
		if n := r.count(); n != 2*ackbatch.MaxBatch {
			t.Errorf("%d results, want %d", n, 2*ackbatch.MaxBatch)
		}
	})
}

// stressAPI answers after a random delay (or when the call's context ends),
// failing whole calls and single entries at random, and counts the calls
// under way.
//
// It also keeps, per receipt handle, the kind it was sent as and how often
// SQS took it: an entry a reused array lost, or one another's entry
// overwrote, shows as a handle sent twice in a call, as the wrong kind, or
// taken a number of times its result does not match.
type stressAPI struct {
	inFlight, peak, made atomic.Int64

	mu    sync.Mutex
	taken map[string]int // successful entries, by receipt handle
	kind  map[string]ackbatch.Kind
	bad   []string // calls that carried what was not added so
}

// sent checks the receipt handles of a call of kind and records the ones
// taken (not in failed).
func (s *stressAPI) sent(kind ackbatch.Kind, handles []string, visibility []int32, failed []types.BatchResultErrorEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.taken == nil {
		s.taken, s.kind = map[string]int{}, map[string]ackbatch.Kind{}
	}
	seen := map[string]bool{}
	for i, h := range handles {
		switch k, ok := s.kind[h]; {
		case h == "" || seen[h]:
			s.bad = append(s.bad, fmt.Sprintf("%s call with handle %q twice or empty: %q", kind, h, handles))
		case ok && k != kind:
			s.bad = append(s.bad, fmt.Sprintf("%s sent as %s and %s", h, k, kind))
		case visibility != nil && visibility[i] != 60:
			s.bad = append(s.bad, fmt.Sprintf("%s sent with visibility %ds, added with 60s", h, visibility[i]))
		}
		seen[h] = true
		s.kind[h] = kind
	}
	fail := map[string]bool{}
	for _, f := range failed {
		fail[aws.ToString(f.Id)] = true
	}
	for i, h := range handles {
		if !fail[strconv.Itoa(i)] {
			s.taken[h]++
		}
	}
}

func (s *stressAPI) do(ctx context.Context, n int) ([]types.BatchResultErrorEntry, error) {
	s.made.Add(1)
	now := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		p := s.peak.Load()
		if now <= p || s.peak.CompareAndSwap(p, now) {
			break
		}
	}
	select {
	case <-time.After(rand.N(300 * time.Millisecond)):
	case <-ctx.Done():
		return nil, fmt.Errorf("operation error SQS: batch: %w", ctx.Err())
	}
	switch rand.N(10) {
	case 0:
		return nil, fmt.Errorf("operation error SQS: batch: %w", throttled)
	case 1:
		return nil, fmt.Errorf("operation error SQS: batch: %w", errRefused)
	}
	var failed []types.BatchResultErrorEntry
	for i := range n {
		switch rand.N(20) {
		case 0:
			failed = append(failed, types.BatchResultErrorEntry{Id: aws.String(fmt.Sprint(i)), Code: aws.String("InternalError")})
		case 1:
			failed = append(failed, types.BatchResultErrorEntry{Id: aws.String(fmt.Sprint(i)), Code: aws.String("ReceiptHandleIsInvalid"), SenderFault: true})
		}
	}
	return failed, nil
}

func (s *stressAPI) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	failed, err := s.do(ctx, len(in.Entries))
	if err != nil {
		return nil, err
	}
	handles := make([]string, len(in.Entries))
	for i, e := range in.Entries {
		handles[i] = aws.ToString(e.ReceiptHandle)
	}
	s.sent(ackbatch.Delete, handles, nil, failed)
	out := &sqs.DeleteMessageBatchOutput{Failed: failed}
	for _, e := range in.Entries {
		if len(notFailed([]*string{e.Id}, failed)) == 1 {
			out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func (s *stressAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	failed, err := s.do(ctx, len(in.Entries))
	if err != nil {
		return nil, err
	}
	handles, vis := make([]string, len(in.Entries)), make([]int32, len(in.Entries))
	for i, e := range in.Entries {
		handles[i], vis[i] = aws.ToString(e.ReceiptHandle), e.VisibilityTimeout
	}
	s.sent(ackbatch.ChangeVisibility, handles, vis, failed)
	out := &sqs.ChangeMessageVisibilityBatchOutput{Failed: failed}
	for _, e := range in.Entries {
		if len(notFailed([]*string{e.Id}, failed)) == 1 {
			out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

// Entries of both kinds added from many goroutines, some with an Owner whose
// lease ends at a random moment, some while Close runs, against calls that
// take a random time and fail at random; Close's deadline ends before or
// after the retries do. Every entry finishes exactly once, by the time
// Close returns (its Owner told once too), no more than MaxInFlight calls
// are ever under way, and none is made once Close has returned.
func TestStressEveryEntryFinishesOnce(t *testing.T) {
	for round := range 100 {
		bubble.Test(t, func(t *testing.T) {
			api := &stressAPI{}
			var r results
			var acked sync.Map // receipt handle → *atomic.Int32
			maxInFlight := 1 + rand.N(8)
			b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", MaxInFlight: maxInFlight, MaxAttempts: 1 + rand.N(4),
				Interval: time.Duration(1+rand.N(200)) * time.Millisecond, Result: r.add})
			const adders, each = 8, 200
			var adding sync.WaitGroup
			for a := range adders {
				adding.Go(func() {
					for i := range each {
						h := fmt.Sprintf("%d-%d", a, i)
						e := ackbatch.Entry{ReceiptHandle: h, MessageID: h, Visibility: time.Minute}
						if rand.N(2) == 0 {
							var n atomic.Int32
							acked.Store(h, &n)
							leaseEnd := time.Now().Add(rand.N(20 * time.Second))
							e.Owner = owner{
								valid: func() bool { return time.Now().Before(leaseEnd) },
								acked: func(error) { n.Add(1) },
							}
						}
						b.Add(ackbatch.Kind(rand.N(2)), e)
						if rand.N(10) == 0 {
							time.Sleep(rand.N(50 * time.Millisecond))
						}
					}
				})
			}
			time.Sleep(rand.N(2 * time.Second)) // Close while some adders still add
			ctx, cancel := context.WithTimeout(context.Background(), rand.N(10*time.Second))
			defer cancel()
			err := b.Close(ctx)
			adding.Wait()
			if n := r.count(); n != adders*each {
				t.Fatalf("round %d: %d results when Close returned (%v), want %d", round, n, err, adders*each)
			}
			for a := range adders {
				for i := range each {
					h := fmt.Sprintf("%d-%d", a, i)
					err := r.of(t, h)
					api.mu.Lock()
					taken := api.taken[h]
					api.mu.Unlock()
					if (err == nil) != (taken == 1) || taken > 1 {
						t.Errorf("round %d: %s taken by SQS %d times, result %v", round, h, taken, err)
					}
				}
			}
			for _, bad := range api.bad {
				t.Errorf("round %d: %s", round, bad)
			}
			acked.Range(func(h, n any) bool {
				if got := n.(*atomic.Int32).Load(); got != 1 {
					t.Errorf("round %d: %s: Acked %d times, want once", round, h, got)
				}
				return true
			})
			if p := api.peak.Load(); p > int64(maxInFlight) {
				t.Errorf("round %d: %d calls under way at once, MaxInFlight %d", round, p, maxInFlight)
			}
			if n := api.inFlight.Load(); n != 0 {
				t.Errorf("round %d: %d calls under way when Close returned", round, n)
			}
			made := api.made.Load()
			time.Sleep(time.Hour)
			synctest.Wait()
			if n := api.made.Load(); n != made {
				t.Errorf("round %d: %d calls after Close returned", round, n-made)
			}
		})
	}
}

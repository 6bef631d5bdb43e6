package visibility

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/bubble"
)

// listAPI takes a random time per call and rejects the entries whose
// receipt handle starts with "bad", as SQS rejects a stale handle.
type listAPI struct{}

func (listAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	select {
	case <-time.After(rand.N(3 * time.Second)):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		if strings.HasPrefix(aws.ToString(e.ReceiptHandle), "bad") {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), SenderFault: true})
			continue
		}
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// checkList walks the tracked leases both ways and compares them with
// tracked. e.mu is held.
func (e *Extender) checkList() error {
	n := 0
	var prev *Lease
	for l := e.leases; l != nil; l = l.next {
		if l.prev != prev {
			return fmt.Errorf("lease %d: prev does not point at the lease before it", n)
		}
		if l.ended {
			return fmt.Errorf("lease %d: ended but still listed", n)
		}
		prev, n = l, n+1
		if n > e.tracked {
			return fmt.Errorf("more leases listed than the %d tracked (a cycle?)", e.tracked)
		}
	}
	if n != e.tracked {
		return fmt.Errorf("%d leases listed, %d tracked", n, e.tracked)
	}
	return nil
}

// Leases tracked and ended from many goroutines at once — released by
// their handlers, rejected (lost), run out before their first round, or
// past MaxLifetime — while rounds walk the list and calls end leases from
// their own goroutines: the list stays consistent, every lease that holds
// is extended until its release (none is skipped by a round), each lease
// ends once with the cause its fate calls for, and none is left tracked.
func TestTrackedListUnderConcurrentEnds(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		e, err := New(listAPI{}, Config{QueueURL: "q", VisibilityTimeout: 30 * time.Second,
			MaxLifetime: 3 * time.Minute, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		var run sync.WaitGroup
		run.Go(func() { _ = e.Run(ctx) })
		checking := make(chan struct{})
		run.Go(func() {
			for {
				select {
				case <-checking:
					return
				case <-time.After(time.Second):
				}
				e.mu.Lock()
				err := e.checkList()
				e.mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
		const handlers, each = 16, 40
		var wg sync.WaitGroup
		for h := range handlers {
			wg.Go(func() {
				for i := range each {
					time.Sleep(rand.N(5 * time.Second))
					fate := rand.N(10)
					handle := fmt.Sprintf("h%d-%d", h, i)
					receivedAt := time.Now()
					hold := rand.N(2 * time.Minute) // released well within MaxLifetime
					switch fate {
					case 0: // rejected at its first extension
						handle = "bad" + handle
						hold = 2 * time.Minute
					case 1: // received long ago: runs out at the next round
						receivedAt = receivedAt.Add(-40 * time.Second)
						hold = time.Minute
					case 2: // held past MaxLifetime
						hold = 4 * time.Minute
					}
					m := &sqsworker.Message{ID: strconv.Itoa(h*each + i), ReceiptHandle: handle}
					lctx, l := e.Track(context.Background(), m, receivedAt)
					select {
					case <-time.After(hold):
					case <-lctx.Done():
					}
					ended := context.Cause(lctx) // before Release
					l.Release()
					switch {
					case fate == 0 && !errors.Is(ended, ErrLeaseLost),
						fate == 1 && !errors.Is(ended, ErrLeaseLost),
						fate == 2 && !errors.Is(ended, ErrMaxLifetime),
						fate > 2 && ended != nil:
						t.Errorf("lease %s (fate %d) ended with %v before its release", handle, fate, ended)
					}
					if fate > 2 && !errors.Is(context.Cause(lctx), ErrReleased) {
						t.Errorf("lease %s: cause %v after Release, want ErrReleased", handle, context.Cause(lctx))
					}
				}
			})
		}
		wg.Wait()
		close(checking)
		cancel()
		run.Wait()
		e.mu.Lock()
		defer e.mu.Unlock()
		if err := e.checkList(); err != nil {
			t.Error(err)
		}
		if e.leases != nil || e.tracked != 0 {
			t.Errorf("after every release: head %p, %d tracked; want none", e.leases, e.tracked)
		}
		if lost, expired := e.lost.Load(), e.expired.Load(); lost == 0 || expired == 0 {
			t.Errorf("lost %d, expired %d: the test did not exercise both", lost, expired)
		}
	})
}

// A Lease is allocated with every message received with the heartbeat on:
// on 64-bit platforms it fits the 128-byte size class, a field more would
// cost every message 16 bytes (the list's pointers were placed so).
func TestLeaseFitsItsSizeClass(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("64-bit platforms only")
	}
	if n := unsafe.Sizeof(Lease{}); n > 128 {
		t.Errorf("a Lease takes %d bytes, past the 128-byte size class", n)
	}
}

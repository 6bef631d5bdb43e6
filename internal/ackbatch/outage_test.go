package ackbatch_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
)

// errRefused is the error of a call while SQS is out of reach.
var errRefused = errors.New("dial tcp 127.0.0.1:9324: connect: connection refused")

// outageAPI refuses every call made in the first outage of its life.
func outageAPI(outage time.Duration) *fakeAPI {
	return newFake(func(_ int, c call) (map[string]failure, error) {
		if c.at < outage {
			return nil, errRefused
		}
		return nil, nil
	})
}

func always() bool { return true }

// owner is an ackbatch.Owner made of functions: valid nil is always valid,
// acked nil ignores the result.
type owner struct {
	valid func() bool
	acked func(error)
}

func (o owner) Valid(time.Time) bool { return o.valid == nil || o.valid() }

func (o owner) Acked(err error) {
	if o.acked != nil {
		o.acked(err)
	}
}

// SQS out of reach for 15 s: entries with Valid are retried through it,
// MaxAttempts notwithstanding, and all land once it is back, in the
// batches they were sent in; entries without Valid still give up after
// MaxAttempts.
func TestValidEntriesOutlastOutage(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		const outage = 15 * time.Second
		api := outageAPI(outage)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", MaxAttempts: 2, Result: r.add})
		valid := entries("v", 35)
		for _, e := range valid {
			e.Owner = owner{valid: always}
			b.Add(ackbatch.Delete, e)
		}
		bounded := entries("n", 5) // batched with v30..v34
		for _, e := range bounded {
			b.Add(ackbatch.Delete, e)
		}
		time.Sleep(outage + time.Minute)
		synctest.Wait()

		for _, e := range valid {
			if err := r.of(t, e.ReceiptHandle); err != nil {
				t.Errorf("%s: %v, want it deleted", e.ReceiptHandle, err)
			}
		}
		for _, e := range bounded {
			if err := r.of(t, e.ReceiptHandle); !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "gave up after 2 attempts") {
				t.Errorf("%s: %v, want a give-up after 2 attempts, refused", e.ReceiptHandle, err)
			}
		}
		// The first four calls made the batches: v0-v9, v10-v19, v20-v29,
		// v30-v34 with n0-n4. No call splits one (the entries retried
		// together stay together), and each lands in one call.
		calls := api.made()
		group := map[string]int{} // of each valid entry, by first call
		size := map[int]int{}     // valid entries of each group
		for i, c := range calls[:4] {
			if len(c.handles) != ackbatch.MaxBatch {
				t.Fatalf("call %d of %d entries, want full batches first", i, len(c.handles))
			}
			for _, h := range c.handles {
				if h[0] == 'v' {
					group[h] = i
					size[i]++
				}
			}
		}
		landed := 0
		for _, c := range calls {
			in := map[int]int{}
			for _, h := range c.handles {
				if g, ok := group[h]; ok {
					in[g]++
				}
			}
			for g, n := range in {
				if n != size[g] {
					t.Errorf("call at %s carries %d of the %d valid entries of batch %d: %v", c.at, n, size[g], g, c.handles)
				}
			}
			if len(c.handles) > ackbatch.MaxBatch {
				t.Errorf("call of %d entries", len(c.handles))
			}
			if c.at >= outage {
				landed++
			}
		}
		if landed != 4 {
			t.Errorf("%d calls after the outage, want the 4 batches", landed)
		}
		// Backoff from 100ms, doubling, at least half of it, up to 5s: at
		// most 12 calls of a batch in 15s.
		if len(calls) > 4*13 {
			t.Errorf("%d calls for 4 batches over a 15s outage, want at most %d", len(calls), 4*13)
		}
		t.Logf("%d calls", len(calls))
		closeOK(t, b)
	})
}

// An entry whose Valid turns false during an outage is not sent again: it
// leaves its batch, which goes on without it, and finishes with ErrExpired,
// wrapping its last error. A visibility change invalid from the start is
// never sent (a delete is, once: see TestDeleteInvalidFromTheStartSentOnce).
func TestInvalidEntryLeavesItsBatch(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		const outage = 15 * time.Second
		api := outageAPI(outage)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		var held atomic.Bool
		held.Store(true)
		var mu sync.Mutex
		doneAt := map[string]time.Duration{}
		es := entries("d", 10)
		for i, e := range es {
			o := owner{valid: always}
			if i < 3 {
				o.valid = held.Load
			}
			o.acked = func(error) {
				mu.Lock()
				doneAt[e.ReceiptHandle] = time.Since(api.start)
				mu.Unlock()
			}
			e.Owner = o
			b.Add(ackbatch.Delete, e)
		}
		b.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: "lost", MessageID: "lost", Owner: owner{valid: func() bool { return false }}})
		time.Sleep(8 * time.Second)
		flip := time.Since(api.start)
		held.Store(false)
		time.Sleep(time.Minute)
		synctest.Wait()

		for _, e := range es[:3] {
			err := r.of(t, e.ReceiptHandle)
			if !errors.Is(err, ackbatch.ErrExpired) || !errors.Is(err, errRefused) {
				t.Errorf("%s: %v, want ErrExpired after refused calls", e.ReceiptHandle, err)
			}
			if at := doneAt[e.ReceiptHandle]; at > flip+ackbatch.MaxBackoff {
				t.Errorf("%s finished at %s, more than a backoff after it expired at %s", e.ReceiptHandle, at, flip)
			}
		}
		for _, e := range es[3:] {
			if err := r.of(t, e.ReceiptHandle); err != nil {
				t.Errorf("%s: %v", e.ReceiptHandle, err)
			}
		}
		if err := r.of(t, "lost"); !errors.Is(err, ackbatch.ErrExpired) || !strings.Contains(err.Error(), "not sent") {
			t.Errorf("entry invalid from the start: %v, want ErrExpired, not sent", err)
		}
		after := 0
		for _, c := range api.made() {
			for _, h := range c.handles {
				if h == "lost" || (c.at > flip && (h == "d0" || h == "d1" || h == "d2")) {
					t.Errorf("call at %s carries %s", c.at, h)
				}
			}
			if c.at > flip {
				after++
				if len(c.handles) != 7 {
					t.Errorf("call at %s with %d entries, want the 7 still valid", c.at, len(c.handles))
				}
			}
		}
		if after == 0 {
			t.Errorf("no call after the entries expired")
		}
		closeOK(t, b)
	})
}

// A delete whose Owner is invalid from the start (the message's handler
// succeeded, or its copy was sent, after its owner took the lease for
// lost) is sent once all the same, and not again: it lands when SQS
// answers; during an outage it finishes with ErrExpired after that one
// call. Its batch goes on without it. Before, it was never sent, and a
// message whose lease SQS still held came back.
func TestDeleteInvalidFromTheStartSentOnce(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		const outage = 15 * time.Second
		api := outageAPI(outage)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		invalid := owner{valid: func() bool { return false }}
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: "refused", MessageID: "refused", Owner: invalid})
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: "held", MessageID: "held", Owner: owner{valid: always}})
		time.Sleep(outage + time.Second)
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: "landed", MessageID: "landed", Owner: invalid})
		time.Sleep(time.Minute)
		synctest.Wait()

		if err := r.of(t, "refused"); !errors.Is(err, ackbatch.ErrExpired) || !errors.Is(err, errRefused) || !strings.Contains(err.Error(), "after 1 attempts") {
			t.Errorf("refused: %v, want ErrExpired after one refused call", err)
		}
		for _, h := range []string{"held", "landed"} {
			if err := r.of(t, h); err != nil {
				t.Errorf("%s: %v, want it deleted", h, err)
			}
		}
		sent := map[string]int{}
		for _, c := range api.made() {
			for _, h := range c.handles {
				sent[h]++
			}
		}
		if sent["refused"] != 1 || sent["landed"] != 1 || sent["held"] < 2 {
			t.Errorf("sent %v: want refused and landed once, held until it landed", sent)
		}
		closeOK(t, b)
	})
}

// Close during an outage waits for the retries no longer than its context:
// it then returns at once, every entry finished with an error, and no call
// is made after.
func TestCloseDuringOutage(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := outageAPI(24 * time.Hour)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", MaxAttempts: 2, Result: r.add})
		for _, e := range entries("d", 25) {
			e.Owner = owner{valid: always}
			b.Add(ackbatch.Delete, e)
		}
		b.Flush(ackbatch.Delete)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		if n := r.count(); n != 0 {
			t.Fatalf("%d entries finished during the outage, want none given up", n)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		start := time.Now()
		err := b.Close(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want the context's deadline", err)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("Close took %s, want the context's 2s", took)
		}
		if n := r.count(); n != 25 {
			t.Fatalf("%d results when Close returned, want 25", n)
		}
		for _, e := range entries("d", 25) {
			if err := r.of(t, e.ReceiptHandle); !errors.Is(err, errRefused) || !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s: %v, want a give-up at Close's deadline after refused calls", e.ReceiptHandle, err)
			}
		}
		made := len(api.made())
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(api.made()); n != made {
			t.Errorf("%d calls after Close returned", n-made)
		}
	})
}

// On the in-memory SQS, deletes errRefused for a long run of calls (four
// times MaxAttempts for each batch) all land, within the messages'
// visibility timeout: nothing is left in the queue.
func TestOutageOnFake(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		f := sqstest.NewFake()
		url := f.CreateQueue("acks", nil)
		for range 30 {
			f.Send(url, "job")
		}
		const vis = 10 * time.Minute
		var handles []string
		for len(handles) < 30 {
			out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: int32(vis / time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range out.Messages {
				handles = append(handles, *m.ReceiptHandle)
			}
		}
		leaseEnd := time.Now().Add(vis - time.Second)
		const failing = 3 * 4 * 8
		f.FailNext(sqstest.OpDeleteMessageBatch, errRefused, failing)
		var r results
		b := ackbatch.New(f, ackbatch.Config{QueueURL: url, Result: r.add})
		for i, h := range handles {
			b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: h, MessageID: fmt.Sprint(i),
				Owner: owner{valid: func() bool { return time.Now().Before(leaseEnd) }}})
		}
		time.Sleep(vis / 2)
		synctest.Wait()
		for _, h := range handles {
			if err := r.of(t, h); err != nil {
				t.Errorf("%s: %v", h, err)
			}
		}
		if v, inFlight, _ := f.Depth(url); v+inFlight != 0 {
			t.Errorf("%d messages left, want none", v+inFlight)
		}
		if n := f.Calls(sqstest.OpDeleteMessageBatch); n != failing+3 {
			t.Errorf("%d delete calls, want %d refused and 3 that landed", n, failing)
		}
		closeOK(t, b)
	})
}

// Retries due together share batches, with the entries pending then: the
// leftovers of two calls and a new entry go in one call, not three.
func TestRetriesShareBatches(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(func(n int, c call) (map[string]failure, error) {
			if c.at > 0 {
				return nil, nil
			}
			failed := map[string]failure{}
			for _, h := range c.handles[:4] {
				failed[h] = failure{"InternalError", false}
			}
			return failed, nil
		})
		var r results
		// An Interval longer than any backoff here: every retry is due
		// within it of the first.
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Interval: 10 * time.Second, Result: r.add})
		for _, e := range entries("d", 20) { // two full batches, sent at once
			b.Add(ackbatch.Delete, e)
		}
		time.Sleep(10 * time.Millisecond) // before the first backoff ends
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: "new", MessageID: "new"})
		time.Sleep(time.Second)
		synctest.Wait()
		calls := api.made()
		if len(calls) != 3 || len(calls[0].handles) != 10 || len(calls[1].handles) != 10 {
			t.Fatalf("calls %+v, want two of 10, then one", calls)
		}
		last := calls[2].handles
		if len(last) != 9 || last[0] != "new" {
			t.Errorf("third call carries %v, want the new entry and the 8 retries", last)
		}
		for _, e := range append(entries("d", 20), ackbatch.Entry{ReceiptHandle: "new"}) {
			if err := r.of(t, e.ReceiptHandle); err != nil {
				t.Errorf("%s: %v", e.ReceiptHandle, err)
			}
		}
		closeOK(t, b)
	})
}

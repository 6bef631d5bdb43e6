package ackbatch_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/sqsworker/sqsworker/internal/ackbatch"
)

// Batches that become ready together while fewer senders wait than there
// are batches each get a call at once, as MaxInFlight allows: the second is
// not left behind the first's call because the one idle sender was already
// woken for the first.
func TestReadyBatchesGetTheirOwnSender(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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

package ackbatch_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/internal/ackbatch"
	"github.com/sqsworker/sqsworker/internal/bubble"
	"github.com/sqsworker/sqsworker/sqstest"
)

// call is one batch call the fake API received.
type call struct {
	kind    ackbatch.Kind
	at      time.Duration // since the fake was made
	handles []string
	vis     []int32 // ChangeVisibility only
}

// fakeAPI records the batch calls it receives and answers each with what
// answer returns: the failed entries, by receipt handle, or an error for the
// whole call. With hang set, a call waits for its context to end, as a hung
// endpoint would with the SDK.
type fakeAPI struct {
	start  time.Time
	answer func(n int, c call) (failed map[string]failure, err error)
	hang   bool

	mu    sync.Mutex
	calls []call
}

// failure is how one entry fails.
type failure struct {
	code        string
	senderFault bool
}

func newFake(answer func(n int, c call) (map[string]failure, error)) *fakeAPI {
	return &fakeAPI{start: time.Now(), answer: answer}
}

func (f *fakeAPI) do(ctx context.Context, c call, ids []*string) ([]types.BatchResultErrorEntry, error) {
	c.at = time.Since(f.start)
	f.mu.Lock()
	f.calls = append(f.calls, c)
	n := len(f.calls)
	f.mu.Unlock()
	if f.hang {
		<-ctx.Done()
		return nil, fmt.Errorf("operation error SQS: batch: %w", ctx.Err())
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var failedBy map[string]failure
	if f.answer != nil {
		var err error
		if failedBy, err = f.answer(n, c); err != nil {
			return nil, fmt.Errorf("operation error SQS: batch: %w", err)
		}
	}
	var failed []types.BatchResultErrorEntry
	for i, h := range c.handles {
		if fl, ok := failedBy[h]; ok {
			failed = append(failed, types.BatchResultErrorEntry{Id: ids[i], Code: aws.String(fl.code), Message: aws.String("failed: " + h), SenderFault: fl.senderFault})
		}
	}
	return failed, nil
}

func (f *fakeAPI) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	c := call{kind: ackbatch.Delete}
	var ids []*string
	for _, e := range in.Entries {
		c.handles = append(c.handles, *e.ReceiptHandle)
		ids = append(ids, e.Id)
	}
	failed, err := f.do(ctx, c, ids)
	if err != nil {
		return nil, err
	}
	out := &sqs.DeleteMessageBatchOutput{Failed: failed}
	for _, id := range notFailed(ids, failed) {
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: id})
	}
	return out, nil
}

func (f *fakeAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	c := call{kind: ackbatch.ChangeVisibility}
	var ids []*string
	for _, e := range in.Entries {
		c.handles = append(c.handles, *e.ReceiptHandle)
		c.vis = append(c.vis, e.VisibilityTimeout)
		ids = append(ids, e.Id)
	}
	failed, err := f.do(ctx, c, ids)
	if err != nil {
		return nil, err
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{Failed: failed}
	for _, id := range notFailed(ids, failed) {
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: id})
	}
	return out, nil
}

// notFailed are the IDs of ids that failed does not name: the entries an
// answer lists as successful.
func notFailed(ids []*string, failed []types.BatchResultErrorEntry) []*string {
	var ok []*string
	for _, id := range ids {
		if !slices.ContainsFunc(failed, func(f types.BatchResultErrorEntry) bool { return aws.ToString(f.Id) == aws.ToString(id) }) {
			ok = append(ok, id)
		}
	}
	return ok
}

func (f *fakeAPI) made() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// results collects the results the batcher reports, by receipt handle.
type results struct {
	mu  sync.Mutex
	got map[string][]error
}

func (r *results) add(_ ackbatch.Kind, e ackbatch.Entry, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.got == nil {
		r.got = map[string][]error{}
	}
	r.got[e.ReceiptHandle] = append(r.got[e.ReceiptHandle], err)
}

// of returns the one result of handle, failing the test when there is not
// exactly one.
func (r *results) of(t *testing.T, handle string) error {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.got[handle]); n != 1 {
		t.Fatalf("%d results for %s, want 1: %v", n, handle, r.got[handle])
	}
	return r.got[handle][0]
}

func (r *results) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, errs := range r.got {
		n += len(errs)
	}
	return n
}

func entries(prefix string, n int) []ackbatch.Entry {
	es := make([]ackbatch.Entry, n)
	for i := range es {
		h := fmt.Sprintf("%s%d", prefix, i)
		es[i] = ackbatch.Entry{ReceiptHandle: h, MessageID: "id-" + h}
	}
	return es
}

func closeOK(t *testing.T, b *ackbatch.Batcher) {
	t.Helper()
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

var (
	throttled   = &smithy.GenericAPIError{Code: "RequestThrottled", Message: "slow down", Fault: smithy.FaultClient}
	serverError = &smithy.GenericAPIError{Code: "InternalError", Message: "oops", Fault: smithy.FaultServer}
	denied      = &smithy.GenericAPIError{Code: "AccessDenied", Message: "no", Fault: smithy.FaultClient}
)

// A call whose entries partly fail retries only the entries SQS failed on
// its side; a sender fault is final; every entry gets its own result.
func TestPartialFailureRetriesOnlyFailedEntries(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(func(n int, c call) (map[string]failure, error) {
			if n == 1 {
				return map[string]failure{"d1": {"InternalError", false}, "d2": {"ReceiptHandleIsInvalid", true}}, nil
			}
			return nil, nil
		})
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		for _, e := range entries("d", 4) {
			b.Add(ackbatch.Delete, e)
		}
		b.Flush(ackbatch.Delete)
		synctest.Wait()
		time.Sleep(time.Second) // past the first backoff
		synctest.Wait()
		calls := api.made()
		if len(calls) != 2 || !slices.Equal(calls[0].handles, []string{"d0", "d1", "d2", "d3"}) || !slices.Equal(calls[1].handles, []string{"d1"}) {
			t.Fatalf("calls = %+v, want all four, then d1 alone", calls)
		}
		for _, h := range []string{"d0", "d1", "d3"} {
			if err := r.of(t, h); err != nil {
				t.Errorf("%s: %v", h, err)
			}
		}
		if err := r.of(t, "d2"); err == nil || !strings.Contains(err.Error(), "ReceiptHandleIsInvalid") || !strings.Contains(err.Error(), "id-d2") {
			t.Errorf("d2: %v, want the sender fault, naming the message", err)
		}
		closeOK(t, b)
		if n := r.count(); n != 4 {
			t.Errorf("%d results, want 4", n)
		}
	})
}

// Whole-call errors that may pass (throttling, server errors, the network)
// are retried with exponential backoff, jittered, until the call succeeds.
func TestTransientErrorsRetriedWithBackoff(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(func(n int, c call) (map[string]failure, error) {
			switch n {
			case 1, 2:
				return nil, throttled
			case 3:
				return nil, serverError
			case 4:
				return nil, errors.New("connection reset by peer")
			}
			return nil, nil
		})
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		for _, e := range entries("v", 3) {
			e.Visibility = 30 * time.Second
			b.Add(ackbatch.ChangeVisibility, e)
		}
		b.Flush(ackbatch.ChangeVisibility)
		time.Sleep(time.Minute)
		synctest.Wait()
		calls := api.made()
		var at []time.Duration
		for _, c := range calls {
			at = append(at, c.at)
			if !slices.Equal(c.handles, []string{"v0", "v1", "v2"}) || !slices.Equal(c.vis, []int32{30, 30, 30}) {
				t.Errorf("call %+v, want the three entries with 30s each", c)
			}
		}
		if len(at) != 5 {
			t.Fatalf("calls at %v, want 5", at)
		}
		// 100ms doubling, less up to half (jitter).
		for i, base := 1, ackbatch.FirstBackoff; i < len(at); i, base = i+1, 2*base {
			if gap := at[i] - at[i-1]; gap < base/2 || gap > base {
				t.Errorf("call %d came %s after the one before, want %s to %s", i+1, gap, base/2, base)
			}
		}
		for _, h := range []string{"v0", "v1", "v2"} {
			if err := r.of(t, h); err != nil {
				t.Errorf("%s: %v", h, err)
			}
		}
		closeOK(t, b)
	})
}

// A whole-call error no retry fixes (access denied, a missing queue) fails
// every entry of the call at once.
func TestFatalErrorNotRetried(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(func(int, call) (map[string]failure, error) { return nil, denied })
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		for _, e := range entries("d", 3) {
			b.Add(ackbatch.Delete, e)
		}
		b.Flush(ackbatch.Delete)
		time.Sleep(time.Minute)
		synctest.Wait()
		if n := len(api.made()); n != 1 {
			t.Errorf("%d calls, want 1", n)
		}
		for _, h := range []string{"d0", "d1", "d2"} {
			var api smithy.APIError
			if err := r.of(t, h); !errors.As(err, &api) || api.ErrorCode() != "AccessDenied" {
				t.Errorf("%s: %v, want AccessDenied", h, err)
			}
		}
		closeOK(t, b)
	})
}

// No entry is tried more than MaxAttempts times; each is then reported with
// the error of its own last attempt.
func TestMaxAttempts(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(func(n int, c call) (map[string]failure, error) {
			if n == 1 {
				return nil, throttled
			}
			return map[string]failure{"d0": {"InternalError", false}, "d1": {"ServiceUnavailable", false}}, nil
		})
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", MaxAttempts: 3, Result: r.add})
		for _, e := range entries("d", 3) {
			b.Add(ackbatch.Delete, e)
		}
		b.Flush(ackbatch.Delete)
		time.Sleep(time.Minute)
		synctest.Wait()
		calls := api.made()
		if len(calls) != 3 || len(calls[0].handles) != 3 || !slices.Equal(calls[2].handles, []string{"d0", "d1"}) {
			t.Errorf("calls = %+v, want 3: all, then d0 and d1 twice", calls)
		}
		if err := r.of(t, "d2"); err != nil {
			t.Errorf("d2: %v", err)
		}
		for h, code := range map[string]string{"d0": "InternalError", "d1": "ServiceUnavailable"} {
			err := r.of(t, h)
			if err == nil || !strings.Contains(err.Error(), "gave up after 3 attempts") || !strings.Contains(err.Error(), code) {
				t.Errorf("%s: %v, want a give-up after 3 attempts with %s", h, err, code)
			}
		}
		closeOK(t, b)
	})
}

// A partial batch waits Config.Interval for more entries; ten are sent at
// once; more than ten are split into calls of ten.
func TestBatchesOfTen(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(nil)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Interval: time.Second, Result: r.add})
		for _, e := range entries("d", 25) {
			b.Add(ackbatch.Delete, e)
		}
		synctest.Wait()
		calls := api.made()
		if len(calls) != 2 || len(calls[0].handles) != 10 || len(calls[1].handles) != 10 {
			t.Fatalf("calls before the interval = %+v, want two full ones", calls)
		}
		time.Sleep(999 * time.Millisecond)
		synctest.Wait()
		if n := len(api.made()); n != 2 {
			t.Fatalf("%d calls before the interval, want 2", n)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		calls = api.made()
		if len(calls) != 3 || len(calls[2].handles) != 5 {
			t.Fatalf("calls after the interval = %+v, want the last five in a third", calls)
		}
		var sent []string
		for _, c := range calls {
			sent = append(sent, c.handles...)
		}
		slices.Sort(sent)
		if sent = slices.Compact(sent); len(sent) != 25 || r.count() != 25 {
			t.Errorf("%d distinct entries sent, %d results, want 25 each", len(sent), r.count())
		}
		// Flush and Close split what is pending too.
		for _, e := range entries("v", 23) {
			b.Add(ackbatch.ChangeVisibility, e)
		}
		closeOK(t, b)
		var sizes []int
		for _, c := range api.made()[3:] {
			if c.kind != ackbatch.ChangeVisibility {
				t.Errorf("call of kind %s, want change-visibility", c.kind)
			}
			sizes = append(sizes, len(c.handles))
		}
		slices.Sort(sizes) // the calls run concurrently
		if !slices.Equal(sizes, []int{3, 10, 10}) {
			t.Errorf("change-visibility calls of %v entries, want 10, 10 and 3", sizes)
		}
	})
}

// Close sends what is pending, waits for it, and makes later entries fail
// with ErrClosed.
func TestCloseFlushesThenRefuses(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(nil)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Interval: time.Hour, Result: r.add})
		for _, e := range entries("d", 3) {
			b.Add(ackbatch.Delete, e)
		}
		closeOK(t, b)
		if calls := api.made(); len(calls) != 1 || len(calls[0].handles) != 3 || r.count() != 3 {
			t.Fatalf("after Close: calls %+v, %d results; want one call of 3, 3 results", calls, r.count())
		}
		var done []error
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: "late", Owner: owner{acked: func(err error) { done = append(done, err) }}})
		if err := r.of(t, "late"); !errors.Is(err, ackbatch.ErrClosed) {
			t.Errorf("entry added after Close: %v, want ErrClosed", err)
		}
		if len(done) != 1 || !errors.Is(done[0], ackbatch.ErrClosed) {
			t.Errorf("Done saw %v, want ErrClosed once", done)
		}
		closeOK(t, b) // a second Close is harmless
		time.Sleep(time.Hour)
		synctest.Wait()
		if n := len(api.made()); n != 1 {
			t.Errorf("%d calls, want 1", n)
		}
	})
}

// Close is bounded by its context: with a hung endpoint it cancels the call
// under way, makes no other, reports every entry failed and returns the
// context's error.
func TestCloseBoundedByContext(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(nil)
		api.hang = true
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", MaxInFlight: 1, Result: r.add})
		for _, e := range entries("d", 25) { // three calls, one at a time
			b.Add(ackbatch.Delete, e)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		err := b.Close(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close = %v, want the context's deadline", err)
		}
		if took := time.Since(start); took != 3*time.Second {
			t.Errorf("Close took %s, want the context's 3s", took)
		}
		if n := len(api.made()); n != 1 {
			t.Errorf("%d calls, want the hung one only", n)
		}
		if n := r.count(); n != 25 {
			t.Fatalf("%d results when Close returned, want 25", n)
		}
		for _, e := range entries("d", 25) {
			if err := r.of(t, e.ReceiptHandle); err == nil {
				t.Errorf("%s reported sent", e.ReceiptHandle)
			}
		}
	})
}

// A ChangeVisibility entry SQS would refuse fails alone, without taking its
// batch down with it.
func TestInvalidVisibilityFailsAlone(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := newFake(nil)
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		b.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: "neg", Visibility: -time.Second})
		b.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: "long", Visibility: 13 * time.Hour})
		b.Add(ackbatch.ChangeVisibility, ackbatch.Entry{ReceiptHandle: "ok", Visibility: 12 * time.Hour})
		closeOK(t, b)
		for _, h := range []string{"neg", "long"} {
			if err := r.of(t, h); err == nil || !strings.Contains(err.Error(), "outside 0..12h") {
				t.Errorf("%s: %v, want an invalid visibility", h, err)
			}
		}
		if err := r.of(t, "ok"); err != nil {
			t.Errorf("ok: %v", err)
		}
		if calls := api.made(); len(calls) != 1 || !slices.Equal(calls[0].vis, []int32{43200}) {
			t.Errorf("calls = %+v, want one with the valid entry alone", calls)
		}
	})
}

// Against the in-memory SQS: deletes delete, a stale receipt handle fails
// for good, an injected server fault is retried.
func TestOnFake(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("acks", nil)
	for range 12 {
		f.Send(url, "job")
	}
	var handles []string
	for len(handles) < 12 {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, VisibilityTimeout: 300})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			handles = append(handles, *m.ReceiptHandle)
		}
	}
	f.FailEntries(sqstest.OpDeleteMessageBatch, "InternalError", false, 2)
	var r results
	b := ackbatch.New(f, ackbatch.Config{QueueURL: url, Result: r.add})
	for i, h := range handles {
		b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: h, MessageID: fmt.Sprint(i)})
	}
	b.Add(ackbatch.Delete, ackbatch.Entry{ReceiptHandle: "stale", MessageID: "stale"})
	closeOK(t, b)
	for _, h := range handles {
		if err := r.of(t, h); err != nil {
			t.Errorf("%s: %v", h, err)
		}
	}
	if err := r.of(t, "stale"); err == nil || !strings.Contains(err.Error(), "ReceiptHandleIsInvalid") {
		t.Errorf("stale handle: %v", err)
	}
	if v, inFlight, _ := f.Depth(url); v+inFlight != 0 {
		t.Errorf("%d messages left, want none", v+inFlight)
	}
	if n := f.Calls(sqstest.OpDeleteMessageBatch); n != 3 {
		t.Errorf("%d delete calls, want 3: two batches and one retry", n)
	}
}

// The arrays of batches sent are used again for new entries. An array whose
// call failed is used again while its entries wait out their backoff: the
// retry still carries them, each is deleted once, and none is reported
// twice. Partial failures and owners go through the same arrays.
func TestReusedBatchArraysKeepRetries(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		b3Failed := false
		api := newFake(func(n int, c call) (map[string]failure, error) {
			switch {
			case n == 1:
				return nil, serverError // the whole of a0..a9 again
			case !b3Failed && slices.Contains(c.handles, "b3"):
				b3Failed = true // b3 alone again, from a new array
				return map[string]failure{"b3": {code: "InternalError"}}, nil
			}
			return nil, nil
		})
		var r results
		acked := map[string]int{}
		var mu sync.Mutex
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add, MaxInFlight: 1})
		add := func(prefix string) {
			for _, e := range entries(prefix, ackbatch.MaxBatch) {
				h := e.ReceiptHandle
				e.Owner = owner{acked: func(error) { mu.Lock(); acked[h]++; mu.Unlock() }}
				b.Add(ackbatch.Delete, e)
			}
		}
		add("a") // a full batch: sent at once, and fails
		synctest.Wait()
		for _, p := range []string{"b", "c", "d"} {
			add(p) // while a0..a9 wait out their backoff
			synctest.Wait()
		}
		time.Sleep(time.Minute)
		synctest.Wait()
		var deleted []string
		for i, c := range api.made() {
			if i > 0 { // the first call failed as a whole
				deleted = append(deleted, c.handles...)
			}
		}
		slices.Sort(deleted)
		deleted = slices.Compact(deleted)
		if len(deleted) != 4*ackbatch.MaxBatch {
			t.Errorf("%d entries deleted, want %d: %v", len(deleted), 4*ackbatch.MaxBatch, deleted)
		}
		for _, p := range []string{"a", "b", "c", "d"} {
			for _, e := range entries(p, ackbatch.MaxBatch) {
				if err := r.of(t, e.ReceiptHandle); err != nil {
					t.Errorf("%s: %v", e.ReceiptHandle, err)
				}
				mu.Lock()
				if n := acked[e.ReceiptHandle]; n != 1 {
					t.Errorf("%s acknowledged %d times, want 1", e.ReceiptHandle, n)
				}
				mu.Unlock()
			}
		}
		closeOK(t, b)
	})
}

// partialAnswers is fakeAPI whose first answer leaves out the entries of
// the handles in omit: it lists them neither as successful nor as failed.
type partialAnswers struct {
	*fakeAPI
	omit map[string]bool
	once sync.Once
}

func (p *partialAnswers) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	out, err := p.fakeAPI.DeleteMessageBatch(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	p.once.Do(func() {
		out.Successful = slices.DeleteFunc(out.Successful, func(e types.DeleteMessageBatchResultEntry) bool {
			n, _ := strconv.Atoi(aws.ToString(e.Id))
			return p.omit[aws.ToString(in.Entries[n].ReceiptHandle)]
		})
	})
	return out, nil
}

// An entry that the answer to its call lists neither as successful nor as
// failed is not known to be applied: it is sent again, as a failed entry
// is, and finishes once an answer lists it. It counted as deleted before,
// its message left in the queue to run again.
func TestUnansweredEntryIsSentAgain(t *testing.T) {
	bubble.Test(t, func(t *testing.T) {
		api := &partialAnswers{fakeAPI: newFake(nil), omit: map[string]bool{"d1": true}}
		var r results
		b := ackbatch.New(api, ackbatch.Config{QueueURL: "q", Result: r.add})
		for _, e := range entries("d", 3) {
			b.Add(ackbatch.Delete, e)
		}
		b.Flush(ackbatch.Delete)
		synctest.Wait()
		time.Sleep(time.Second) // past the first backoff
		synctest.Wait()
		calls := api.made()
		if len(calls) != 2 || !slices.Equal(calls[1].handles, []string{"d1"}) {
			t.Fatalf("calls = %+v, want all three, then d1 alone", calls)
		}
		for _, h := range []string{"d0", "d1", "d2"} {
			if err := r.of(t, h); err != nil {
				t.Errorf("%s: %v", h, err)
			}
		}
		closeOK(t, b)
	})
}

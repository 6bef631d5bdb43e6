package sqstest

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// cycle sends, receives and deletes n messages of url in batches of ten;
// every tenth message is released and received again before its delete.
func cycle(t testing.TB, f *Fake, url string, n int) {
	t.Helper()
	ctx := context.Background()
	body := `{"job":"` + strings.Repeat("x", 200) + `"}`
	for i := 0; i < n; i += 10 {
		for range 10 {
			f.Send(url, body)
		}
		out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
		if err != nil || len(out.Messages) != 10 {
			t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
		}
		if i%100 == 0 { // one in ten messages comes twice
			if _, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: out.Messages[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			again, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url})
			if err != nil || len(again.Messages) != 1 {
				t.Fatalf("receive again: %v", err)
			}
			out.Messages[0] = again.Messages[0]
		}
		in := &sqs.DeleteMessageBatchInput{QueueUrl: &url}
		for j, m := range out.Messages {
			in.Entries = append(in.Entries, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(j)), ReceiptHandle: m.ReceiptHandle})
		}
		if d, err := f.DeleteMessageBatch(ctx, in); err != nil || len(d.Failed) != 0 {
			t.Fatalf("delete: %v, %+v", err, d.Failed)
		}
	}
}

// A deleted message leaves no record, but the receive count of one received
// more than once.
func TestDeletedMessagesFreed(t *testing.T) {
	f := NewFake()
	url := f.CreateQueue("q", nil)
	cycle(t, f, url, 1000)
	f.mu.Lock()
	defer f.mu.Unlock()
	q := f.queues["q"]
	if len(q.msgs) != 0 || len(q.received) != 0 || len(q.gone) != 10 {
		t.Errorf("after 1000 deleted messages, 10 of them received twice: %d messages, %d received, %d gone records; want 0, 0, 10",
			len(q.msgs), len(q.received), len(q.gone))
	}
}

// The heap in use does not grow with the messages deleted: 100k messages of
// about 300 bytes, which the Fake once kept to the end, add less than 2 MB
// (the records of the 10k received twice, and the samples' noise).
func TestDeletedMessagesHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("heap: not in -short")
	}
	f := NewFake()
	url := f.CreateQueue("q", nil)
	cycle(t, f, url, 1000)
	before := heapInUse()
	cycle(t, f, url, 100_000)
	after := heapInUse()
	grew := int64(after) - int64(before)
	t.Logf("heap in use %.1f MB before, %.1f MB after 100k more deleted messages: %+.1f bytes each",
		float64(before)/(1<<20), float64(after)/(1<<20), float64(grew)/100_000)
	if grew > 2<<20 {
		t.Errorf("heap grew by %.1f MB over 100k deleted messages: the Fake keeps them", float64(grew)/(1<<20))
	}
	runtime.KeepAlive(f)
}

// heapInUse is the heap in use after a garbage collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// The Fake forgets a FIFO receive's attempt ID once one of its messages is
// deleted or its visibility changed, and once 5 minutes have passed: what
// it keeps is bounded by the messages in flight, not by the receives made.
func TestAttemptIDsForgotten(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	f := NewFake()
	f.Now = func() time.Time { return now }
	url := f.CreateQueue("q.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
	receive := func(id string) []types.Message {
		t.Helper()
		out, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, ReceiveRequestAttemptId: aws.String(id)})
		if err != nil || len(out.Messages) == 0 {
			t.Fatalf("receive: %v, %d messages", err, len(out.Messages))
		}
		return out.Messages
	}
	attempts := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.queues["q.fifo"].attempts)
	}
	for i := range 100 {
		f.Send(url, "m"+strconv.Itoa(i), func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("g") })
		ms := receive("delete-" + strconv.Itoa(i))
		if i%2 == 0 {
			if _, err := f.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: ms[0].ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := f.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: &url, ReceiptHandle: ms[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
			t.Fatal(err)
		}
		receive("again-" + strconv.Itoa(i)) // the same message: the first ID is forgotten
		if _, err := f.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: ms[0].ReceiptHandle}); err == nil {
			t.Fatal("the first receive's handle still deletes")
		}
		again := receive("again-" + strconv.Itoa(i))
		if _, err := f.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: again[0].ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	if n := attempts(); n != 0 {
		t.Errorf("after 200 receives with attempt IDs whose messages were all deleted, %d IDs kept; want 0", n)
	}
	// Messages left in flight: their IDs expire.
	for i := range 3 {
		f.Send(url, "x"+strconv.Itoa(i), func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("x" + strconv.Itoa(i)) })
		receive("kept-" + strconv.Itoa(i))
	}
	if n := attempts(); n != 3 {
		t.Errorf("%d IDs kept, want the 3 whose messages are in flight", n)
	}
	now = now.Add(DeduplicationInterval)
	f.Send(url, "y", func(in *sqs.SendMessageInput) { in.MessageGroupId = aws.String("y") })
	receive("last")
	if n := attempts(); n != 1 {
		t.Errorf("5 minutes later, %d IDs kept, want only the last receive's", n)
	}
}

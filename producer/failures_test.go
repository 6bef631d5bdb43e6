package producer_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// queueAPI is what both sqstest.Fake and *sqs.Client offer a Producer.
type queueAPI interface {
	producer.API
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// fault is what happens to an entry on its first attempt.
type fault int

const (
	// failBefore: the entry is not stored, and reported failed on SQS's
	// side (InternalError).
	failBefore fault = iota + 1
	// failAfter: the entry is stored, and still reported failed on SQS's
	// side, as SQS may when it answers late.
	failAfter
	// refuse: the entry is not stored, and reported failed by the
	// sender's fault.
	refuse
)

// faultyAPI passes calls to a queue, but makes the first attempt of the
// entries whose body is in faults fail as said, and records each call's
// bodies.
type faultyAPI struct {
	queueAPI
	faults map[string]fault

	mu    sync.Mutex
	tried map[string]int // attempts by body
	calls [][]string     // the bodies of each SendMessageBatch call
}

func newFaultyAPI(api queueAPI, faults map[string]fault) *faultyAPI {
	return &faultyAPI{queueAPI: api, faults: faults, tried: map[string]int{}}
}

func (f *faultyAPI) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	var bodies []string
	fwd := *in
	fwd.Entries = nil
	var failed []types.BatchResultErrorEntry
	after := map[string]bool{} // entry IDs stored but reported failed
	for _, e := range in.Entries {
		b := aws.ToString(e.MessageBody)
		bodies = append(bodies, b)
		f.tried[b]++
		k := f.faults[b]
		if f.tried[b] > 1 {
			k = 0
		}
		switch k {
		case failBefore:
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("injected"), SenderFault: false})
			continue
		case refuse:
			failed = append(failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String("injected"), SenderFault: true})
			continue
		case failAfter:
			after[aws.ToString(e.Id)] = true
		}
		fwd.Entries = append(fwd.Entries, e)
	}
	f.calls = append(f.calls, bodies)
	f.mu.Unlock()
	out := &sqs.SendMessageBatchOutput{}
	if len(fwd.Entries) > 0 {
		var err error
		if out, err = f.queueAPI.SendMessageBatch(ctx, &fwd, opts...); err != nil {
			return nil, err
		}
	}
	var ok []types.SendMessageBatchResultEntry
	for _, s := range out.Successful {
		if after[aws.ToString(s.Id)] {
			failed = append(failed, types.BatchResultErrorEntry{Id: s.Id, Code: aws.String("InternalError"), Message: aws.String("injected after storing"), SenderFault: false})
			continue
		}
		ok = append(ok, s)
	}
	out.Successful = ok
	out.Failed = append(out.Failed, failed...)
	return out, nil
}

// bodiesOfCalls returns the bodies sent in each SendMessageBatch call.
func (f *faultyAPI) bodiesOfCalls() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// drainFake receives and deletes every message of a Fake's queue, in the
// order a consumer gets them (on FIFO queues, a group's next message once
// the one before is deleted), and returns their bodies.
func drainFake(t *testing.T, f *sqstest.Fake, url string) []string {
	t.Helper()
	var bodies []string
	for range 1000 {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return bodies
		}
		m := out.Messages[0]
		bodies = append(bodies, aws.ToString(m.Body))
		if _, err := f.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the queue does not empty")
	return nil
}

// drainQueue does what drainFake does, on the emulator: it receives until
// it has want messages (or 60 seconds have passed), then for a further
// second, to catch any more. It receives through copying(c): a receive
// whose reply was cut would hide its messages for the queue's visibility
// timeout (see copying).
func drainQueue(t *testing.T, c *sqs.Client, url string, want int) []string {
	t.Helper()
	c = copying(c)
	var bodies []string
	deadline := time.Now().Add(60 * time.Second)
	var quietUntil time.Time
	for {
		now := time.Now()
		if len(bodies) >= want && quietUntil.IsZero() {
			quietUntil = now.Add(time.Second)
		}
		if now.After(deadline) || !quietUntil.IsZero() && now.After(quietUntil) {
			return bodies
		}
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func fifoFake(t *testing.T) (*sqstest.Fake, string) {
	t.Helper()
	f := sqstest.NewFake()
	return f, f.CreateQueue("jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"})
}

func newProducerOn(t *testing.T, api producer.API, url string) *producer.Producer {
	t.Helper()
	p, err := producer.New(api, producer.Config{QueueURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// On a FIFO queue, an entry SQS failed on its side is not sent again once a
// later message of its group was sent: it would be stored behind it. Before,
// it was, and both were reported sent: received order [a2 a1].
func TestSendBatchFIFONoRetryBehindLaterMessage(t *testing.T) {
	t.Parallel()
	f, url := fifoFake(t)
	api := newFaultyAPI(f, map[string]fault{"a1": failBefore, "b1": failBefore})
	p := newProducerOn(t, api, url)
	msgs := []producer.Message{
		{Body: "a1", GroupID: "a"},
		{Body: "a2", GroupID: "a"},
		{Body: "b1", GroupID: "b"}, // failed, nothing after it: sent again
		{Body: "c1", GroupID: "c"},
	}
	res, err := p.SendBatch(context.Background(), msgs)
	if err == nil {
		t.Fatal("SendBatch reported every message sent")
	}
	if r := res[0]; r.Err == nil || !strings.Contains(r.Err.Error(), `a later message of group "a" was sent`) || !strings.Contains(r.Err.Error(), "InternalError") {
		t.Errorf("a1: %+v, want it failed, not sent again behind a2", r)
	}
	for i := 1; i < len(res); i++ {
		if res[i].Err != nil || res[i].MessageID == "" {
			t.Errorf("message %d: %+v, want it sent", i, res[i])
		}
	}
	got := drainFake(t, f, url)
	byGroup := map[byte][]string{}
	for _, b := range got {
		byGroup[b[0]] = append(byGroup[b[0]], b)
	}
	if !slices.Equal(byGroup['a'], []string{"a2"}) || !slices.Equal(byGroup['b'], []string{"b1"}) || !slices.Equal(byGroup['c'], []string{"c1"}) {
		t.Errorf("received %v, want a2 alone of group a (a1 not stored behind it), b1 once, c1", got)
	}
}

// On a FIFO queue, once a message of a group is not sent — SQS refused it,
// its attempts ran out, or its whole call failed — the group's later
// messages of the same SendBatch are not sent, and say why; other groups
// are. Before, they were sent, leaving a gap in the group.
func TestSendBatchFIFOFailedGroupStops(t *testing.T) {
	t.Parallel()
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		f, url := fifoFake(t)
		api := newFaultyAPI(f, map[string]fault{"a0": refuse})
		p := newProducerOn(t, api, url)
		// The first call: a0 and nine of group z; the second: a1, a2
		// and z9.
		msgs := []producer.Message{{Body: "a0", GroupID: "a"}}
		for i := range 9 {
			msgs = append(msgs, producer.Message{Body: fmt.Sprintf("z%d", i), GroupID: "z"})
		}
		msgs = append(msgs,
			producer.Message{Body: "a1", GroupID: "a"},
			producer.Message{Body: "a2", GroupID: "a"},
			producer.Message{Body: "z9", GroupID: "z"},
		)
		res, _ := p.SendBatch(context.Background(), msgs)
		if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "InvalidParameterValue") {
			t.Errorf("a0: %+v, want SQS's refusal", res[0])
		}
		for _, i := range []int{10, 11} {
			if !errors.Is(res[i].Err, producer.ErrEarlierMessageNotSent) || !strings.Contains(res[i].Err.Error(), `message 0 of group "a"`) {
				t.Errorf("message %d (%s): %v, want ErrEarlierMessageNotSent naming message 0", i, msgs[i].Body, res[i].Err)
			}
		}
		for i := 1; i < 10; i++ {
			if res[i].Err != nil {
				t.Errorf("message %d: %v", i, res[i].Err)
			}
		}
		if res[12].Err != nil {
			t.Errorf("z9: %v", res[12].Err)
		}
		for _, call := range api.bodiesOfCalls() {
			for _, b := range call {
				if b == "a1" || b == "a2" {
					t.Errorf("%s was sent after a0 failed: calls %v", b, api.bodiesOfCalls())
				}
			}
		}
		if got := drainFake(t, f, url); slices.ContainsFunc(got, func(b string) bool { return b[0] == 'a' }) {
			t.Errorf("received %v, want nothing of group a", got)
		}
	})
	t.Run("attempts run out", func(t *testing.T) {
		t.Parallel()
		f, url := fifoFake(t)
		p, err := producer.New(f, producer.Config{QueueURL: url, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		f.FailEntries(sqstest.OpSendMessageBatch, "InternalError", false, 1) // a0, the first entry
		msgs := []producer.Message{{Body: "a0", GroupID: "a"}}
		for i := range 9 {
			msgs = append(msgs, producer.Message{Body: fmt.Sprintf("z%d", i), GroupID: "z"})
		}
		msgs = append(msgs, producer.Message{Body: "a1", GroupID: "a"})
		res, _ := p.SendBatch(context.Background(), msgs)
		if res[0].Err == nil || !errors.Is(res[10].Err, producer.ErrEarlierMessageNotSent) {
			t.Errorf("a0: %v; a1: %v; want a0 failed and a1 not sent", res[0].Err, res[10].Err)
		}
		if got := drainFake(t, f, url); slices.Contains(got, "a1") {
			t.Errorf("received %v, want no a1 without a0", got)
		}
	})
	t.Run("call failed", func(t *testing.T) {
		t.Parallel()
		f, url := fifoFake(t)
		p := newProducerOn(t, f, url)
		f.FailNext(sqstest.OpSendMessageBatch, &smithy.GenericAPIError{Code: "ServiceUnavailable", Message: "down"}, 1)
		var msgs []producer.Message
		for i := range 12 { // two calls: a0..a9, then a10, a11
			msgs = append(msgs, producer.Message{Body: fmt.Sprintf("a%d", i), GroupID: "a"})
		}
		msgs = append(msgs, producer.Message{Body: "b0", GroupID: "b"})
		res, _ := p.SendBatch(context.Background(), msgs)
		for i := range 10 {
			if res[i].Err == nil || !strings.Contains(res[i].Err.Error(), "ServiceUnavailable") {
				t.Errorf("message %d: %v, want the call's error", i, res[i].Err)
			}
		}
		for _, i := range []int{10, 11} {
			if !errors.Is(res[i].Err, producer.ErrEarlierMessageNotSent) {
				t.Errorf("message %d: %v, want ErrEarlierMessageNotSent", i, res[i].Err)
			}
		}
		if res[12].Err != nil {
			t.Errorf("b0, of another group: %v", res[12].Err)
		}
		if got := drainFake(t, f, url); !slices.Equal(got, []string{"b0"}) {
			t.Errorf("received %v, want b0 alone", got)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		t.Parallel()
		f, url := fifoFake(t)
		p := newProducerOn(t, f, url)
		res, _ := p.SendBatch(context.Background(), []producer.Message{
			{Body: "a0", GroupID: "a", Delay: time.Second}, // FIFO queues take no per-message delay
			{Body: "a1", GroupID: "a"},
			{Body: "b0", GroupID: "b"},
		})
		if res[0].Err == nil || !errors.Is(res[1].Err, producer.ErrEarlierMessageNotSent) || res[2].Err != nil {
			t.Errorf("results %+v: want a0 invalid, a1 not sent, b0 sent", res)
		}
	})
}

// The same on the local emulator: an entry of group a that SQS fails on its
// side while the next one of the group is stored is not sent again behind
// it; the group's order holds.
func TestSendBatchFIFOOrderEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{FIFO: true, ContentDedup: true})
	api := newFaultyAPI(c, map[string]fault{"a1": failBefore})
	p := newProducerOn(t, api, q.URL)
	res, _ := p.SendBatch(context.Background(), []producer.Message{
		{Body: "a1", GroupID: "a"}, {Body: "a2", GroupID: "a"}, {Body: "a3", GroupID: "a"},
	})
	if res[0].Err == nil || res[1].Err != nil || res[2].Err != nil {
		t.Errorf("results %+v: want a1 failed, a2 and a3 sent", res)
	}
	if got := drainQueue(t, c, q.URL, 2); !slices.Equal(got, []string{"a2", "a3"}) {
		t.Errorf("received %v, want [a2 a3]: a1 not stored behind them", got)
	}
}

// limitedAPI hides GetQueueAttributes: the Producer cannot read the queue's
// MaximumMessageSize, as with a role allowed sqs:SendMessage only.
type limitedAPI struct{ api producer.API }

func (l limitedAPI) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return l.api.SendMessage(ctx, in, opts...)
}

func (l limitedAPI) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	return l.api.SendMessageBatch(ctx, in, opts...)
}

// countingAPI counts SendMessageBatch calls and the BatchRequestTooLong
// errors among them.
type countingAPI struct {
	queueAPI
	mu              sync.Mutex
	calls, tooLong  int
	largestAccepted int // bytes of bodies in the largest call that succeeded
}

func (c *countingAPI) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out, err := c.queueAPI.SendMessageBatch(ctx, in, opts...)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	var tl *types.BatchRequestTooLong
	if errors.As(err, &tl) {
		c.tooLong++
	}
	if err == nil {
		n := 0
		for _, e := range in.Entries {
			n += len(aws.ToString(e.MessageBody))
		}
		c.largestAccepted = max(c.largestAccepted, n)
	}
	return out, err
}

func (c *countingAPI) counts() (calls, tooLong, largest int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, c.tooLong, c.largestAccepted
}

func hundredKiB(n int) []producer.Message {
	msgs := make([]producer.Message, n)
	for i := range msgs {
		msgs[i].Body = strings.Repeat(strconv.Itoa(i), 100<<10)
	}
	return msgs
}

// Batches are sized by the queue's MaximumMessageSize, read from the queue:
// three messages of 100 KiB go to a queue of 256 KiB in two calls, none
// refused. Before, one call of 300 KiB failed all three with
// BatchRequestTooLong, although each alone fits.
func TestSendBatchSizedByQueueLimit(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("small", map[string]string{"MaximumMessageSize": "262144"})
	api := &countingAPI{queueAPI: f}
	p := newProducerOn(t, api, url)
	res, err := p.SendBatch(context.Background(), hundredKiB(3))
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for i, r := range res {
		if r.MessageID == "" {
			t.Errorf("message %d: %+v", i, r)
		}
	}
	if calls, tooLong, largest := api.counts(); tooLong != 0 || calls != 2 || largest > 262144 {
		t.Errorf("%d calls, %d refused as too long, the largest %d bytes; want 2 calls within 256 KiB, none refused", calls, tooLong, largest)
	}
	if v, _, _ := f.Depth(url); v != 3 {
		t.Errorf("%d messages in the queue, want 3", v)
	}

	// Config.MaxMessageSize says the same without a read.
	p, err = producer.New(limitedAPI{f}, producer.Config{QueueURL: url, MaxMessageSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.SendBatch(context.Background(), hundredKiB(3)); err != nil {
		t.Errorf("SendBatch with Config.MaxMessageSize: %v", err)
	}
	// A message over the queue's limit is refused before any call.
	before, _, _ := api.counts()
	_, err = producer.New(f, producer.Config{QueueURL: url, MaxMessageSize: 100})
	if err == nil || !strings.Contains(err.Error(), "MaxMessageSize 100 is not in 1024..1048576") {
		t.Errorf("New with MaxMessageSize 100: %v", err)
	}
	p = newProducerOn(t, api, url)
	big := producer.Message{Body: strings.Repeat("x", 300<<10)}
	if _, err := p.Send(context.Background(), big); err == nil || !strings.Contains(err.Error(), "over the queue's MaximumMessageSize of 262144") {
		t.Errorf("Send of 300 KiB to a queue of 256 KiB: %v", err)
	}
	res, _ = p.SendBatch(context.Background(), []producer.Message{big})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "over the queue's MaximumMessageSize of 262144") {
		t.Errorf("SendBatch of 300 KiB to a queue of 256 KiB: %+v", res[0])
	}
	if after, _, _ := api.counts(); after != before {
		t.Errorf("%d calls for messages refused before sending", after-before)
	}
}

// When the queue's limit cannot be read, a call SQS refuses as too long is
// split and sent again, and later calls are kept below it.
func TestSendBatchSplitsOnBatchRequestTooLong(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("small", map[string]string{"MaximumMessageSize": "262144"})
	api := &countingAPI{queueAPI: f}
	p := newProducerOn(t, limitedAPI{api}, url)
	res, err := p.SendBatch(context.Background(), hundredKiB(3))
	if err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	for i, r := range res {
		if r.MessageID == "" {
			t.Errorf("message %d: %+v", i, r)
		}
	}
	calls, tooLong, _ := api.counts()
	if tooLong != 1 || calls != 3 {
		t.Errorf("%d calls, %d refused as too long; want 3: the refused one, then its halves", calls, tooLong)
	}
	if _, err := p.SendBatch(context.Background(), hundredKiB(3)); err != nil {
		t.Fatalf("second SendBatch: %v", err)
	}
	if _, again, _ := api.counts(); again != tooLong {
		t.Errorf("the second SendBatch made %d calls refused as too long, want none", again-tooLong)
	}
	if v, _, _ := f.Depth(url); v != 6 {
		t.Errorf("%d messages in the queue, want 6", v)
	}
	// One message alone too long for the call is reported, not split.
	f2 := sqstest.NewFake()
	url2 := f2.CreateQueue("tiny", map[string]string{"MaximumMessageSize": "1024"})
	p2 := newProducerOn(t, limitedAPI{f2}, url2)
	res, _ = p2.SendBatch(context.Background(), []producer.Message{{Body: strings.Repeat("x", 2048)}})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "BatchRequestTooLong") {
		t.Errorf("one message over the limit: %+v, want BatchRequestTooLong", res[0])
	}
}

// On the local emulator: a queue of 256 KiB gets three messages of 100 KiB
// in calls within its limit, and a message over its limit is refused
// before any call.
func TestSendBatchQueueLimitEmulator(t *testing.T) {
	t.Parallel()
	var counter localtest.Counter
	c := localtest.NewCountingSQS(t, &counter)
	name := localtest.UniqueName(t, false)
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: &name, Attributes: map[string]string{"MaximumMessageSize": "262144"}})
	if err != nil {
		t.Fatal(err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: &url}) })
	api := &countingAPI{queueAPI: c}
	p := newProducerOn(t, api, url)
	if _, err := p.SendBatch(context.Background(), hundredKiB(3)); err != nil {
		t.Fatalf("SendBatch: %v", err)
	}
	if calls, tooLong, largest := api.counts(); calls != 2 || tooLong != 0 || largest > 262144 {
		t.Errorf("%d calls, %d too long, largest %d bytes; want 2 calls within 256 KiB", calls, tooLong, largest)
	}
	counter.Reset()
	res, _ := p.SendBatch(context.Background(), []producer.Message{{Body: strings.Repeat("x", 300<<10)}, {Body: "small"}})
	if res[0].Err == nil || !strings.Contains(res[0].Err.Error(), "over the queue's MaximumMessageSize of 262144") || res[1].Err != nil {
		t.Errorf("results %+v: want the 300 KiB message refused before sending, the small one sent", res)
	}
	if n := counter.Get("SendMessageBatch"); n != 1 {
		t.Errorf("%d SendMessageBatch calls, want 1, for the small message", n)
	}
	got := drainQueue(t, c, url, 4)
	if len(got) != 4 {
		t.Errorf("received %d messages, want 4", len(got))
	}

	// A call over the limit fails as the modeled BatchRequestTooLong,
	// which SendBatch splits on.
	var entries []types.SendMessageBatchRequestEntry
	for i := range 3 {
		entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(strings.Repeat("x", 400<<10))})
	}
	_, err = c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
	var tooLong *types.BatchRequestTooLong
	if !errors.As(err, &tooLong) {
		t.Errorf("a call of 1.2 MiB: %v, want *types.BatchRequestTooLong", err)
	}
}

// A message whose entry SQS stored but reported failed on its side is sent
// again and delivered twice on a standard queue: Result's documentation
// says so, and points to idempotency keys.
func TestResultDocumentsDuplicates(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	url := f.CreateQueue("jobs", nil)
	api := newFaultyAPI(f, map[string]fault{"job": failAfter})
	p := newProducerOn(t, api, url)
	res, err := p.SendBatch(context.Background(), []producer.Message{{Body: "job", IdempotencyKey: "job-1"}})
	if err != nil || res[0].MessageID == "" {
		t.Fatalf("SendBatch: %+v, %v", res, err)
	}
	var keys []string
	for range 2 {
		out, err := f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10, MessageAttributeNames: []string{"All"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range out.Messages {
			keys = append(keys, aws.ToString(m.MessageAttributes[producer.IdempotencyKeyAttribute].StringValue))
		}
	}
	if !slices.Equal(keys, []string{"job-1", "job-1"}) {
		t.Errorf("received the keys %v, want the message twice, with its key each time", keys)
	}

	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "producer.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := doc.NewFromFiles(fset, []*ast.File{file}, "github.com/sqsworker/sqsworker/producer")
	if err != nil {
		t.Fatal(err)
	}
	var resultDoc string
	for _, typ := range pkg.Types {
		if typ.Name == "Result" {
			resultDoc = typ.Doc
		}
	}
	for _, want := range []string{"twice", "standard queue", "IdempotencyKey", "cut short", "deduplication", "answer was lost", "process that dies"} {
		if !strings.Contains(resultDoc, want) {
			t.Errorf("Result's documentation does not mention %q:\n%s", want, resultDoc)
		}
	}
	// A message reported sent may be stored twice (TestSendBatchLostReply).
	if strings.Contains(resultDoc, "stored the message, once") {
		t.Errorf("Result's documentation says a message reported sent was stored once:\n%s", resultDoc)
	}
}

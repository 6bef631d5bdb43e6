package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/sqstest"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/worker"
)

// syncBuffer is a bytes.Buffer for a logger that handlers share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A store request DynamoDB refused for the store's configuration (the table
// missing, access denied, credentials refused, a key schema that does not
// fit) is no fault of the job: every request returns it marked
// sqsworker.Unavailable, matching ErrMisconfigured and wrapping DynamoDB's
// error, with a message naming the table and the fix.
func TestStoreMarksMisconfiguration(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		err error
		fix string
	}{
		{httpErr(400, &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")}), "create it"},
		{httpErr(400, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: dynamodb:PutItem"}), "dynamodb:PutItem, dynamodb:UpdateItem"},
		{httpErr(400, &smithy.GenericAPIError{Code: "ValidationException", Message: "The provided key element does not match the schema"}), "partition key"},
		{httpErr(400, &smithy.GenericAPIError{Code: "UnrecognizedClientException"}), "credentials"},
	} {
		s, err := NewDynamoStore(ctx, failingAPI{c.err}, StoreConfig{Table: "orders-idem"})
		if err != nil {
			t.Fatal(err)
		}
		_, _, claimErr := s.Claim(ctx, "k", "h", time.Now().Add(time.Minute), Receive{})
		_, commitErr := s.CommitWrites(ctx, Commit{Key: "k", Token: "tok", At: time.Now()})
		errs := map[string]error{
			"Claim":       claimErr,
			"Complete":    s.Complete(ctx, "k", "tok", nil),
			"Release":     s.Release(ctx, "k", "tok"),
			"ExtendLease": s.ExtendLease(ctx, "k", "tok", time.Now()),
		}
		if code := errCode(c.err); code != "ValidationException" {
			// A ValidationException of a commit is the handler's
			// writes' (the claim passed, so the table fits).
			errs["CommitWrites"] = commitErr
		}
		for op, err := range errs {
			if !sqsworker.IsUnavailable(err) || !errors.Is(err, c.err) {
				t.Errorf("%s failing with %v: %v; want wrapped and Unavailable", op, c.err, err)
				continue
			}
			if !errors.Is(err, ErrMisconfigured) || !strings.Contains(err.Error(), "orders-idem") || !strings.Contains(err.Error(), c.fix) {
				t.Errorf("%s failing with %v: %v; want ErrMisconfigured naming the table and the fix (%q)", op, c.err, err, c.fix)
			}
		}
	}
}

// A ValidationException of a completion that saves a result is the result's
// (too large for the item, say), and a commit's with writes is the writes':
// neither is taken for the table's configuration.
func TestValidationOfResultOrWritesNotMisconfiguration(t *testing.T) {
	ctx := context.Background()
	s, err := NewDynamoStore(ctx, failingAPI{httpErr(400, &smithy.GenericAPIError{Code: "ValidationException"})}, StoreConfig{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, "k", "tok", []byte("result")); errors.Is(err, ErrMisconfigured) || sqsworker.IsUnavailable(err) {
		t.Errorf("completion with a result refused as invalid: %v; want a plain error", err)
	}
	_, err = s.CommitWrites(ctx, Commit{Key: "k", Token: "tok", At: time.Now(), Writes: []types.TransactWriteItem{effect("e")}})
	if errors.Is(err, ErrMisconfigured) || sqsworker.IsUnavailable(err) {
		t.Errorf("commit with writes refused as invalid: %v; want a plain error", err)
	}
}

func errCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// A table that is missing: every claim fails as Unavailable (the breaker
// counts it, the job is never dead-lettered for it), the handler never
// runs, and one error is logged however many jobs fail, until a claim
// succeeds again.
func TestMisconfiguredTableLoggedOnce(t *testing.T) {
	ctx := context.Background()
	api := &switchAPI{err: httpErr(400, &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")})}
	api.failing.Store(true)
	s, err := NewDynamoStore(ctx, api, StoreConfig{Table: "orders-idem"})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	g, _ := New(s, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	runs := 0
	h := g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs++; return nil }))
	m := func(k string) *sqsworker.Message {
		return &sqsworker.Message{ID: "id-" + k, Body: "b", MessageAttributes: map[string]sqsworker.MessageAttribute{
			KeyAttribute: {DataType: "String", StringValue: k}}}
	}
	for i := range 5 {
		err := h.HandleMessage(ctx, m(string(rune('a'+i))))
		var p *sqsworker.PermanentError
		if !sqsworker.IsUnavailable(err) || errors.As(err, &p) || !errors.Is(err, ErrMisconfigured) {
			t.Fatalf("claim on a missing table: %v; want Unavailable, not Permanent, matching ErrMisconfigured", err)
		}
	}
	if runs != 0 {
		t.Errorf("handler ran %d times without a claim", runs)
	}
	out := logs.String()
	if n := strings.Count(out, "level=ERROR"); n != 1 || !strings.Contains(out, "orders-idem") || !strings.Contains(out, "create it") {
		t.Errorf("logs after 5 refused claims (%d errors), want one error naming the table and the fix:\n%s", n, out)
	}
	api.heal()
	if err := h.HandleMessage(ctx, m("z")); err != nil || runs != 1 {
		t.Errorf("after the table was created: %v (runs %d)", err, runs)
	}
	if !strings.Contains(logs.String(), "answers again") {
		t.Errorf("no note that the table answers again:\n%s", logs.String())
	}
	api.err = httpErr(400, &smithy.GenericAPIError{Code: "AccessDeniedException"})
	api.failing.Store(true)
	_ = h.HandleMessage(ctx, m("y"))
	if n := strings.Count(logs.String(), "level=ERROR"); n != 2 {
		t.Errorf("%d errors logged, want a second one for the second misconfiguration:\n%s", n, logs.String())
	}
}

// switchAPI is a DynamoAPI that fails every write with err while failing,
// and accepts every request once healed (a claim, a completion or a
// release then succeeds).
type switchAPI struct {
	failingAPI
	err     error
	failing atomic.Bool
}

func (a *switchAPI) heal() { a.failing.Store(false) }

func (a *switchAPI) fault() error {
	if a.failing.Load() {
		return a.err
	}
	return nil
}

func (a *switchAPI) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := a.fault(); err != nil {
		return nil, err
	}
	return &dynamodb.PutItemOutput{}, nil
}

func (a *switchAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if err := a.fault(); err != nil {
		return nil, err
	}
	return &dynamodb.UpdateItemOutput{}, nil
}

func (a *switchAPI) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if err := a.fault(); err != nil {
		return nil, err
	}
	return &dynamodb.DeleteItemOutput{}, nil
}

func (a *switchAPI) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if err := a.fault(); err != nil {
		return nil, err
	}
	return &dynamodb.TransactWriteItemsOutput{}, nil
}

// effect is a write of the handler's on item id of table "effects".
func effect(id string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:        aws.String("effects"),
		Key:              map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression: aws.String("ADD applied :one"),
	}}
}

// The same on the fake SQS, with a DynamoDB that denies access to the
// table and then grants it: nothing dead-lettered under a redrive policy
// of maxReceiveCount 2, the breaker opens, every job runs once after.
func TestFakeDeniedTableWaitsNotDeadLettered(t *testing.T) {
	t.Parallel()
	f := sqstest.NewFake()
	dlqURL := f.CreateQueue("dlq", nil)
	url := f.CreateQueue("q", map[string]string{"VisibilityTimeout": "2",
		"RedrivePolicy": `{"deadLetterTargetArn":"` + sqstest.QueueARN("dlq") + `","maxReceiveCount":2}`})
	api := &switchAPI{err: httpErr(400, &smithy.GenericAPIError{Code: "AccessDeniedException", Message: "not authorized to perform: dynamodb:PutItem"})}
	api.failing.Store(true)
	s, err := NewDynamoStore(context.Background(), api, StoreConfig{Table: "orders-idem"})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := New(s, Config{Logger: slog.New(slog.DiscardHandler)})
	var mu sync.Mutex
	ran := map[string]int{}
	h := g.Middleware(sqsworker.HandlerFunc(func(_ context.Context, m *sqsworker.Message) error {
		mu.Lock()
		defer mu.Unlock()
		ran[m.Body]++
		return nil
	}))
	for i := range 6 {
		f.Send(url, fmt.Sprint("job ", i), func(in *sqs.SendMessageInput) {
			in.MessageAttributes = map[string]sqstypes.MessageAttributeValue{
				KeyAttribute: {DataType: aws.String("String"), StringValue: aws.String(fmt.Sprint("k", i))}}
		})
	}
	var wlogs syncBuffer
	w, err := worker.New(f, worker.Config{QueueURL: url, Concurrency: 2, WaitTime: time.Second, Logger: slog.New(slog.NewTextHandler(&wlogs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Backoff: sqsworker.ExponentialBackoff{Base: 100 * time.Millisecond, Cap: 500 * time.Millisecond},
		Breaker: sqsworker.BreakerConfig{Threshold: 3, ProbeInterval: 300 * time.Millisecond, MaxProbeInterval: 600 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background(), h) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("worker logs:\n%s", wlogs.String())
		}
	}()
	localtest.Eventually(t, 60*time.Second, func() bool { return g.Stats().StoreErrors >= 12 }, "claims not tried: %+v", g.Stats())
	if v, fl, d := f.Depth(dlqURL); v+fl+d != 0 {
		t.Errorf("while access was denied: %d messages dead-lettered", v+fl+d)
	}
	if st := w.Stats(); st.BreakerOpens == 0 {
		t.Errorf("while access was denied: worker %+v; want the breaker opened", st)
	}
	api.heal()
	localtest.Eventually(t, 60*time.Second, func() bool { v, fl, d := f.Depth(url); return v+fl+d == 0 }, "not drained: %+v", w.Stats())
	mu.Lock()
	defer mu.Unlock()
	for i := range 6 {
		if n := ran[fmt.Sprint("job ", i)]; n != 1 {
			t.Errorf("job %d ran %d times, want 1", i, n)
		}
	}
	if v, fl, d := f.Depth(dlqURL); v+fl+d != 0 {
		t.Errorf("%d messages dead-lettered", v+fl+d)
	}
}

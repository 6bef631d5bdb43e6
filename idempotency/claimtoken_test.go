package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// Defect 3: the response to a claim is lost and the SDK retries the PutItem,
// whose condition then fails on the caller's own item: that is the caller's
// claim, and the handler runs at once instead of being postponed.
func TestLostClaimResponseNotPostponed(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	store, _ := proxiedStore(t, p, localtest.NewDynamoDB(t))
	p.setRule(func(op string, n int) fault {
		if op == "PutItem" && n == 1 {
			return dropResponse
		}
		return forward
	})
	g, _ := idempotency.New(store, idempotency.Config{Logger: quiet()})
	var runs atomic.Int64
	work := sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { runs.Add(1); return nil })
	err := g.Middleware(work).HandleMessage(context.Background(), msg("lost-response", "payload"))
	if n := p.requests("PutItem"); n < 2 {
		t.Fatalf("%d PutItem requests: the client did not retry the claim", n)
	}
	if err != nil || runs.Load() != 1 {
		t.Errorf("claim whose first response was lost: %v, %d runs; want the handler run at once", err, runs.Load())
	}
	if s := g.Stats(); s.Claimed != 1 || s.InProgress != 0 {
		t.Errorf("stats %+v", s)
	}
	// The completed record is the one the retried claim found.
	if err := g.Middleware(work).HandleMessage(context.Background(), msg("lost-response", "payload")); err != nil || runs.Load() != 1 {
		t.Errorf("duplicate: %v, %d runs", err, runs.Load())
	}
}

// retriedPutItem is a DynamoAPI whose PutItem acts as a retried request
// whose first attempt's response was lost: the item is written, and the
// condition fails on it, which comes back with ALL_OLD.
type retriedPutItem struct {
	idempotency.DynamoAPI
	other bool // the item found is another holder's
}

func (f *retriedPutItem) PutItem(_ context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	old := in.Item
	if f.other {
		old = map[string]ddbtypes.AttributeValue{}
		for k, v := range in.Item {
			old[k] = v
		}
		old["lease_token"] = &ddbtypes.AttributeValueMemberS{Value: "another-holder"}
	}
	return nil, &ddbtypes.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"), Item: old}
}

func (f *retriedPutItem) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{Table: &ddbtypes.TableDescription{
		KeySchema:            []ddbtypes.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: ddbtypes.KeyTypeHash}},
		AttributeDefinitions: []ddbtypes.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: ddbtypes.ScalarAttributeTypeS}},
	}}, nil
}

// Defect 3, without the network: a failed condition on an item holding the
// caller's own token is the caller's claim; on another's, a duplicate.
func TestClaimRecognisesOwnToken(t *testing.T) {
	for _, other := range []bool{false, true} {
		s, err := idempotency.NewDynamoStore(context.Background(), &retriedPutItem{other: other}, idempotency.StoreConfig{Table: "t"})
		if err != nil {
			t.Fatal(err)
		}
		token, existing, err := s.Claim(context.Background(), "k", "h", time.Now().Add(time.Minute), idempotency.Receive{})
		switch {
		case err != nil:
			t.Errorf("other %v: %v", other, err)
		case !other && (token == "" || existing != nil):
			t.Errorf("own item: token %q, existing %+v; want the claim", token, existing)
		case other && (token != "" || existing == nil || existing.Token != "another-holder"):
			t.Errorf("another's item: token %q, existing %+v; want the other's record", token, existing)
		}
	}
}

// A takeover claim whose response is lost: the SDK retries the PutItem,
// whose condition then fails on the taker's own item (its receive count no
// longer below the holder's). That is the taker's claim, not a duplicate of
// it: the key is its, at once.
func TestLostTakeOverResponseIsTheClaim(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	store, direct := proxiedStore(t, p, localtest.NewDynamoDB(t))
	ctx := context.Background()
	until := time.Now().Add(time.Hour)
	if _, _, err := direct.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 1}); err != nil {
		t.Fatal(err)
	}
	p.setRule(func(op string, n int) fault {
		if op == "PutItem" && n == 1 {
			return dropResponse
		}
		return forward
	})
	token, existing, err := store.Claim(ctx, "k", "h", until, idempotency.Receive{MessageID: "m1", Count: 2, LapsedBy: until.Add(time.Hour)})
	if n := p.requests("PutItem"); n < 2 {
		t.Fatalf("%d PutItem requests: the client did not retry the claim", n)
	}
	if err != nil || existing != nil || token == "" {
		t.Fatalf("takeover whose first response was lost: %q, %+v, %v; want the claim", token, existing, err)
	}
	if _, held, err := direct.Claim(ctx, "k", "h", until, idempotency.Receive{}); err != nil || held == nil || held.Token != token ||
		held.Holder != (idempotency.Receive{MessageID: "m1", Count: 2}) {
		t.Errorf("the key after the takeover: %+v, %v; want it held by the taker's token and receive", held, err)
	}
}

// The takeover of a claim made with another Grace takes a second PutItem
// (the first is refused on the Grace it pins); when that one's response is
// lost, the SDK's retry fails on the taker's own item, and the claim is the
// taker's all the same.
func TestLostSecondTakeOverResponseIsTheClaim(t *testing.T) {
	t.Parallel()
	p := startFaultProxy(t)
	store, direct := proxiedStore(t, p, localtest.NewDynamoDB(t))
	ctx := context.Background()
	now := time.Now()
	// The holder's deadline 10s past, its lease 30s after it, of which it
	// recorded 25s: taken over by that Grace, not by the taker's 5s.
	lease := now.Add(20 * time.Second)
	if _, _, err := direct.Claim(ctx, "k", "h", lease, idempotency.Receive{MessageID: "m1", Count: 1, Grace: 25 * time.Second}); err != nil {
		t.Fatal(err)
	}
	p.setRule(func(op string, n int) fault {
		if op == "PutItem" && n == 2 {
			return dropResponse
		}
		return forward
	})
	by := idempotency.Receive{MessageID: "m1", Count: 2, Grace: 5 * time.Second, LapsedBy: now.Add(-time.Second)}
	token, existing, err := store.Claim(ctx, "k", "h", now.Add(time.Hour), by)
	if n := p.requests("PutItem"); n < 3 {
		t.Fatalf("%d PutItem requests: want the refused one, the second and the SDK's retry of it", n)
	}
	if err != nil || existing != nil || token == "" {
		t.Fatalf("takeover whose second response was lost: %q, %+v, %v; want the claim", token, existing, err)
	}
	if _, held, err := direct.Claim(ctx, "k", "h", now, idempotency.Receive{}); err != nil || held == nil || held.Token != token ||
		held.Holder != (idempotency.Receive{MessageID: "m1", Count: 2, Grace: 5 * time.Second}) {
		t.Errorf("the key after the takeover: %+v, %v; want it held by the taker's token, receive and Grace", held, err)
	}
}

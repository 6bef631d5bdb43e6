package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsworker/sqsworker"
)

func opErr(err error) error {
	return &smithy.OperationError{ServiceID: "DynamoDB", OperationName: "PutItem", Err: err}
}

func httpErr(status int, err error) error {
	return opErr(&smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status}}, Err: err})
}

func cancelled(codes ...string) error {
	e := &types.TransactionCanceledException{}
	for _, c := range codes {
		e.CancellationReasons = append(e.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
	}
	return httpErr(400, e)
}

// DynamoDB unreachable, slow, throttled or failing is an outage; a request
// refused for what it asks, contention, or a caller giving up is not.
func TestIsOutage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{httpErr(400, &types.ProvisionedThroughputExceededException{}), true},
		{httpErr(400, &smithy.GenericAPIError{Code: "ThrottlingException", Fault: smithy.FaultClient}), true},
		{httpErr(400, &types.RequestLimitExceeded{}), true},
		{httpErr(500, &types.InternalServerError{}), true},
		{httpErr(503, &smithy.GenericAPIError{Code: "ServiceUnavailable"}), true},
		{httpErr(502, errors.New("bad gateway")), true},
		{opErr(&smithyhttp.RequestSendError{Err: errors.New("dial tcp: connect: connection refused")}), true},
		{opErr(&smithy.DeserializationError{Err: errors.New("unexpected EOF")}), true},
		{opErr(errors.Join(errors.New("connection reset"), fmt.Errorf("failed to get rate limit token, %w", ratelimit.QuotaExceededError{}))), true},
		{fmt.Errorf("request: %w", context.DeadlineExceeded), true},
		{cancelled("None", "ThrottlingError"), true},
		{cancelled("None", "ProvisionedThroughputExceeded"), true},

		{cancelled("ConditionalCheckFailed", "None"), false},
		{cancelled("None", "TransactionConflict"), false},
		{httpErr(400, &types.TransactionConflictException{}), false},
		{httpErr(400, &smithy.GenericAPIError{Code: "ValidationException"}), false},
		{httpErr(400, &types.ConditionalCheckFailedException{}), false},
		{httpErr(400, &types.ResourceNotFoundException{}), false},
		{httpErr(400, &smithy.GenericAPIError{Code: "AccessDeniedException"}), false},
		{fmt.Errorf("request: %w", context.Canceled), false},
		{fmt.Errorf("completing: %w", ErrNotHolder), false},
		{nil, false},
	} {
		if got := isOutage(c.err); got != c.want {
			t.Errorf("isOutage(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// failingAPI is a DynamoAPI whose writes fail with err.
type failingAPI struct{ err error }

func (f failingAPI) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, f.err
}
func (f failingAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, f.err
}
func (f failingAPI) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, f.err
}
func (f failingAPI) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, f.err
}
func (f failingAPI) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{Table: &types.TableDescription{
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
	}}, nil
}

// Every store request returns its outages marked sqsworker.Unavailable, and
// its other failures plain (but those of the store's configuration: see
// TestStoreMarksMisconfiguration).
func TestStoreMarksOutages(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{httpErr(400, &types.ProvisionedThroughputExceededException{}), true},
		{cancelled("None", "ThrottlingError"), true},
		{httpErr(400, &smithy.GenericAPIError{Code: "SerializationException"}), false},
	} {
		s, err := NewDynamoStore(ctx, failingAPI{c.err}, StoreConfig{Table: "t"})
		if err != nil {
			t.Fatal(err)
		}
		_, _, claimErr := s.Claim(ctx, "k", "h", time.Now().Add(time.Minute), Receive{})
		_, commitErr := s.CommitWrites(ctx, Commit{Key: "k", Token: "tok", At: time.Now()})
		for op, err := range map[string]error{
			"Claim":        claimErr,
			"Complete":     s.Complete(ctx, "k", "tok", nil),
			"Release":      s.Release(ctx, "k", "tok"),
			"ExtendLease":  s.ExtendLease(ctx, "k", "tok", time.Now()),
			"CommitWrites": commitErr,
		} {
			if got := sqsworker.IsUnavailable(err); got != c.want || !errors.Is(err, c.err) {
				t.Errorf("%s failing with %v: %v; want wrapped, Unavailable %v", op, c.err, err, c.want)
			}
		}
	}
}

// A claim refused because a transaction is writing the record (its holder
// committing) is postponed, not failed.
func TestClaimConflictPostponed(t *testing.T) {
	ctx := context.Background()
	s, err := NewDynamoStore(ctx, failingAPI{httpErr(400, &types.TransactionConflictException{})}, StoreConfig{Table: "t"})
	if err != nil {
		t.Fatal(err)
	}
	g, _ := New(s, Config{})
	ran := false
	err = g.Middleware(sqsworker.HandlerFunc(func(context.Context, *sqsworker.Message) error { ran = true; return nil })).
		HandleMessage(ctx, &sqsworker.Message{ID: "m", Body: "b", MessageAttributes: map[string]sqsworker.MessageAttribute{
			KeyAttribute: {DataType: "String", StringValue: "k"},
		}})
	var ra *sqsworker.RetryAfterError
	if !errors.As(err, &ra) || ra.Err != nil || ran || sqsworker.IsUnavailable(err) {
		t.Errorf("claim in conflict with a transaction: %v (ran %v), want postponed", err, ran)
	}
	if st := g.Stats(); st.InProgress != 1 {
		t.Errorf("stats %+v", st)
	}
}

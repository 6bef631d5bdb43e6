package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker/internal/sdkhttp/dynamohttp"
)

// TableAPI is the part of the DynamoDB client CreateTable calls. The calls
// of a *dynamodb.Client send each request's body from a copy of their own,
// as a DynamoStore's do.
type TableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, opts ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ TableAPI = (*dynamodb.Client)(nil)

// CreateTable creates a table for a DynamoStore with cfg's attribute names,
// on-demand billing and TTL on the expiry attribute, and waits until it is
// active. An existing table with that name is left as it is. It is meant for
// local development and tests; production tables come from the
// infrastructure code.
func CreateTable(ctx context.Context, api TableAPI, cfg StoreConfig) error {
	if cfg.Table == "" {
		return errors.New("idempotency: CreateTable: StoreConfig.Table is required")
	}
	cfg = cfg.withDefaults()
	opts := dynamohttp.Options(api)
	_, err := api.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &cfg.Table,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: &cfg.KeyAttr, AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: &cfg.KeyAttr, KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}, opts...)
	var exists *types.ResourceInUseException
	if err != nil && !errors.As(err, &exists) {
		return fmt.Errorf("idempotency: creating table %s: %w", cfg.Table, err)
	}
	for {
		out, err := api.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &cfg.Table}, opts...)
		if err != nil {
			return fmt.Errorf("idempotency: waiting for table %s: %w", cfg.Table, err)
		}
		if out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("idempotency: waiting for table %s: %w", cfg.Table, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if exists != nil {
		return nil
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName:               &cfg.Table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String(cfg.ExpiryAttr), Enabled: aws.Bool(true)},
	}, opts...)
	if err != nil {
		return fmt.Errorf("idempotency: enabling TTL on table %s: %w", cfg.Table, err)
	}
	return nil
}

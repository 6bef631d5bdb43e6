// Package idemtest sets up idempotency stores on DynamoDB Local for the
// module's tests.
package idemtest

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// NewStore creates a table of cfg's schema, named for t, on db, deletes it
// when t ends, and returns a DynamoStore over it.
func NewStore(t testing.TB, db *dynamodb.Client, cfg idempotency.StoreConfig) *idempotency.DynamoStore {
	t.Helper()
	cfg.Table = localtest.UniqueName(t, false)
	ctx := context.Background()
	if err := idempotency.CreateTable(ctx, db, cfg); err != nil {
		t.Fatal(err)
	}
	localtest.DeleteTableOnCleanup(t, db, cfg.Table)
	s, err := idempotency.NewDynamoStore(ctx, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

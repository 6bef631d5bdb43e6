package idempotency_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/sdkhttptest"
)

// The calls of a *dynamodb.Client given to NewDynamoStore, or to
// CreateTable, send each request's body from a copy of their own (see
// package sdkhttp): after every kind of write, each body the transport got
// still reads whole.
func TestGivenClientSendsCopiedBodies(t *testing.T) {
	rec := &sdkhttptest.Recorder{Answers: map[string]string{
		"CreateTable": `{}`,
		"DescribeTable": `{"Table":{"TableStatus":"ACTIVE","KeySchema":[{"AttributeName":"id","KeyType":"HASH"}],` +
			`"AttributeDefinitions":[{"AttributeName":"id","AttributeType":"S"}]}}`,
		"UpdateTimeToLive":   `{}`,
		"PutItem":            `{}`,
		"UpdateItem":         `{}`,
		"DeleteItem":         `{}`,
		"TransactWriteItems": `{}`,
	}}
	db := sdkhttptest.DynamoDB(rec)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := idempotency.StoreConfig{Table: "jobs"}
	if err := idempotency.CreateTable(ctx, db, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := idempotency.NewDynamoStore(ctx, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := s.Claim(ctx, "k", "", time.Now().Add(time.Minute), idempotency.Receive{})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"ExtendLease": s.ExtendLease(ctx, "k", token, time.Now().Add(2*time.Minute)),
		"Complete":    s.Complete(ctx, "k", token, nil),
		"Release":     s.Release(ctx, "k", token),
	} {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := s.CommitWrites(ctx, idempotency.Commit{Key: "k2", Token: token, ID: "c-1", At: time.Now()}); err != nil {
		t.Errorf("CommitWrites: %v", err)
	}
	ops := rec.CheckCopied(t)
	for _, op := range []string{"CreateTable", "DescribeTable", "UpdateTimeToLive", "PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"} {
		if !slices.Contains(ops, op) {
			t.Errorf("no %s call among %v", op, ops)
		}
	}
}

package localtest

import (
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DynamoDBEndpoint returns the DynamoDB endpoint the SDK will use from the
// environment, or "" when none is set.
func DynamoDBEndpoint() string {
	if e := os.Getenv("AWS_ENDPOINT_URL_DYNAMODB"); e != "" {
		return e
	}
	return os.Getenv("AWS_ENDPOINT_URL")
}

// RequireDynamoDB is Require for DynamoDB.
func RequireDynamoDB(t testing.TB) {
	t.Helper()
	e := DynamoDBEndpoint()
	if e == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no local DynamoDB endpoint: run the tests with `make test`, which starts the local stack")
		}
		t.Skip("no local DynamoDB endpoint (AWS_ENDPOINT_URL_DYNAMODB); run `make test`")
	}
	if !IsLoopback(e) {
		t.Fatalf("endpoint %s is not on the loopback interface; tests only talk to a local stack", e)
	}
}

// NewDynamoDB returns a DynamoDB client configured from the environment. The
// SDK's response checksum validation is off: DynamoDB Local's error replies
// carry none, which makes the SDK log a warning on every conditional check
// failure. Only ever do this for a local endpoint.
func NewDynamoDB(t testing.TB, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	RequireDynamoDB(t)
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		t.Fatalf("loading AWS config: %v", err)
	}
	opts = append([]func(*dynamodb.Options){func(o *dynamodb.Options) { o.DisableValidateResponseChecksum = true }}, opts...)
	return dynamodb.NewFromConfig(cfg, opts...)
}

// NewCountingDynamoDB returns a DynamoDB client whose requests c counts.
func NewCountingDynamoDB(t testing.TB, c *Counter) *dynamodb.Client {
	return NewDynamoDB(t, func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, c.AddTo) })
}

// DeleteTableOnCleanup deletes a table when the test ends.
func DeleteTableOnCleanup(t testing.TB, c *dynamodb.Client, name string) {
	t.Cleanup(func() { _, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: &name}) })
}

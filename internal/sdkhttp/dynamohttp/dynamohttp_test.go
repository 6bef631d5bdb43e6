package dynamohttp_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/dynamohttp"
)

type doer struct{}

func (*doer) Do(*http.Request) (*http.Response, error) { return nil, nil }

// A *dynamodb.Client gets one option, which sets a copying HTTP client over
// its own, made once; one whose HTTP client copies already, and a client
// without an Options method, get none.
func TestOptions(t *testing.T) {
	plain := &doer{}
	opts := dynamohttp.Options(dynamodb.New(dynamodb.Options{Region: "us-east-1", HTTPClient: plain}))
	if len(opts) != 1 {
		t.Fatalf("%d options, want 1", len(opts))
	}
	var a, b dynamodb.Options
	opts[0](&a)
	opts[0](&b)
	c, ok := a.HTTPClient.(*sdkhttp.Client)
	if !ok || c.Next != sdkhttp.Doer(plain) || b.HTTPClient != a.HTTPClient {
		t.Errorf("the calls go through %#v and %#v, want one *sdkhttp.Client over the client's own", a.HTTPClient, b.HTTPClient)
	}
	if opts := dynamohttp.Options(dynamodb.New(dynamodb.Options{Region: "us-east-1", HTTPClient: c})); opts != nil {
		t.Errorf("a client that copies bodies already gets %d options", len(opts))
	}
	if opts := dynamohttp.Options(struct{}{}); opts != nil {
		t.Errorf("a client without an Options method gets %d options", len(opts))
	}
}

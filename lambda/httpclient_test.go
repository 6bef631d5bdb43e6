package lambda_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsworker/sqsworker/lambda"
	"github.com/sqsworker/sqsworker/sqstest"
)

// The adapter makes the calls of an *sqs.Client it is given through an
// HTTP client that sends each request's body from a copy of its own: the
// body the transport holds can still be read whole after the SDK closed
// its own, as a transport's write goroutine may read it late.
func TestGivenClientSendsCopiedBodies(t *testing.T) {
	var mu sync.Mutex
	var sent []*http.Request
	down := smithyhttp.ClientDoFunc(func(r *http.Request) (*http.Response, error) {
		mu.Lock()
		sent = append(sent, r)
		mu.Unlock()
		return nil, errors.New("the network is down")
	})
	c := sqs.New(sqs.Options{Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
		BaseEndpoint: aws.String("http://127.0.0.1:1"), HTTPClient: down, RetryMaxAttempts: 1})
	fn := newHandler(t, jobs, lambda.Config{Client: c, DisableHeartbeat: true})
	ev := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId: "m-1", ReceiptHandle: "r-1", Body: "ok", EventSourceARN: sqstest.QueueARN("orders"),
		Attributes: map[string]string{"ApproximateReceiveCount": "1"},
	}}}
	_, _ = fn(context.Background(), ev)
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 {
		t.Fatal("the adapter made no call through the client's HTTP client")
	}
	for _, r := range sent {
		b, err := io.ReadAll(r.Body)
		if err != nil || len(b) == 0 || int64(len(b)) != r.ContentLength {
			t.Errorf("%s: the transport's body reads %d bytes of %d, %v, after the SDK closed its own", r.Header.Get("X-Amz-Target"), len(b), r.ContentLength, err)
		}
	}
}

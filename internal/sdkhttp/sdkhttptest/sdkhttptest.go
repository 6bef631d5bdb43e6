// Package sdkhttptest checks that the components given an SDK client send
// its calls' request bodies from copies (package sdkhttp): a [Recorder] is
// the HTTP client of the client a test gives a component, and once the
// component's call has returned, [Recorder.CheckCopied] reads every
// request's body again. The SDK closes its own body when a call returns, so
// a request that did not go through an sdkhttp.Client reads empty.
package sdkhttptest

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// Recorder is an SDK client's HTTP client that records every request and
// answers it with the JSON Answers holds for its operation (such as
// "GetQueueAttributes"), or fails it as a network that is down does. It is
// safe for concurrent use.
type Recorder struct {
	// Answers are the response bodies, by operation name. Set before use.
	Answers map[string]string

	mu   sync.Mutex
	sent []*http.Request
}

// ErrDown is the error of a request Answers has no answer for.
var ErrDown = errors.New("sdkhttptest: the network is down")

// operation is the operation of an SDK request of the JSON protocols:
// X-Amz-Target is "Service.Operation".
func operation(r *http.Request) string {
	t := r.Header.Get("X-Amz-Target")
	return t[strings.LastIndexByte(t, '.')+1:]
}

// Do records req and answers it.
func (r *Recorder) Do(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.sent = append(r.sent, req)
	r.mu.Unlock()
	body, ok := r.Answers[operation(req)]
	if !ok {
		return nil, ErrDown
	}
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(bytes.NewReader([]byte(body))),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// CheckCopied fails t unless requests were recorded and the body of each
// still reads whole, ContentLength bytes. It returns the operations of the
// requests, in order.
func (r *Recorder) CheckCopied(t testing.TB) []string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sent) == 0 {
		t.Fatal("no call went through the client's HTTP client")
	}
	ops := make([]string, 0, len(r.sent))
	for _, req := range r.sent {
		ops = append(ops, operation(req))
		var b []byte
		var err error
		if req.Body != nil {
			b, err = io.ReadAll(req.Body)
		}
		if err != nil || len(b) == 0 || int64(len(b)) != req.ContentLength {
			t.Errorf("%s: the transport's body reads %d bytes of %d (%v) once the SDK closed its own: the request was not sent from a copy",
				operation(req), len(b), req.ContentLength, err)
		}
	}
	return ops
}

// SQS returns an *sqs.Client whose calls go through r, each tried once.
func SQS(r *Recorder) *sqs.Client {
	return sqs.New(sqs.Options{Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
		BaseEndpoint: aws.String("http://127.0.0.1:1"), HTTPClient: r, RetryMaxAttempts: 1})
}

// DynamoDB returns a *dynamodb.Client whose calls go through r, each tried
// once.
func DynamoDB(r *Recorder) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{Region: "us-east-1", Credentials: aws.AnonymousCredentials{},
		BaseEndpoint: aws.String("http://127.0.0.1:1"), HTTPClient: r, RetryMaxAttempts: 1})
}

package sdkhttp

import (
	"context"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// SQS is every SQS call the runtimes make: the worker's, and those of the
// Lambda adapter, which receives none. *sqs.Client is one.
type SQS interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
}

var _ SQS = (*sqs.Client)(nil)

// ForSQS returns api, or, when api is an *sqs.Client (or another client
// with an Options method), api with every call made through an HTTP client
// that
//
//   - sends each request's body from its own copy ([Client]): without it,
//     a reply that comes back before net/http's write goroutine has made its
//     last read of the body fails, and the SDK sends again a request that
//     was applied (a receive whose messages then stay hidden, a send that
//     makes a second copy);
//   - when the HTTP client is the SDK's default kind keeping fewer than n
//     idle connections per host, keeps n (n <= 0: as it is).
//
// The SDK's default keeps 10. A worker with 8 receive loops and 8
// acknowledgement batches under way uses up to 16 connections at once, and
// its handlers more when they move messages to the dead-letter queue; every
// call past the tenth would close its connection when it returned, for the
// next call to open a new one: over TLS, a handshake every few dozen
// messages. An HTTP client of another kind, one with room enough, or one
// told to keep no idle connections (DisableKeepAlives, a negative
// MaxIdleConnsPerHost) keeps its pool as it is.
func ForSQS(api SQS, n int) SQS {
	opt := option(api, n, sqsHTTP, setSQSHTTP)
	if opt == nil {
		return api
	}
	p := &pooledAPI{api: api, opt: opt}
	p.one = []func(*sqs.Options){opt}
	return p
}

// widen returns hc, or, when it is the SDK's default kind of HTTP client
// and keeps fewer than n idle connections per host, a copy of it that keeps
// n, and true.
func widen(hc Doer, n int) (Doer, bool) {
	bc, ok := hc.(*awshttp.BuildableClient)
	if !ok {
		return hc, false
	}
	t := bc.GetTransport()
	if t.DisableKeepAlives || t.MaxIdleConnsPerHost < 0 {
		return hc, false
	}
	perHost := t.MaxIdleConnsPerHost
	if perHost == 0 {
		perHost = http.DefaultMaxIdleConnsPerHost
	}
	if perHost >= n && (t.MaxIdleConns == 0 || t.MaxIdleConns >= n) {
		return hc, false
	}
	return bc.WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = max(t.MaxIdleConnsPerHost, n)
		if t.MaxIdleConns != 0 {
			t.MaxIdleConns = max(t.MaxIdleConns, n)
		}
	}), true
}

// pooledAPI makes every call of api with opt applied last.
type pooledAPI struct {
	api SQS
	opt func(*sqs.Options)
	one []func(*sqs.Options) // just opt: the options of a call that gives none
}

func (p *pooledAPI) opts(in []func(*sqs.Options)) []func(*sqs.Options) {
	if len(in) == 0 {
		return p.one // the SDK only reads the options it is given
	}
	return append(in[:len(in):len(in)], p.opt)
}

func (p *pooledAPI) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	return p.api.ReceiveMessage(ctx, in, p.opts(opts)...)
}

func (p *pooledAPI) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	return p.api.DeleteMessageBatch(ctx, in, p.opts(opts)...)
}

func (p *pooledAPI) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	return p.api.ChangeMessageVisibilityBatch(ctx, in, p.opts(opts)...)
}

func (p *pooledAPI) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, opts ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	return p.api.GetQueueAttributes(ctx, in, p.opts(opts)...)
}

func (p *pooledAPI) GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, opts ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error) {
	return p.api.GetQueueUrl(ctx, in, p.opts(opts)...)
}

func (p *pooledAPI) SendMessage(ctx context.Context, in *sqs.SendMessageInput, opts ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	return p.api.SendMessage(ctx, in, p.opts(opts)...)
}

// HTTPClient returns the HTTP client through which the calls of an api that
// ForSQS returned go, and false for any other api.
func HTTPClient(api SQS) (Doer, bool) {
	p, ok := api.(*pooledAPI)
	if !ok {
		return nil, false
	}
	var o sqs.Options
	p.opt(&o)
	return o.HTTPClient, true
}

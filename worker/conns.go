package worker

import (
	"cmp"
	"context"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// conns is how many SQS calls one queue's worker may have under way at once
// besides its handlers': its receive loops, its acknowledgement batches (as
// many as its loops, at least 4) and its heartbeat's calls
// (Heartbeat.MaxInFlight, default 4). Each handler goroutine may have one
// more under way, a dead-letter move or a delayed copy: the callers add
// the handler slots.
func conns(cfg Config) int {
	n := cfg.Pollers + max(4, cfg.Pollers)
	if !cfg.DisableHeartbeat {
		n += cmp.Or(cfg.Heartbeat.MaxInFlight, 4)
	}
	return n
}

// withConns returns api, or, when api is an *sqs.Client (or another client
// with an Options method) whose HTTP client is the SDK's default kind that
// keeps fewer than n idle connections per host, api with every call made
// through a copy of that HTTP client that keeps n.
//
// The SDK's default keeps 10. A worker with 8 receive loops and 8
// acknowledgement batches under way uses up to 16 connections at once, and
// its handlers more when they move messages to the dead-letter queue; every
// call past the tenth would close its connection when it returned, for the
// next call to open a new one: over TLS, a handshake every few dozen
// messages. An HTTP client of another kind, one with room enough, or one
// told to keep no idle connections (DisableKeepAlives, a negative
// MaxIdleConnsPerHost) is left as it is.
func withConns(api API, n int) API {
	o, ok := api.(interface{ Options() sqs.Options })
	if !ok {
		return api
	}
	bc, ok := o.Options().HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		return api
	}
	t := bc.GetTransport()
	if t.DisableKeepAlives || t.MaxIdleConnsPerHost < 0 {
		return api
	}
	perHost := t.MaxIdleConnsPerHost
	if perHost == 0 {
		perHost = http.DefaultMaxIdleConnsPerHost
	}
	if perHost >= n && (t.MaxIdleConns == 0 || t.MaxIdleConns >= n) {
		return api
	}
	wider := bc.WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConnsPerHost = max(t.MaxIdleConnsPerHost, n)
		if t.MaxIdleConns != 0 {
			t.MaxIdleConns = max(t.MaxIdleConns, n)
		}
	})
	return &pooledAPI{api: api, opt: func(o *sqs.Options) { o.HTTPClient = wider }}
}

// pooledAPI makes every call of api with opt applied last.
type pooledAPI struct {
	api API
	opt func(*sqs.Options)
}

func (p *pooledAPI) opts(in []func(*sqs.Options)) []func(*sqs.Options) {
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

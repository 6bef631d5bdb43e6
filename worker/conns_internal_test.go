package worker

import (
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// httpOf is the HTTP client the worker's calls through api use.
func httpOf(t *testing.T, api API) sdkhttp.Doer {
	t.Helper()
	p, ok := api.(*pooledAPI)
	if !ok {
		t.Fatalf("the worker calls a %T, want its calls through its own HTTP client", api)
	}
	var o sqs.Options
	p.opt(&o)
	return o.HTTPClient
}

// bodyCopied is the HTTP client under the one that copies request bodies.
func bodyCopied(t *testing.T, hc sdkhttp.Doer) sdkhttp.Doer {
	t.Helper()
	w, ok := hc.(*sdkhttp.Client)
	if !ok {
		t.Fatalf("the worker's HTTP client is a %T, want one that copies request bodies", hc)
	}
	return w.Next
}

// An HTTP client told to keep no idle connections keeps none: the worker
// does not make its calls through a copy that keeps some. The SDK's
// default client, with room for 10, is widened. Either way request bodies
// are copied.
func TestWithHTTPKeepsNoIdleConnectionsWhenTold(t *testing.T) {
	for name, opt := range map[string]func(*http.Transport){
		"DisableKeepAlives":            func(t *http.Transport) { t.DisableKeepAlives = true },
		"negative MaxIdleConnsPerHost": func(t *http.Transport) { t.MaxIdleConnsPerHost = -1 },
	} {
		bc := awshttp.NewBuildableClient().WithTransportOptions(opt)
		c := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: bc})
		if got := bodyCopied(t, httpOf(t, withHTTP(c, 20))); got != sdkhttp.Doer(bc) {
			t.Errorf("%s: the worker's calls go through %v, want the client's own", name, got)
		}
	}
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	bc, ok := bodyCopied(t, httpOf(t, withHTTP(c, 20))).(*awshttp.BuildableClient)
	if !ok || bc.GetTransport().MaxIdleConnsPerHost != 20 {
		t.Errorf("a client keeping 10 idle connections is not widened to 20: %#v", bc)
	}
}

// A client whose HTTP client copies bodies already and has room enough is
// used as it is; one of any other kind, even one that cannot be compared,
// is wrapped.
func TestWithHTTPWrapsOnce(t *testing.T) {
	ready := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: sdkhttp.Wrap(awshttp.NewBuildableClient().WithTransportOptions(
		func(t *http.Transport) { t.MaxIdleConnsPerHost = 50 }))})
	if got := withHTTP(ready, 20); got != API(ready) {
		t.Errorf("a ready client is called through a %T", got)
	}
	narrow := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: sdkhttp.Wrap(awshttp.NewBuildableClient())})
	if bc := bodyCopied(t, httpOf(t, withHTTP(narrow, 20))).(*awshttp.BuildableClient); bc.GetTransport().MaxIdleConnsPerHost != 20 {
		t.Errorf("a copying client keeping 10 is not widened")
	}
	fn := smithyhttp.ClientDoFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	f := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: fn})
	if _, ok := bodyCopied(t, httpOf(t, withHTTP(f, 20))).(smithyhttp.ClientDoFunc); !ok {
		t.Error("a function client is not the one under the copying client")
	}
}

// A MultiWorker's pool has room for every queue's receives, acknowledgement
// batches and heartbeat calls, and for the calls of the handlers of the
// whole shared pool (dead-letter moves, delayed copies).
func TestNewMultiConnsCountHandlers(t *testing.T) {
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	m, err := NewMulti(c, MultiConfig{Concurrency: 20, Queues: []QueueConfig{
		{Config: Config{QueueURL: "https://sqs.us-east-1.amazonaws.com/1/a"}, Priority: 1},
		{Config: Config{QueueURL: "https://sqs.us-east-1.amazonaws.com/1/b", Pollers: 6, DisableHeartbeat: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	// a: 1 receive loop, 4 acknowledgement batches, 4 heartbeat calls;
	// b: 6 and 6, no heartbeat; 20 handlers.
	bc := bodyCopied(t, httpOf(t, m.workers[0].api)).(*awshttp.BuildableClient)
	if got, want := bc.GetTransport().MaxIdleConnsPerHost, 1+4+4+6+6+20; got != want {
		t.Errorf("the workers' HTTP client keeps %d idle connections per host, want %d", got, want)
	}
}

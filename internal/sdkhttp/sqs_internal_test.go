package sdkhttp

import (
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// httpOf is the HTTP client the worker's calls through api use.
func httpOf(t *testing.T, api SQS) Doer {
	t.Helper()
	hc, ok := HTTPClient(api)
	if !ok {
		t.Fatalf("the calls go through a %T, want them through their own HTTP client", api)
	}
	return hc
}

// bodyCopied is the HTTP client under the one that copies request bodies.
func bodyCopied(t *testing.T, hc Doer) Doer {
	t.Helper()
	w, ok := hc.(*Client)
	if !ok {
		t.Fatalf("the worker's HTTP client is a %T, want one that copies request bodies", hc)
	}
	return w.Next
}

// An HTTP client told to keep no idle connections keeps none: the worker
// does not make its calls through a copy that keeps some. The SDK's
// default client, with room for 10, is widened. Either way request bodies
// are copied.
func TestForSQSKeepsNoIdleConnectionsWhenTold(t *testing.T) {
	for name, opt := range map[string]func(*http.Transport){
		"DisableKeepAlives":            func(t *http.Transport) { t.DisableKeepAlives = true },
		"negative MaxIdleConnsPerHost": func(t *http.Transport) { t.MaxIdleConnsPerHost = -1 },
	} {
		bc := awshttp.NewBuildableClient().WithTransportOptions(opt)
		c := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: bc})
		if got := bodyCopied(t, httpOf(t, ForSQS(c, 20))); got != Doer(bc) {
			t.Errorf("%s: the worker's calls go through %v, want the client's own", name, got)
		}
	}
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	bc, ok := bodyCopied(t, httpOf(t, ForSQS(c, 20))).(*awshttp.BuildableClient)
	if !ok || bc.GetTransport().MaxIdleConnsPerHost != 20 {
		t.Errorf("a client keeping 10 idle connections is not widened to 20: %#v", bc)
	}
}

// A client whose HTTP client copies bodies already and has room enough is
// used as it is; one of any other kind, even one that cannot be compared,
// is wrapped.
func TestForSQSWrapsOnce(t *testing.T) {
	ready := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: Wrap(awshttp.NewBuildableClient().WithTransportOptions(
		func(t *http.Transport) { t.MaxIdleConnsPerHost = 50 }))})
	if got := ForSQS(ready, 20); got != SQS(ready) {
		t.Errorf("a ready client is called through a %T", got)
	}
	narrow := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: Wrap(awshttp.NewBuildableClient())})
	if bc := bodyCopied(t, httpOf(t, ForSQS(narrow, 20))).(*awshttp.BuildableClient); bc.GetTransport().MaxIdleConnsPerHost != 20 {
		t.Errorf("a copying client keeping 10 is not widened")
	}
	fn := smithyhttp.ClientDoFunc(func(*http.Request) (*http.Response, error) { return nil, nil })
	f := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: fn})
	if _, ok := bodyCopied(t, httpOf(t, ForSQS(f, 20))).(smithyhttp.ClientDoFunc); !ok {
		t.Error("a function client is not the one under the copying client")
	}
}

package worker

import (
	"net/http"
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// An HTTP client told to keep no idle connections keeps none: the worker
// does not make its calls through a copy that keeps some.
func TestWithConnsKeepsNoIdleConnectionsWhenTold(t *testing.T) {
	for name, opt := range map[string]func(*http.Transport){
		"DisableKeepAlives":            func(t *http.Transport) { t.DisableKeepAlives = true },
		"negative MaxIdleConnsPerHost": func(t *http.Transport) { t.MaxIdleConnsPerHost = -1 },
	} {
		c := sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(opt)})
		if got := withConns(c, 20); got != API(c) {
			t.Errorf("%s: the worker's calls go through a %T, want the client as it is", name, got)
		}
	}
	// The SDK's default client, with room for 10, is widened.
	c := sqs.New(sqs.Options{Region: "us-east-1"})
	p, ok := withConns(c, 20).(*pooledAPI)
	if !ok {
		t.Fatal("a client keeping 10 idle connections is not widened to 20")
	}
	var o sqs.Options
	p.opt(&o)
	if got := o.HTTPClient.(*awshttp.BuildableClient).GetTransport().MaxIdleConnsPerHost; got != 20 {
		t.Errorf("the widened client keeps %d idle connections per host, want 20", got)
	}
}

package sdkhttp_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

// optionsOnly has the Options method of a client and nothing else.
type optionsOnly struct{ o sqs.Options }

func (c optionsOnly) Options() sqs.Options { return c.o }

// httpOfCall is the HTTP client a call given opts goes through.
func httpOfCall(opts []func(*sqs.Options)) sqs.HTTPClient {
	var o sqs.Options
	for _, f := range opts {
		f(&o)
	}
	return o.HTTPClient
}

// A client without an Options method, one without an HTTP client, and one
// whose HTTP client copies bodies already get no option; a client of any
// other HTTP client gets one option, which sets a copying client over that
// one, the same at every call.
func TestSQSOptions(t *testing.T) {
	none := map[string]any{
		"no Options method": struct{}{},
		"nil client":        nil,
		"no HTTP client":    optionsOnly{},
		"copies already":    sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: sdkhttp.Wrap(&lateReader{})}),
	}
	for name, api := range none {
		if opts := sdkhttp.SQSOptions(api); opts != nil {
			t.Errorf("%s: %d options, want none", name, len(opts))
		}
	}
	plain := &lateReader{}
	for name, api := range map[string]any{
		"*sqs.Client":          sqs.New(sqs.Options{Region: "us-east-1", HTTPClient: plain}),
		"other Options method": optionsOnly{sqs.Options{HTTPClient: plain}},
	} {
		opts := sdkhttp.SQSOptions(api)
		if len(opts) != 1 || cap(opts) != 1 {
			t.Fatalf("%s: %d options (capacity %d), want 1 (1)", name, len(opts), cap(opts))
		}
		first, ok := httpOfCall(opts).(*sdkhttp.Client)
		if !ok || first.Next != sdkhttp.Doer(plain) {
			t.Fatalf("%s: a call goes through %#v, want a *sdkhttp.Client over the client's own", name, httpOfCall(opts))
		}
		if again := httpOfCall(opts); again != sqs.HTTPClient(first) {
			t.Errorf("%s: a second call goes through another copying client: wrapped per call, want once", name)
		}
	}
}

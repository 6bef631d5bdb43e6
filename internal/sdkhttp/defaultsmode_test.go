package sdkhttp_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
	"github.com/sqsworker/sqsworker/internal/sdkhttp/dynamohttp"
)

// sdkUnder returns the SDK's HTTP client under a copying client hc.
func sdkUnder(t *testing.T, what string, hc any) *awshttp.BuildableClient {
	t.Helper()
	w, ok := hc.(*sdkhttp.Client)
	if !ok {
		t.Fatalf("%s: a call goes through a %T, want a *sdkhttp.Client", what, hc)
	}
	bc, ok := w.Next.(*awshttp.BuildableClient)
	if !ok {
		t.Fatalf("%s: the copying client sends through a %T, want the SDK's", what, w.Next)
	}
	return bc
}

// The per-call options, and ForSQS's widened client, send through the
// client's own HTTP client as the SDK set it up: with the timeouts of the
// defaults mode (in-region: connect and TLS handshake 1.1s).
func TestCallOptionsKeepDefaultsModeTimeouts(t *testing.T) {
	const want = 1100 * time.Millisecond
	sc := sqs.New(sqs.Options{Region: "eu-west-1", DefaultsMode: aws.DefaultsModeInRegion})
	dc := dynamodb.New(dynamodb.Options{Region: "eu-west-1", DefaultsMode: aws.DefaultsModeInRegion})

	so := sc.Options()
	for _, f := range sdkhttp.SQSOptions(sc) {
		f(&so)
	}
	do := dc.Options()
	for _, f := range dynamohttp.Options(dc) {
		f(&do)
	}
	hc, _ := sdkhttp.HTTPClient(sdkhttp.ForSQS(sc, 64))
	for name, c := range map[string]any{"sqs call": so.HTTPClient, "dynamodb call": do.HTTPClient, "ForSQS": hc} {
		bc := sdkUnder(t, name, c)
		if got := bc.GetDialer().Timeout; got != want {
			t.Errorf("%s: connect timeout %v, want the in-region mode's %v", name, got, want)
		}
		if got := bc.GetTransport().TLSHandshakeTimeout; got != want {
			t.Errorf("%s: TLS handshake timeout %v, want the in-region mode's %v", name, got, want)
		}
	}
	if got := sdkUnder(t, "ForSQS", hc).GetTransport().MaxIdleConnsPerHost; got != 64 {
		t.Errorf("ForSQS: %d idle connections per host, want 64", got)
	}
}

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
	p, ok := m.workers[0].api.(*pooledAPI)
	if !ok {
		t.Fatalf("the workers call a %T, want the client with a wider pool", m.workers[0].api)
	}
	var o sqs.Options
	p.opt(&o)
	// a: 1 receive loop, 4 acknowledgement batches, 4 heartbeat calls;
	// b: 6 and 6, no heartbeat; 20 handlers.
	if got, want := o.HTTPClient.(*awshttp.BuildableClient).GetTransport().MaxIdleConnsPerHost, 1+4+4+6+6+20; got != want {
		t.Errorf("the workers' HTTP client keeps %d idle connections per host, want %d", got, want)
	}
}

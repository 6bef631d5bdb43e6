package worker

import (
	"testing"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/sdkhttp"
)

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
	hc, ok := sdkhttp.HTTPClient(m.workers[0].api)
	if !ok {
		t.Fatalf("the workers call a %T, want their calls through their own HTTP client", m.workers[0].api)
	}
	bc := hc.(*sdkhttp.Client).Next.(*awshttp.BuildableClient)
	if got, want := bc.GetTransport().MaxIdleConnsPerHost, 1+4+4+6+6+20; got != want {
		t.Errorf("the workers' HTTP client keeps %d idle connections per host, want %d", got, want)
	}
}

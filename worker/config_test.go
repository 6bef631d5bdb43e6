package worker_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/worker"
)

func TestNewRejectsBadConfigNamingEveryField(t *testing.T) {
	_, err := worker.New(&sqs.Client{}, worker.Config{
		Concurrency:       -1,
		Pollers:           -2,
		MaxMessages:       11,
		WaitTime:          21 * time.Second,
		VisibilityTimeout: 13 * time.Hour,
		HandlerTimeout:    -time.Second,
		MaxReceiveCount:   -1,
		AckInterval:       -time.Millisecond,
		ShutdownTimeout:   -time.Second,
	})
	if err == nil {
		t.Fatal("New accepted a bad Config")
	}
	for _, want := range []string{"QueueURL", "Concurrency -1", "Pollers -2", "MaxMessages 11", "WaitTime 21s",
		"VisibilityTimeout 13h", "HandlerTimeout -1s", "MaxReceiveCount -1", "AckInterval -1ms", "ShutdownTimeout -1s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q:\n%v", want, err)
		}
	}
}

func TestNewRejectsFractionalSeconds(t *testing.T) {
	_, err := worker.New(&sqs.Client{}, worker.Config{QueueURL: "q", WaitTime: 1500 * time.Millisecond, VisibilityTimeout: 2500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "WaitTime 1.5s") || !strings.Contains(err.Error(), "VisibilityTimeout 2.5s") {
		t.Errorf("err = %v", err)
	}
}

func TestNewRejectsNilClient(t *testing.T) {
	if _, err := worker.New(nil, worker.Config{QueueURL: "q"}); err == nil || !strings.Contains(err.Error(), "nil SQS client") {
		t.Errorf("err = %v", err)
	}
}

func TestNewAcceptsZeroConfigWithQueue(t *testing.T) {
	if _, err := worker.New(&sqs.Client{}, worker.Config{QueueURL: "q"}); err != nil {
		t.Fatal(err)
	}
}

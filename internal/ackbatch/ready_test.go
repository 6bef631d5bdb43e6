package ackbatch

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// gateAPI holds each call until the test lets it return.
type gateAPI struct {
	started, release chan struct{}
}

func (g *gateAPI) wait() {
	g.started <- struct{}{}
	<-g.release
}

func (g *gateAPI) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	g.wait()
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.DeleteMessageBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

func (g *gateAPI) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	g.wait()
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.ChangeMessageVisibilityBatchResultEntry{Id: e.Id})
	}
	return out, nil
}

// Senders that never quite catch up (a batch always waits, however many
// are sent) keep the array of ready batches as small as the backlog: it
// does not grow with every batch ever sent.
func TestReadyStaysBoundedUnderSteadyBacklog(t *testing.T) {
	api := &gateAPI{started: make(chan struct{}), release: make(chan struct{})}
	b := New(api, Config{QueueURL: "q", Interval: time.Hour, MaxInFlight: 1})
	add := func() {
		for range MaxBatch {
			b.Add(Delete, Entry{ReceiptHandle: "h"})
		}
	}
	add()
	<-api.started // the one sender's call waits
	add()
	const batches = 10000
	for range batches {
		add() // two batches wait
		api.release <- struct{}{}
		<-api.started // the sender took one: one waits
	}
	b.mu.Lock()
	waiting, size := len(b.ready)-b.head, cap(b.ready)
	b.mu.Unlock()
	if waiting != 1 {
		t.Errorf("%d batches waiting, want 1", waiting)
	}
	if size > 64 {
		t.Errorf("the array of ready batches grew to %d for at most 2 waiting after %d batches", size, batches)
	}
	close(api.release)
	closed := make(chan error)
	go func() { closed <- b.Close(context.Background()) }()
	for {
		select {
		case <-api.started:
			continue
		case err := <-closed:
			if err != nil {
				t.Fatalf("Close = %v", err)
			}
		}
		break
	}
}

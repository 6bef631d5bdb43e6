package sqstest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker/internal/awserr"
	"github.com/sqsworker/sqsworker/sqstest"
)

// A long poll that its caller cancels fails through its context, as with
// *sqs.Client: it loses no reply (LoseReplies says so of calls failed by
// their context), and the reply still to lose is the next call's.
func TestLoseRepliesSparesCancelledLongPoll(t *testing.T) {
	f := sqstest.NewFake()
	url := f.CreateQueue("cancelled", nil)
	f.LoseReplies(sqstest.OpReceiveMessage, 1)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := f.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20})
	if !awserr.IsCanceled(err) {
		t.Errorf("a long poll cancelled by its caller: %v; want its context's error", err)
	}
	f.Send(url, "m")
	_, err = f.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &url})
	if err == nil || awserr.IsCanceled(err) || errors.Is(err, context.Canceled) {
		t.Errorf("the next receive: %v; want its reply lost", err)
	}
}

package executor_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// A FIFO job sent for "30 hours" ahead (FIFO queues take no message delay:
// another producer's sqsworker.not-before) on a queue whose redrive
// maxReceiveCount is 3, through the worker on the emulator. SQS refuses
// connections (the test's fault proxy, on the sends only) when the first
// fresh copy is sent, and lets the next through: the job costs a receive,
// runs once, not before its time, as its first attempt, and is not
// dead-lettered. Before, that copy was sent on the last receive the policy
// allows, and the refused send had the job dead-lettered without running.
func TestEmulatorFIFOHoldSurvivesARefusedCopy(t *testing.T) {
	localtest.Require(t)
	t.Parallel()
	useEmuSteps(t)
	proxy, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	if err := proxy.Refuse(); err != nil {
		t.Fatal(err)
	}
	direct := localtest.NewSQS(t)
	var refusals atomic.Int32
	api := &counting{Client: direct, sendVia: localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy.URL()) }),
		afterSend: func(err error) {
			if err != nil && refusals.Add(1) == 1 {
				if err := proxy.Pass(); err != nil {
					t.Error(err)
				}
			}
		}}
	q := localtest.NewQueue(t, direct, localtest.QueueOptions{FIFO: true, MaxReceiveCount: 3, VisibilityTimeout: 2 * time.Second})
	nb := time.Now().Add(thirty)
	if _, err := direct.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &q.URL, MessageBody: aws.String(`{"order":42}`),
		MessageGroupId: aws.String("g"), MessageDeduplicationId: aws.String("d1"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"idempotency-key":       {DataType: aws.String("String"), StringValue: aws.String("order-42")},
			"traceparent":           {DataType: aws.String("String"), StringValue: aws.String("00-trace-span-01")},
			sqsworker.AttrNotBefore: {DataType: aws.String("Number"), StringValue: aws.String(strconv.FormatInt(nb.UnixMilli(), 10))},
		}}); err != nil {
		t.Fatal(err)
	}
	var r ran
	stop := runtimes["worker"](t, api, q, r.handler(nil))
	localtest.Eventually(t, thirty+30*time.Second, func() bool {
		v, i, d := localtest.Depth(t, direct, q.URL)
		dv, di, dd := localtest.Depth(t, direct, q.DLQURL)
		return (len(r.get()) > 0 && v+i+d == 0) || dv+di+dd > 0
	}, "the job did not run, or copies are left")
	time.Sleep(time.Second)
	stop()
	if refusals.Load() == 0 {
		t.Fatal("no send was refused")
	}
	if v, i, d := localtest.Depth(t, direct, q.DLQURL); v+i+d != 0 {
		t.Fatalf("%d messages dead-lettered", v+i+d)
	}
	checkEmuRun(t, r.get(), time.UnixMilli(nb.UnixMilli()))
}

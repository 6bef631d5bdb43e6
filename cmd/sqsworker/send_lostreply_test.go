package main

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go/middleware"

	"github.com/sqsworker/sqsworker/internal/faultproxy"
	"github.com/sqsworker/sqsworker/producer"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// `send --raw` whose SendMessageBatch answer is lost, on the local SQS: the
// SDK sends the call again and the queue holds each line twice, under two
// message IDs but one generated idempotency key per line, so that the
// idempotency middleware runs each job once. Before, the two copies had no
// key, and their jobs' keys were their two message IDs.
func TestSendLostReplyCopiesShareAKey(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var batches atomic.Int32
	loseBatchReply := func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("loseBatchReply",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if _, ok := in.Parameters.(*sqs.SendMessageBatchInput); ok && batches.Add(1) == 1 {
						if err := p.LoseReplies(1); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := startCLIWith(t, ctx, strings.NewReader("a\nb\nc\n"), []rootOption{withSQSOptions(loseBatchReply)}, "send", q.URL, "--raw", "--quiet")
	if code := cli.wait(t); code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", code, cli.stdout.String(), cli.stderr.String())
	}
	if n := p.Stats().LostReplies; n != 1 {
		t.Fatalf("the proxy lost %d replies, want 1", n)
	}
	keys := map[string]map[string]int{} // body: key: copies
	for _, m := range drainAtLeast(t, c, q.URL, 6) {
		if keys[m.body] == nil {
			keys[m.body] = map[string]int{}
		}
		keys[m.body][m.attrs[producer.IdempotencyKeyAttribute].StringValue]++
	}
	seen := map[string]bool{}
	for _, b := range []string{"a", "b", "c"} {
		if len(keys[b]) != 1 {
			t.Errorf("line %q: copies by key %v, want two copies under one key", b, keys[b])
			continue
		}
		for k, n := range keys[b] {
			if !strings.HasPrefix(k, "auto:") || n != 2 || seen[k] {
				t.Errorf("line %q: %d copies under the key %q, want 2 under a generated key of its own", b, n, k)
			}
			seen[k] = true
		}
	}
}

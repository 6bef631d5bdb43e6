package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strconv"
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
	p, loseBatchReply := loseFirstBatchReplies(t, 1)
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

// `send` whose every attempt of SendMessageBatch loses its answer, on the
// local SQS: the line is reported as maybe sent, with the idempotency key
// it was generated; sent again with that key, as the report says, its
// copies are all one job. Before, the report gave no key, and a second send
// got a new one: a second job, as SQS had the first.
func TestSendMaybeSentGivesItsKey(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	_, loseEveryReply := loseFirstBatchReplies(t, 100)
	code, r := sendOneLine(t, "job-a", q.URL, loseEveryReply)
	if code == 0 || !r.MaybeSent || !strings.HasPrefix(r.IdempotencyKey, "auto:") || !strings.Contains(r.Error, `"idempotencyKey":"`+r.IdempotencyKey+`"`) {
		t.Fatalf("exit %d, result %+v; want maybe sent, with its generated key and how to send it again", code, r)
	}
	if _, stderr, code := runCLI(t, `{"body":"job-a","idempotencyKey":"`+r.IdempotencyKey+`"}`+"\n", "send", q.URL); code != 0 {
		t.Fatalf("the second send: exit %d\n%s", code, stderr)
	}
	copies := drainAtLeast(t, c, q.URL, 2) // the lost attempts' copies, and the second send's
	for _, m := range copies {
		if k := m.attrs[producer.IdempotencyKeyAttribute].StringValue; m.body != "job-a" || k != r.IdempotencyKey {
			t.Errorf("copy %q with key %q, want every copy under %q", m.body, k, r.IdempotencyKey)
		}
	}
	t.Logf("%d copies under one key", len(copies))
}

// loseFirstBatchReplies starts a fault proxy on loopback in front of the
// local SQS, and returns it with client options that send through it and
// make it lose the replies of the next n requests once the first
// SendMessageBatch starts (its attempts, and what follows them).
func loseFirstBatchReplies(t *testing.T, n int) (*faultproxy.Proxy, func(*sqs.Options)) {
	t.Helper()
	p, err := faultproxy.ForEndpoint(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	var batches atomic.Int32
	return p, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(p.URL())
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Initialize.Add(middleware.InitializeMiddlewareFunc("loseBatchReplies",
				func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
					if _, ok := in.Parameters.(*sqs.SendMessageBatchInput); ok && batches.Add(1) == 1 {
						if err := p.LoseReplies(n); err != nil {
							return middleware.InitializeOutput{}, middleware.Metadata{}, err
						}
					}
					return next.HandleInitialize(ctx, in)
				}), middleware.Before)
		})
	}
}

// `send` through a proxy on loopback in front of the local SQS that lets
// SQS store every message but rewrites each SendMessageBatch answer to fail
// every entry on SQS's side (InternalError, SenderFault false), as SQS may
// for a message it stored: the line is reported as maybe sent, with its
// generated key, and every copy SQS holds carries that key. Before, it was
// reported not sent, with no key: sent again, it got a new one.
func TestSendEntryFailedOnSQSSideGivesItsKey(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{})
	target, err := neturl.Parse(localtest.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.ModifyResponse = func(r *http.Response) error {
		if !strings.HasSuffix(r.Request.Header.Get("X-Amz-Target"), ".SendMessageBatch") || r.StatusCode != http.StatusOK {
			return nil
		}
		var out struct{ Successful []struct{ Id string } }
		if err := json.NewDecoder(r.Body).Decode(&out); err != nil {
			return err
		}
		r.Body.Close()
		type failure struct {
			Id, Code, Message string
			SenderFault       bool
		}
		var failed []failure
		for _, s := range out.Successful {
			failed = append(failed, failure{Id: s.Id, Code: "InternalError", Message: "stored, but reported failed by the test's proxy"})
		}
		b, err := json.Marshal(map[string]any{"Successful": []any{}, "Failed": failed})
		if err != nil {
			return err
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(b)), int64(len(b))
		r.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	srv := httptest.NewServer(rp)
	t.Cleanup(srv.Close)
	viaProxy := func(o *sqs.Options) { o.BaseEndpoint = aws.String(srv.URL) }
	code, r := sendOneLine(t, "job-b", q.URL, viaProxy)
	if code == 0 || !r.MaybeSent || !strings.HasPrefix(r.IdempotencyKey, "auto:") || !strings.Contains(r.Error, "may have been sent: SQS failed it on its side: InternalError") {
		t.Fatalf("exit %d, result %+v; want maybe sent, with its generated key", code, r)
	}
	copies := drainAtLeast(t, c, q.URL, 1)
	for _, m := range copies {
		if k := m.attrs[producer.IdempotencyKeyAttribute].StringValue; m.body != "job-b" || k != r.IdempotencyKey {
			t.Errorf("copy %q with key %q, want every copy under %q", m.body, k, r.IdempotencyKey)
		}
	}
	t.Logf("%d copies stored under one key, all reported failed", len(copies))
}

// sendOneLine runs `send URL --raw -o json` with line on standard input,
// its SQS client given opt, and returns its exit code and its one result.
func sendOneLine(t *testing.T, line, url string, opt func(*sqs.Options)) (int, sendResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cli := startCLIWith(t, ctx, strings.NewReader(line+"\n"), []rootOption{withSQSOptions(opt)}, "send", url, "--raw", "-o", "json")
	code := cli.wait(t)
	var res []sendResult
	if err := json.Unmarshal([]byte(cli.stdout.String()), &res); err != nil || len(res) != 1 {
		t.Fatalf("exit %d, output %q: %v\nstderr: %s", code, cli.stdout.String(), err, cli.stderr.String())
	}
	return code, res[0]
}

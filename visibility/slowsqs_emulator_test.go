package visibility_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/sqsworker/sqsworker"
	"github.com/sqsworker/sqsworker/internal/sqsmsg"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
	"github.com/sqsworker/sqsworker/visibility"
)

// delayingProxy forwards requests to the local SQS, holding each
// ChangeMessageVisibilityBatch call for what delay says of its body: before
// it is sent on, and after SQS answered it.
func delayingProxy(t *testing.T, delay func(body string) (before, after time.Duration)) string {
	t.Helper()
	target := localtest.Endpoint()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		var before, after time.Duration
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".ChangeMessageVisibilityBatch") {
			before, after = delay(string(body))
		}
		time.Sleep(before)
		req, err := http.NewRequestWithContext(r.Context(), r.Method, target+r.URL.RequestURI(), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		answer, _ := io.ReadAll(resp.Body)
		time.Sleep(after)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// On the local SQS: ten leases with 2 s left as the Extender counts them,
// whose extension SQS applies at once but whose answer comes 3 s later,
// while the round's other calls wait for a turn (2 at once, each held
// 2.5 s). None of the ten is taken for lost, and SQS keeps all 50 messages
// hidden. Before, the ten were ended as lost when the third call went out,
// their handlers cut short.
func TestExtensionAnsweredLateIsNotLostOnEmulator(t *testing.T) {
	t.Parallel()
	c := localtest.NewSQS(t)
	q := localtest.NewQueue(t, c, localtest.QueueOptions{VisibilityTimeout: 30 * time.Second})
	bodies := make([]string, 50)
	for i := range bodies {
		bodies[i] = "job"
	}
	localtest.Send(t, c, q.URL, "", bodies...)
	var msgs []*sqsworker.Message
	for deadline := time.Now().Add(time.Minute); len(msgs) < 50 && time.Now().Before(deadline); {
		out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: &q.URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range out.Messages {
			msgs = append(msgs, sqsmsg.FromSDK(q.URL, &out.Messages[i]))
		}
	}
	if len(msgs) != 50 {
		t.Fatalf("received %d of 50 messages", len(msgs))
	}
	late := msgs[:10]
	proxy := delayingProxy(t, func(body string) (time.Duration, time.Duration) {
		if strings.Contains(body, late[0].ReceiptHandle) {
			return 0, 3 * time.Second
		}
		return 2500 * time.Millisecond, 0
	})
	slow := localtest.NewSQS(t, func(o *sqs.Options) { o.BaseEndpoint = aws.String(proxy) })
	e, err := visibility.New(slow, visibility.Config{QueueURL: q.URL, VisibilityTimeout: 30 * time.Second, MaxInFlight: 2, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var ctxs []context.Context
	var leases []*visibility.Lease
	for i, m := range msgs {
		at := now.Add(-16 * time.Second) // 14 s left
		if i < 10 {
			at = now.Add(-28 * time.Second) // 2 s left: sent first
		}
		ctx, l := e.Track(context.Background(), m, at)
		leases = append(leases, l)
		if i < 10 {
			ctxs = append(ctxs, ctx)
		}
	}
	e.Round(context.Background())
	for _, l := range leases {
		l.Release()
	}
	if n := lostCount(ctxs); n > 0 {
		t.Errorf("%d of the 10 leases SQS extended were ended as lost; stats %+v", n, e.Stats())
	}
	if v, f, _ := localtest.Depth(t, c, q.URL); v != 0 || f != 50 {
		t.Errorf("the queue has %d messages visible, %d in flight; want all 50 in flight", v, f)
	}
}

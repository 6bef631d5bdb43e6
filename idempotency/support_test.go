package idempotency_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker/internal/testenv"
)

// fault is what faultProxy does with one request.
type fault int

const (
	forward      fault = iota // pass it on
	refuse                    // close the connection without passing it on
	swallow                   // hold it, unanswered, until the client gives up
	dropResponse              // pass it on, then close the connection instead of answering
)

// faultProxy is an HTTP proxy on the loopback interface in front of DynamoDB
// Local that injects faults by operation (PutItem, UpdateItem, …): a
// brownout for one client while others reach DynamoDB directly.
type faultProxy struct {
	t        testing.TB
	srv      *httptest.Server
	upstream string
	client   *http.Client
	closing  chan struct{}

	mu      sync.Mutex
	rule    func(op string, n int) fault // n counts op's requests, from 1
	seen    map[string]int
	faulted map[string]int
}

// startFaultProxy starts a proxy to the DynamoDB Local of the environment,
// stopped when the test ends. It forwards everything until setRule.
func startFaultProxy(t testing.TB) *faultProxy {
	t.Helper()
	testenv.RequireDynamoDB(t)
	p := &faultProxy{
		t: t, upstream: strings.TrimSuffix(testenv.DynamoDBEndpoint(), "/"),
		client:  &http.Client{Transport: &http.Transport{Proxy: nil}},
		closing: make(chan struct{}),
		seen:    map[string]int{}, faulted: map[string]int{},
	}
	p.srv = httptest.NewServer(p)
	t.Cleanup(func() {
		close(p.closing) // free swallowed requests
		p.srv.CloseClientConnections()
		p.srv.Close()
		p.client.CloseIdleConnections()
	})
	return p
}

// dynamoDB returns a client that goes through the proxy, with the SDK's
// default retries.
func (p *faultProxy) dynamoDB(t testing.TB) *dynamodb.Client {
	return testenv.NewDynamoDB(t, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(p.srv.URL) })
}

// setRule sets what happens to the following requests; nil forwards all.
func (p *faultProxy) setRule(rule func(op string, n int) fault) {
	p.mu.Lock()
	p.rule = rule
	p.mu.Unlock()
}

// requests returns how many requests of op the proxy received.
func (p *faultProxy) requests(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen[op]
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndexByte(op, '.')+1:]
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.seen[op]++
	f := forward
	if p.rule != nil {
		f = p.rule(op, p.seen[op])
	}
	if f != forward {
		p.faulted[op]++
	}
	p.mu.Unlock()

	hangUp := func() {
		if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
			c.Close()
		}
	}
	switch f {
	case refuse:
		hangUp()
		return
	case swallow:
		select {
		case <-r.Context().Done():
		case <-p.closing:
		}
		hangUp()
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		hangUp()
		return
	}
	req.Header = r.Header.Clone()
	req.Host = r.Host
	resp, err := p.client.Do(req)
	if err != nil {
		hangUp()
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(resp.Body)
	if err != nil || f == dropResponse {
		hangUp() // DynamoDB did the work; the client never hears of it
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(respBody)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// quiet is a logger that discards everything.
func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// itemOf reads an item straight from a table, its string and number
// attributes as strings; nil when there is none.
func itemOf(t testing.TB, db *dynamodb.Client, table, id string) map[string]string {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
		Key: map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: id}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return nil
	}
	item := map[string]string{}
	for k, v := range out.Item {
		switch v := v.(type) {
		case *ddbtypes.AttributeValueMemberS:
			item[k] = v.Value
		case *ddbtypes.AttributeValueMemberN:
			item[k] = v.Value
		case *ddbtypes.AttributeValueMemberB:
			item[k] = string(v.Value)
		}
	}
	return item
}

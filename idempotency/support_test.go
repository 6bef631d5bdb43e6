package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/sqsworker/sqsworker/idempotency"
	"github.com/sqsworker/sqsworker/sqstest/localtest"
)

// fault is what faultProxy does with one request.
type fault int

const (
	forward      fault = iota // pass it on
	refuse                    // close the connection without passing it on
	swallow                   // hold it, unanswered, until the client gives up
	dropResponse              // pass it on, then close the connection instead of answering
	throttle                  // answer it with a ProvisionedThroughputExceededException, without passing it on
	slow                      // pass it on after slowDelay, as a DynamoDB slowed down (or its SDK retrying throttles) would
)

// slowDelay is how long a slow request waits before it is passed on.
const slowDelay = 600 * time.Millisecond

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
	localtest.RequireDynamoDB(t)
	p := &faultProxy{
		t: t, upstream: strings.TrimSuffix(localtest.DynamoDBEndpoint(), "/"),
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
	return localtest.NewDynamoDB(t, func(o *dynamodb.Options) { o.BaseEndpoint = aws.String(p.srv.URL) })
}

// setRule sets what happens to the following requests; nil forwards all.
func (p *faultProxy) setRule(rule func(op string, n int) fault) {
	p.mu.Lock()
	p.rule = rule
	p.mu.Unlock()
}

// faults returns how many requests of op were refused, swallowed or had
// their response dropped.
func (p *faultProxy) faults(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faulted[op]
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
	case throttle:
		body := `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"The level of configured provisioned throughput for the table was exceeded."}`
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, body)
		return
	case slow:
		select {
		case <-r.Context().Done():
			hangUp()
			return
		case <-p.closing:
			hangUp()
			return
		case <-time.After(slowDelay):
		}
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

// backend is a store for a test, and the means to fault it: the memory store
// (faults injected in the store) or DynamoDB Local (faults injected by a
// proxy in front of it, the SDK and the network included).
type backend struct {
	// store is the faulty holder's store; direct reaches the same records
	// without faults, as another worker would.
	store, direct idempotency.Store
	// fail makes op (a MemStore operation name) fail, as a refusal (swallow
	// false) or a request left unanswered (swallow true), until heal.
	fail func(op string, swallow bool)
	heal func()
	// failures returns how many requests of op failed so far.
	failures func(op string) int
	// takeOver gives key to another holder, as a claim after the lease
	// lapsed would.
	takeOver func(key string)
	// holder returns the token that holds key now.
	holder func(key string) string
	// setLease moves the end of the lease of key's claim to until, as its
	// holder's extensions do.
	setLease func(key string, until time.Time)
	// effects is a table for the handlers' writes (AddWrites), and
	// applied counts the writes of effectWrite(effects, key) committed.
	effects string
	applied func(key string) int
}

// dynamoOps maps MemStore operations to the DynamoDB requests making them.
var dynamoOps = map[string]string{
	idempotency.OpClaim: "PutItem", idempotency.OpComplete: "UpdateItem",
	idempotency.OpExtendLease: "UpdateItem", idempotency.OpRelease: "DeleteItem",
	idempotency.OpCommit: "TransactWriteItems",
}

// forEachBackend runs test against the memory store and against DynamoDB
// Local (skipped without it).
func forEachBackend(t *testing.T, test func(t *testing.T, b backend)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		s := idempotency.NewMemStore(0)
		var mu sync.Mutex
		failing := map[string]bool{}
		s.SetFault(func(op string) error {
			mu.Lock()
			defer mu.Unlock()
			if failing[op] {
				return errBrownout
			}
			return nil
		})
		test(t, backend{
			store: s, direct: s.Unfaulted(),
			fail:     func(op string, _ bool) { mu.Lock(); failing[op] = true; mu.Unlock() },
			heal:     func() { mu.Lock(); clear(failing); mu.Unlock() },
			failures: s.Failures,
			takeOver: func(key string) {
				r, _ := s.Get(key)
				r.Token, r.LeaseExpiry = "another-holder", time.Now().Add(time.Hour)
				s.Put(r)
			},
			holder: func(key string) string { r, _ := s.Get(key); return r.Token },
			setLease: func(key string, until time.Time) {
				r, _ := s.Get(key)
				r.LeaseExpiry = until
				s.Put(r)
			},
			effects: "effects",
			applied: func(key string) int { return len(s.Applied(key)) },
		})
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		p := startFaultProxy(t)
		store, direct := proxiedStore(t, p, localtest.NewDynamoDB(t))
		cfg := direct.Config()
		db := localtest.NewDynamoDB(t)
		effects := newEffectsTable(t, db)
		test(t, backend{
			store: store, direct: direct,
			fail: func(op string, sw bool) {
				f := refuse
				if sw {
					f = swallow
				}
				target := dynamoOps[op]
				p.setRule(func(o string, _ int) fault {
					if o == target {
						return f
					}
					return forward
				})
			},
			heal:     func() { p.setRule(nil) },
			failures: func(op string) int { return p.faults(dynamoOps[op]) },
			takeOver: func(key string) {
				_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &cfg.Table,
					Key:              map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: key}},
					UpdateExpression: aws.String("SET lease_token = :t, lease_expiry = :l"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{
						":t": &ddbtypes.AttributeValueMemberS{Value: "another-holder"},
						":l": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)},
					}})
				if err != nil {
					t.Errorf("taking over %s: %v", key, err)
				}
			},
			holder: func(key string) string { return itemOf(t, db, cfg.Table, key)["lease_token"] },
			setLease: func(key string, until time.Time) {
				_, err := db.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{TableName: &cfg.Table,
					Key:                       map[string]ddbtypes.AttributeValue{"id": &ddbtypes.AttributeValueMemberS{Value: key}},
					UpdateExpression:          aws.String("SET lease_expiry = :l"),
					ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":l": &ddbtypes.AttributeValueMemberN{Value: strconv.FormatInt(until.UnixMilli(), 10)}},
				})
				if err != nil {
					t.Errorf("moving the lease of %s: %v", key, err)
				}
			},
			effects: effects,
			applied: func(key string) int { return applied(t, db, effects, key) },
		})
	})
}

var errBrownout = errors.New("injected: store unavailable")

// proxiedStore creates a store's table on db and returns two stores of it:
// store, whose requests go through p, and direct, which reaches DynamoDB
// Local without faults, as another worker would.
func proxiedStore(t *testing.T, p *faultProxy, db *dynamodb.Client) (store, direct *idempotency.DynamoStore) {
	t.Helper()
	direct = newStore(t, db, idempotency.StoreConfig{})
	store, err := idempotency.NewDynamoStore(context.Background(), p.dynamoDB(t), direct.Config())
	if err != nil {
		t.Fatal(err)
	}
	return store, direct
}

// guards returns a guard on b's faulty store and another on its direct one,
// as two workers sharing the records would have.
func guards(b backend) (faulty, direct *idempotency.Guard) {
	faulty, _ = idempotency.New(b.store, idempotency.Config{Logger: quiet()})
	direct, _ = idempotency.New(b.direct, idempotency.Config{Logger: quiet()})
	return faulty, direct
}

// awaitFailures waits until at least n requests of op have failed, failing
// the test if the middleware returns (on done) first.
func awaitFailures(t *testing.T, b backend, op string, n int, done <-chan error) {
	t.Helper()
	for b.failures(op) < n {
		select {
		case err := <-done:
			t.Fatalf("the middleware returned (%v) after %d failed %s requests, before the store came back", err, b.failures(op), op)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

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

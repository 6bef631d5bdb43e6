package sqsprom_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sqsworker/sqsworker/metrics"
	sqsprom "github.com/sqsworker/sqsworker/metrics/sqsprom"
)

// get returns the status code and body of a GET.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// The handler serves the metrics, a liveness probe always 200, and a
// readiness probe that follows ready().
func TestHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	sqsprom.New(reg, sqsprom.Options{}).Add(metrics.MessagesReceived, 3, metrics.Dims{Queue: "jobs"})
	var ready atomic.Bool
	srv := httptest.NewServer(sqsprom.Handler(reg, ready.Load))
	defer srv.Close()

	code, body := get(t, srv.URL+"/metrics")
	if code != 200 || !strings.Contains(body, "sqsworker_messages_received_total{queue=\"jobs\"} 3\n") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, body := get(t, srv.URL+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q, want 200", code, body)
	}
	if code, _ := get(t, srv.URL+"/readyz"); code != 503 {
		t.Errorf("/readyz while not ready: %d, want 503", code)
	}
	ready.Store(true)
	if code, body := get(t, srv.URL+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz while ready: %d %q, want 200", code, body)
	}
	if code, _ := get(t, srv.URL+"/nope"); code != 404 {
		t.Errorf("/nope: %d, want 404", code)
	}
}

// A nil ready function is always ready; a nil gatherer is the default one.
func TestHandlerDefaults(t *testing.T) {
	srv := httptest.NewServer(sqsprom.Handler(nil, nil))
	defer srv.Close()
	if code, _ := get(t, srv.URL+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d, want 200", code)
	}
	if code, body := get(t, srv.URL+"/metrics"); code != 200 || !strings.Contains(body, "go_goroutines") {
		t.Errorf("/metrics of the default gatherer: %d\n%s", code, body)
	}
}

// ServeListener serves until its context ends, then returns nil and stops
// listening.
func TestServeListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sqsprom.ServeListener(ctx, ln, sqsprom.Handler(prometheus.NewRegistry(), nil)) }()
	if code, _ := get(t, url+"/healthz"); code != 200 {
		t.Errorf("/healthz: %d, want 200", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeListener returned %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ServeListener did not return after its context ended")
	}
	http.DefaultClient.CloseIdleConnections()
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Error("still listening after ServeListener returned")
	}
}

// Serve returns at once when it cannot listen.
func TestServeListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan error, 1)
	go func() { done <- sqsprom.Serve(context.Background(), ln.Addr().String(), http.NotFoundHandler()) }()
	select {
	case err := <-done:
		var op *net.OpError
		if !errors.As(err, &op) {
			t.Errorf("Serve on a taken address returned %v, want a *net.OpError", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve on a taken address did not return")
	}
}

// Serve with no address listens on 127.0.0.1:9090 (skipped when that port is
// taken).
func TestServeDefaultAddr(t *testing.T) {
	probe, err := net.Listen("tcp", sqsprom.DefaultAddr)
	if err != nil {
		t.Skipf("%s is taken: %v", sqsprom.DefaultAddr, err)
	}
	probe.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sqsprom.Serve(ctx, "", sqsprom.Handler(prometheus.NewRegistry(), nil)) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + sqsprom.DefaultAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("/healthz: %d, want 200", resp.StatusCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing serves %s: %v", sqsprom.DefaultAddr, err)
		}
		select {
		case err := <-done:
			t.Fatalf("Serve returned %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve returned %v, want nil", err)
	}
}

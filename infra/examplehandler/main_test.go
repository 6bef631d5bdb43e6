package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestJobs(t *testing.T) {
	srv := httptest.NewServer(handler(slog.New(slog.NewTextHandler(io.Discard, nil))))
	defer srv.Close()
	for _, tc := range []struct {
		body, attempt string
		status        int
		retryAfter    string
	}{
		{"ok", "1", http.StatusNoContent, ""},
		{"fail", "1", http.StatusInternalServerError, ""},
		{"panic", "1", http.StatusInternalServerError, ""},
		{"permanent", "1", http.StatusUnprocessableEntity, ""},
		{"retry-after:90s", "1", http.StatusServiceUnavailable, "90"},
		{"retry-after:1500ms", "1", http.StatusServiceUnavailable, "2"},
		{"retry-after:soon", "1", http.StatusUnprocessableEntity, ""},
		{"sleep:10ms", "1", http.StatusNoContent, ""},
		{"fail-until:3", "2", http.StatusInternalServerError, ""},
		{"fail-until:3", "3", http.StatusNoContent, ""},
		{`{"order":42}`, "1", http.StatusUnprocessableEntity, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/jobs", strings.NewReader(tc.body))
		req.Header.Set("X-Sqs-Receive-Count", tc.attempt)
		req.Header.Set("X-Sqs-Message-Id", "m-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Retry-After") != tc.retryAfter {
			t.Errorf("%q attempt %s: %d Retry-After %q, want %d %q", tc.body, tc.attempt, resp.StatusCode, resp.Header.Get("Retry-After"), tc.status, tc.retryAfter)
		}
	}
	resp, err := http.Get(srv.URL + "/jobs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /jobs: %d, want 405", resp.StatusCode)
	}
}

func TestHealthcheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := healthcheck(addr); err == nil {
		t.Fatal("healthcheck passed with no server")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, addr, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	deadline := time.Now().Add(5 * time.Second)
	for healthcheck(addr) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the server never became healthy")
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, port, _ := net.SplitHostPort(addr)
	if err := healthcheck(":" + port); err != nil {
		t.Errorf("healthcheck of :%s: %v", port, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serve after cancel: %v", err)
	}
}

package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sqsworker/sqsworker/internal/faultproxy"
)

// echoServer echoes every connection's bytes back, on loopback, until the
// test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip writes msg and reads as many bytes back, within timeout.
func roundTrip(c net.Conn, msg string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestPass(t *testing.T) {
	noLeaks(t)
	p := newProxy(t, echoServer(t))
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr %s is not on 127.0.0.1", p.Addr())
	}
	c := dial(t, p.Addr())
	for range 3 {
		got, err := roundTrip(c, "hello", time.Second)
		if err != nil || got != "hello" {
			t.Fatalf("round trip: %q, %v", got, err)
		}
	}
	s := p.Stats()
	if s.Accepted != 1 || s.BytesUp != 15 || s.BytesDown != 15 || s.Active != 1 {
		t.Fatalf("stats %+v; want 1 accepted and active, 15 bytes each way", s)
	}
	if p.Mode() != faultproxy.Pass {
		t.Fatalf("mode %s", p.Mode())
	}
	c.Close()
	p.Close()
	if s := p.Stats(); s.Active != 0 {
		t.Fatalf("%d connections active after Close", s.Active)
	}
}

func TestRefuse(t *testing.T) {
	noLeaks(t)
	p := newProxy(t, echoServer(t))
	live := dial(t, p.Addr())
	if _, err := roundTrip(live, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if p.Mode() != faultproxy.Refuse {
		t.Fatalf("mode %s", p.Mode())
	}
	// The live connection is reset.
	_, err := roundTrip(live, "b", time.Second)
	if err == nil || isTimeout(err) {
		t.Fatalf("live connection after Refuse: %v; want a reset or EOF", err)
	}
	// New ones are refused.
	_, err = net.DialTimeout("tcp", p.Addr(), time.Second)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Refuse: %v; want connection refused", err)
	}
	if s := p.Stats(); s.Reset != 1 {
		t.Fatalf("stats %+v; want 1 reset", s)
	}
	// Pass listens on the same port again.
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	c := dial(t, p.Addr())
	if got, err := roundTrip(c, "again", time.Second); err != nil || got != "again" {
		t.Fatalf("after Pass: %q, %v", got, err)
	}
	// Refusing twice, and passing twice, is harmless.
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	c = dial(t, p.Addr())
	if got, err := roundTrip(c, "twice", time.Second); err != nil || got != "twice" {
		t.Fatalf("after a second Pass: %q, %v", got, err)
	}
}

func TestBlackhole(t *testing.T) {
	noLeaks(t)
	p := newProxy(t, echoServer(t))
	live := dial(t, p.Addr())
	if _, err := roundTrip(live, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	// The live connection hangs: no answer, no EOF, no reset.
	if _, err := roundTrip(live, "b", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("live connection in Blackhole: %v; want a timeout", err)
	}
	// A new one is accepted, and hangs too.
	c := dial(t, p.Addr())
	if _, err := roundTrip(c, "cc", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection in Blackhole: %v; want a timeout", err)
	}
	s := p.Stats()
	if s.Stalled != 2 || s.Discarded != 3 {
		t.Fatalf("stats %+v; want 2 stalled, 3 bytes discarded", s)
	}
	// Blackholing again is harmless.
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	// After Pass, new connections work, and the stalled ones are reset.
	if err := p.Pass(); err != nil {
		t.Fatal(err)
	}
	fresh := dial(t, p.Addr())
	if got, err := roundTrip(fresh, "ok", time.Second); err != nil || got != "ok" {
		t.Fatalf("after Pass: %q, %v", got, err)
	}
	for _, stalled := range []net.Conn{live, c} {
		if _, err := roundTrip(stalled, "d", time.Second); err == nil || isTimeout(err) {
			t.Fatalf("stalled connection after Pass: %v; want a reset", err)
		}
	}
	if s := p.Stats(); s.Reset != 2 || s.Stalled != 2 {
		t.Fatalf("stats %+v; want the 2 stalled connections reset", s)
	}
}

// TestBlackholeToRefuse resets the stalled connections too.
func TestBlackholeToRefuse(t *testing.T) {
	noLeaks(t)
	p := newProxy(t, echoServer(t))
	live := dial(t, p.Addr())
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(live, "a", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("live connection in Blackhole: %v; want a timeout", err)
	}
	if err := p.Refuse(); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(live, "b", time.Second); err == nil || isTimeout(err) {
		t.Fatalf("stalled connection after Refuse: %v; want a reset", err)
	}
}

func TestLoseReplies(t *testing.T) {
	noLeaks(t)
	var applied atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		applied.Add(1)
		_, _ = io.WriteString(w, "applied")
	}))
	defer srv.Close()
	p := newProxy(t, srv.Listener.Addr().String())
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	post := func() (string, error) {
		// POST: the transport does not retry it by itself.
		resp, err := client.Post(p.URL(), "text/plain", strings.NewReader("x"))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if got, err := post(); err != nil || got != "applied" {
		t.Fatalf("before: %q, %v", got, err)
	}
	if err := p.LoseReplies(2); err != nil {
		t.Fatal(err)
	}
	if p.Mode() != faultproxy.LoseReplies {
		t.Fatalf("mode %s", p.Mode())
	}
	for i := range 2 {
		if got, err := post(); err == nil {
			t.Fatalf("request %d while losing replies: %q, no error", i, got)
		}
	}
	if n := applied.Load(); n != 3 {
		t.Fatalf("the server applied %d requests; want 3: lost replies are of applied requests", n)
	}
	if p.Mode() != faultproxy.Pass {
		t.Fatalf("mode %s after the replies were lost; want pass", p.Mode())
	}
	if got, err := post(); err != nil || got != "applied" {
		t.Fatalf("after: %q, %v", got, err)
	}
	if s := p.Stats(); s.LostReplies != 2 {
		t.Fatalf("stats %+v; want 2 lost replies", s)
	}
	if err := p.LoseReplies(0); err == nil {
		t.Fatal("LoseReplies(0): no error")
	}
}

// TestClose stops every goroutine, with connections passing, stalled and
// being accepted.
func TestClose(t *testing.T) {
	noLeaks(t)
	p := newProxy(t, echoServer(t))
	passing := dial(t, p.Addr())
	if _, err := roundTrip(passing, "a", time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Blackhole(); err != nil {
		t.Fatal(err)
	}
	stalled := dial(t, p.Addr())
	_, _ = io.WriteString(stalled, "x")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []net.Conn{passing, stalled} {
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		if _, err := bufio.NewReader(c).ReadByte(); err == nil || isTimeout(err) {
			t.Fatalf("connection after Close: %v; want it closed", err)
		}
	}
	for name, f := range map[string]func() error{"Pass": p.Pass, "Refuse": p.Refuse, "Blackhole": p.Blackhole} {
		if err := f(); !errors.Is(err, faultproxy.ErrClosed) {
			t.Fatalf("%s after Close: %v; want ErrClosed", name, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestTargetDown resets clients when the target refuses.
func TestTargetDown(t *testing.T) {
	noLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p := newProxy(t, target)
	// The reset may come while connecting or at the first read.
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err == nil {
		defer c.Close()
		_, err = roundTrip(c, "a", time.Second)
	}
	if err == nil || isTimeout(err) {
		t.Fatalf("through a proxy to a closed port: %v; want a reset", err)
	}
	if s := p.Stats(); s.DialErrors != 1 {
		t.Fatalf("stats %+v; want 1 dial error", s)
	}
}

func TestLoopbackOnly(t *testing.T) {
	for _, target := range []string{"10.0.0.1:80", "example.com:443", "0.0.0.0:80", "no-port"} {
		if p, err := faultproxy.New(target); err == nil {
			p.Close()
			t.Errorf("New(%q): no error; want a refusal", target)
		}
	}
	for _, target := range []string{"127.0.0.1:9", "localhost:9", "[::1]:9"} {
		p, err := faultproxy.New(target)
		if err != nil {
			t.Errorf("New(%q): %v", target, err)
			continue
		}
		p.Close()
	}
}

// noLeaks checks, once the test and its cleanups are done, that no
// goroutine it started is left.
func noLeaks(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// ForEndpoint takes its target from an endpoint URL, and names what is
// wrong with one it cannot use.
func TestForEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p, err := faultproxy.ForEndpoint("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if c, err := net.Dial("tcp", p.Addr()); err != nil {
		t.Errorf("dialling the proxy: %v", err)
	} else {
		c.Close()
	}
	for _, bad := range []string{"127.0.0.1:9324", "://x"} {
		if _, err := faultproxy.ForEndpoint(bad); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("ForEndpoint(%q) = %v, want an error naming it", bad, err)
		}
	}
}

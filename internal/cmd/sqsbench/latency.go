package main

// The latency proxy (-latency): the local emulator answers in about a
// millisecond, where SQS in a region answers in tens. A consumer's structure
// (how many calls it has under way at once, whether it deletes while it
// receives) costs CPU on the emulator and pays off only against a real
// round trip. With -latency, the children reach the emulator through a
// proxy on the loopback interface that holds each chunk of every answer for
// that long before passing it on, so that every call takes at least that
// much longer, as it would across a network; requests pass at once. A new
// connection costs no round trip (the handshake is not held), which
// favours a consumer that opens many; the proxy runs in sqsbench, so its
// CPU counts in the others' column. The priority benchmark's consumers
// run in sqsbench and reach the emulator directly.

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// latencyProxy forwards TCP connections to target, delaying what target
// sends back by delay.
type latencyProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// newLatencyProxy starts a proxy on 127.0.0.1 for the endpoint's host and
// port, which must be on the loopback interface.
func newLatencyProxy(endpoint string, delay time.Duration) (*latencyProxy, error) {
	if !isLoopback(endpoint) {
		return nil, fmt.Errorf("latency proxy: %q is not on the loopback interface", endpoint)
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("latency proxy: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("latency proxy: %w", err)
	}
	p := &latencyProxy{ln: ln, target: u.Host, delay: delay, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.serve)
	return p, nil
}

// URL is the proxy's endpoint.
func (p *latencyProxy) URL() string { return "http://" + p.ln.Addr().String() }

// Close stops the proxy and closes its connections.
func (p *latencyProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

func (p *latencyProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *latencyProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
		c.Close()
	}
}

func (p *latencyProxy) serve() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.wg.Go(func() { p.handle(client) })
	}
}

func (p *latencyProxy) handle(client net.Conn) {
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(client, server) {
		server.Close()
		return
	}
	defer p.forget(client, server)
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(server, client)
		_ = server.(*net.TCPConn).CloseWrite()
	})
	// Answers: each chunk is read at once and written delay after it was
	// read, in order; a chunk read while an earlier one waits is not held
	// up by more than its own delay.
	type chunk struct {
		b  []byte
		at time.Time
	}
	chunks := make(chan chunk, 64)
	wg.Go(func() {
		defer close(chunks)
		for {
			b := make([]byte, 32*1024)
			n, err := server.Read(b)
			if n > 0 {
				chunks <- chunk{b[:n], time.Now().Add(p.delay)}
			}
			if err != nil {
				return
			}
		}
	})
	var werr error
	for c := range chunks {
		if werr != nil {
			continue // drain
		}
		time.Sleep(time.Until(c.at))
		if _, werr = client.Write(c.b); werr != nil {
			server.Close() // ends the read above
		}
	}
	client.Close()
	server.Close()
	wg.Wait()
}

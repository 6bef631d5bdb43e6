// Package faultproxy is a TCP proxy on the loopback interface that injects
// network faults between a client and a local service, switchable at run
// time:
//
//   - [Pass] forwards every byte both ways;
//   - [Refuse] closes the listener and resets every live connection: new
//     clients get "connection refused", live ones "connection reset";
//   - [Blackhole] accepts connections and reads what clients send, but never
//     answers, and stalls the live connections the same way: clients hang
//     until their own timeouts. When the blackhole ends, the connections it
//     stalled are reset, as a peer that gave up on them during a network
//     partition resets them when the network comes back (their bytes were
//     lost, so they cannot resume): a client without a timeout of its own
//     hangs for the whole blackhole, not for ever;
//   - [LoseReplies] forwards requests, but drops the next n responses by
//     resetting the client's connection as soon as the service has started
//     to answer: the request was applied, the client cannot know it, and a
//     client SDK retries it.
//
// Both the proxy's address and its target are on the loopback interface:
// the proxy never carries traffic to or from another machine. It has no
// dependency on package testing, so that tools as well as tests use it.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with traffic.
type Mode int

// The modes of a Proxy.
const (
	// Pass forwards traffic both ways.
	Pass Mode = iota
	// Refuse closes the listener and resets live connections.
	Refuse
	// Blackhole accepts and reads, never answers, and stalls live
	// connections.
	Blackhole
	// LoseReplies forwards requests but drops responses, as long as some
	// remain to be lost; then it passes.
	LoseReplies
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Refuse:
		return "refuse"
	case Blackhole:
		return "blackhole"
	case LoseReplies:
		return "lose-replies"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// ErrClosed is returned by the mode switches of a closed Proxy.
var ErrClosed = errors.New("faultproxy: proxy closed")

// dialTimeout bounds the connection to the target.
const dialTimeout = 5 * time.Second

// relistenFor is how long a Proxy tries to listen again on its port when it
// stops refusing.
const relistenFor = 5 * time.Second

// Stats counts what a Proxy did since it started.
type Stats struct {
	Accepted    int64 // client connections accepted
	Active      int64 // client connections open now
	Reset       int64 // client connections reset by Refuse or LoseReplies
	Stalled     int64 // client connections stalled by Blackhole
	DialErrors  int64 // connections to the target that failed
	BytesUp     int64 // bytes forwarded from clients to the target
	BytesDown   int64 // bytes forwarded from the target to clients
	Discarded   int64 // bytes read from clients and dropped while blackholed
	LostReplies int64 // responses dropped by LoseReplies
}

// Proxy forwards TCP connections from a loopback port to a loopback target,
// with faults. Create one with New; it is safe for concurrent use. Close
// stops it and every goroutine it started.
type Proxy struct {
	target string
	addr   string

	mu     sync.Mutex
	mode   Mode
	lose   int // responses still to lose in LoseReplies
	ln     net.Listener
	conns  map[*conn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, active, reset, stalled, dialErrors,
	bytesUp, bytesDown, discarded, lostReplies atomic.Int64
}

// conn is one client connection and its connection to the target.
type conn struct {
	client net.Conn
	up     net.Conn // nil when the connection was stalled from the start
	// stalled is set once, by Blackhole: from then on nothing is
	// forwarded either way.
	stalled atomic.Bool
	// wasReset is set when the proxy resets the connection.
	wasReset atomic.Bool
}

// New starts a proxy to target ("host:port", a loopback address or
// localhost) on a free port of 127.0.0.1, passing traffic.
func New(target string) (*Proxy, error) {
	if err := checkLoopback(target); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listening: %w", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[*conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// checkLoopback returns an error unless hostport is on this machine.
func checkLoopback(hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("faultproxy: target %q: %w", hostport, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("faultproxy: target %q is not on the loopback interface", hostport)
}

// ForEndpoint is New with the target of an endpoint URL, as the SDK's
// AWS_ENDPOINT_URL_* variables give it (http://127.0.0.1:9324).
func ForEndpoint(endpoint string) (*Proxy, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: endpoint %q: %w", endpoint, err)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("faultproxy: endpoint %q names no host: want a URL such as http://127.0.0.1:9324", endpoint)
	}
	return New(u.Host)
}

// Addr returns the proxy's address, "127.0.0.1:port". It stays the same
// across mode switches.
func (p *Proxy) Addr() string { return p.addr }

// URL returns the proxy's address as an http URL.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode; LoseReplies only while responses remain to
// be lost.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == LoseReplies && p.lose == 0 {
		return Pass
	}
	return p.mode
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Accepted: p.accepted.Load(), Active: p.active.Load(), Reset: p.reset.Load(),
		Stalled: p.stalled.Load(), DialErrors: p.dialErrors.Load(),
		BytesUp: p.bytesUp.Load(), BytesDown: p.bytesDown.Load(),
		Discarded: p.discarded.Load(), LostReplies: p.lostReplies.Load(),
	}
}

// Pass forwards traffic again, listening again on the same port if the proxy
// was refusing, and resets the connections a blackhole stalled.
func (p *Proxy) Pass() error { return p.set(Pass, 0) }

// Refuse closes the listener and resets every live connection, so that
// clients get "connection refused" or "connection reset" until the mode
// changes.
func (p *Proxy) Refuse() error { return p.set(Refuse, 0) }

// Blackhole accepts connections and reads from them but never answers, and
// stalls every live connection, until the mode changes; then the stalled
// connections are reset.
func (p *Proxy) Blackhole() error { return p.set(Blackhole, 0) }

// LoseReplies forwards traffic but drops the next n responses, each by
// resetting its client's connection when the first bytes of the response
// come from the target; then it passes. n must be positive. Connections a
// blackhole stalled are reset.
func (p *Proxy) LoseReplies(n int) error {
	if n <= 0 {
		return fmt.Errorf("faultproxy: LoseReplies(%d): n must be positive", n)
	}
	return p.set(LoseReplies, n)
}

func (p *Proxy) set(m Mode, lose int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.mode, p.lose = m, lose
	switch m {
	case Refuse:
		if p.ln != nil {
			p.ln.Close()
			p.ln = nil
		}
		for c := range p.conns {
			p.resetLocked(c)
		}
		return nil
	case Blackhole:
		for c := range p.conns {
			if !c.stalled.Swap(true) {
				p.stalled.Add(1)
			}
		}
	default:
		for c := range p.conns {
			if c.stalled.Load() {
				p.resetLocked(c)
			}
		}
	}
	if p.ln == nil {
		return p.relistenLocked()
	}
	return nil
}

// relistenLocked listens on the proxy's port again; the port may take a
// moment to be free.
func (p *Proxy) relistenLocked() error {
	deadline := time.Now().Add(relistenFor)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.serve(ln)
			return nil
		}
		if time.Now().After(deadline) {
			p.mode = Refuse // nothing listens: that is what clients see
			return fmt.Errorf("faultproxy: listening again on %s: %w", p.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// resetLocked closes a connection with a reset, and its target side.
func (p *Proxy) resetLocked(c *conn) {
	if c.wasReset.Swap(true) {
		return
	}
	if tc, ok := c.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, not FIN
	}
	c.client.Close()
	if c.up != nil {
		c.up.Close()
	}
	p.reset.Add(1)
}

// Close stops the proxy: it closes the listener and every connection, and
// waits for every goroutine of the proxy to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		p.wg.Wait()
		return nil
	}
	p.closed = true
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.client.Close()
		if c.up != nil {
			c.up.Close()
		}
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}

// serve accepts connections on ln until it is closed. Called with p.mu held
// or before p is shared.
func (p *Proxy) serve(ln net.Listener) {
	p.ln = ln
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				p.mu.Lock()
				current := !p.closed && p.ln == ln
				p.mu.Unlock()
				if !current {
					return // closed by Refuse or Close
				}
				time.Sleep(10 * time.Millisecond) // out of file descriptors, say
				continue
			}
			p.accepted.Add(1)
			p.mu.Lock()
			if p.closed || p.ln != ln {
				p.mu.Unlock()
				c.Close()
				continue
			}
			p.active.Add(1)
			p.wg.Go(func() {
				defer p.active.Add(-1)
				p.handle(c)
			})
			p.mu.Unlock()
		}
	})
}

// handle runs one client connection until both directions end.
func (p *Proxy) handle(client net.Conn) {
	c := &conn{client: client}
	if p.Mode() == Blackhole {
		c.stalled.Store(true)
		p.stalled.Add(1)
	} else {
		up, err := net.DialTimeout("tcp", p.target, dialTimeout)
		if err != nil {
			p.dialErrors.Add(1)
			if tc, ok := client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			client.Close()
			return
		}
		c.up = up
	}
	p.mu.Lock()
	if p.closed || p.mode == Refuse {
		p.mu.Unlock()
		client.Close()
		if c.up != nil {
			c.up.Close()
		}
		return
	}
	if p.mode == Blackhole && !c.stalled.Swap(true) {
		p.stalled.Add(1) // blackholed since the dial
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		client.Close()
		if c.up != nil {
			c.up.Close()
		}
	}()

	if c.up == nil {
		p.discard(c) // stalled from the start: read, never answer
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pumpDown(c) })
	p.pumpUp(c)
	wg.Wait()
}

// discard reads and drops what the client sends until it closes.
func (p *Proxy) discard(c *conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		p.discarded.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// pumpUp copies from the client to the target, or drops the bytes once the
// connection is stalled. When the client is done, so is the target's side.
func (p *Proxy) pumpUp(c *conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 {
			if c.stalled.Load() {
				p.discarded.Add(int64(n))
			} else {
				p.bytesUp.Add(int64(n)) // before the target can answer them
				if _, werr := c.up.Write(buf[:n]); werr != nil && !c.stalled.Load() {
					c.client.Close()
					c.up.Close()
					return
				}
			}
		}
		if err != nil {
			c.up.Close() // ends pumpDown too
			return
		}
	}
}

// pumpDown copies from the target to the client, drops the response when
// one is to be lost, and stops forwarding once the connection is stalled.
// A stalled connection's client is left hanging: only pumpUp (the client
// leaving) or Close ends it.
func (p *Proxy) pumpDown(c *conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.up.Read(buf)
		if c.stalled.Load() {
			if err != nil {
				return
			}
			continue
		}
		if n > 0 {
			if p.takeLoss() {
				p.lostReplies.Add(1)
				p.mu.Lock()
				p.resetLocked(c)
				p.mu.Unlock()
				return
			}
			p.bytesDown.Add(int64(n)) // before the client can read them
			if _, werr := c.client.Write(buf[:n]); werr != nil {
				c.up.Close()
				return
			}
		}
		if err != nil {
			if !c.stalled.Load() {
				if !errors.Is(err, io.EOF) {
					if tc, ok := c.client.(*net.TCPConn); ok {
						_ = tc.SetLinger(0)
					}
				}
				c.client.Close()
			}
			return
		}
	}
}

// takeLoss reports whether the response being forwarded is to be lost, and
// counts it.
func (p *Proxy) takeLoss() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode != LoseReplies || p.lose == 0 {
		return false
	}
	p.lose--
	if p.lose == 0 {
		p.mode = Pass
	}
	return true
}

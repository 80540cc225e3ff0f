package storetest

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy is a TCP proxy for tests of network stores: a client connects to
// Addr instead of the server, and the test can cut every connection (Cut)
// or make the server look unreachable (Down, Up) without touching the
// server itself, which may be shared with other tests. Safe for concurrent
// use. Create one with NewProxy.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // cancelled by the cleanup: ends dials in progress
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the proxy

	mu     sync.Mutex
	links  map[*link]struct{}
	down   bool
	closed bool
}

// link is one proxied connection: the client's and, once dialled, the
// server's.
type link struct {
	client, server net.Conn
	cut            bool // closed by Cut, Down or the cleanup
}

// NewProxy starts a proxy on a free port of 127.0.0.1 that forwards each
// connection to target (host:port). It stops when the test ends: the
// cleanup closes the listener and every connection and returns only when
// all of the proxy's goroutines have ended. It fails the test if it cannot
// listen.
func NewProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("storetest: proxy: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, links: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	tb.Cleanup(p.close)
	return p
}

// Addr returns the address clients connect to instead of the target's,
// as host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every open connection, as a network failure would, and
// reports how many client connections it cut (those still being dialled
// to the target included). New connections are let through as before,
// unless the proxy is down.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cutLocked()
}

// Down makes the target look unreachable: it cuts every open connection
// and closes each new one as soon as it is accepted, until Up. It reports
// how many client connections it cut.
func (p *Proxy) Down() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	return p.cutLocked()
}

// Up lets new connections through to the target again after Down.
func (p *Proxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *Proxy) cutLocked() int {
	n := len(p.links)
	for l := range p.links {
		l.cut = true
		l.client.Close()
		if l.server != nil {
			l.server.Close()
		}
		delete(p.links, l)
	}
	return n
}

// close is the test's cleanup: no new connection, every open one closed,
// every goroutine ended.
func (p *Proxy) close() {
	p.mu.Lock()
	p.closed = true
	p.cutLocked()
	p.mu.Unlock()
	p.cancel()
	p.ln.Close()
	p.wg.Wait()
}

// serve accepts connections until the listener is closed.
func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed by the cleanup
		}
		p.mu.Lock()
		if p.down || p.closed {
			p.mu.Unlock()
			c.Close()
			continue
		}
		l := &link{client: c}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.forward(l)
	}
}

// forward dials the target for l and copies both ways until either side
// closes or l is cut.
func (p *Proxy) forward(l *link) {
	defer p.wg.Done()
	var d net.Dialer
	s, err := d.DialContext(p.ctx, "tcp", p.target)
	p.mu.Lock()
	if err != nil || l.cut {
		// The target cannot be reached, or l was cut while dialling:
		// the client sees its connection closed.
		delete(p.links, l)
		p.mu.Unlock()
		l.client.Close()
		if s != nil {
			s.Close()
		}
		return
	}
	l.server = s
	p.mu.Unlock()

	copied := make(chan struct{}) // client to server
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(copied)
		_, _ = io.Copy(s, l.client)
	}()
	_, _ = io.Copy(l.client, s)
	// Either direction ending ends the link: close both sides, so that the
	// other copy returns too, and wait for it.
	l.client.Close()
	s.Close()
	<-copied
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

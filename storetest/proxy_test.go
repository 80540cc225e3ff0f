package storetest_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/queuekit/queue/storetest"
)

// ioTimeout bounds every read and write of these tests: a guard against a
// hang, never what a test waits for.
const ioTimeout = 10 * time.Second

// echoServer listens on 127.0.0.1 and echoes every line back; it stops,
// with all its goroutines, when the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]struct{}{}
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				_, _ = io.Copy(c, c)
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

type client struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{Conn: c, r: bufio.NewReader(c)}
}

// echo sends a line through c and fails the test unless it comes back.
func (c *client) echo(t *testing.T, line string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write %q: %v", line, err)
	}
	got, err := c.r.ReadString('\n')
	if err != nil || got != line+"\n" {
		t.Fatalf("echo of %q = %q, %v", line, got, err)
	}
}

// closed fails the test unless the proxy has closed c: a read ends with
// an error other than the guard's timeout.
func (c *client) closed(t *testing.T) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(ioTimeout))
	b, err := c.r.ReadByte()
	if err == nil {
		t.Fatalf("read %q from a connection the proxy should have closed", b)
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection is still open")
	}
}

func TestProxy(t *testing.T) {
	p := storetest.NewProxy(t, echoServer(t))
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	a.echo(t, "a1")
	b.echo(t, "b1")
	if n := p.Cut(); n != 2 {
		t.Fatalf("Cut = %d, want the 2 open connections", n)
	}
	a.closed(t)
	b.closed(t)
	if n := p.Cut(); n != 0 {
		t.Fatalf("second Cut = %d, want 0", n)
	}

	// After a cut, new connections go through.
	c := dial(t, p.Addr())
	c.echo(t, "c1")

	// Down cuts the open connection and closes new ones at once.
	if n := p.Down(); n != 1 {
		t.Fatalf("Down = %d, want the 1 open connection", n)
	}
	c.closed(t)
	d := dial(t, p.Addr()) // the kernel accepts; the proxy closes it
	d.closed(t)

	// Up lets new connections through again.
	p.Up()
	e := dial(t, p.Addr())
	e.echo(t, "e1")
	e.echo(t, "e2")
}

// TestProxyUnreachableTarget: a connection the proxy cannot forward is
// closed.
func TestProxyUnreachableTarget(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close() // nothing listens there now
	p := storetest.NewProxy(t, target)
	dial(t, p.Addr()).closed(t)
}

// TestProxyCleanup: when the test that made a proxy ends, its connections
// are closed and none of its goroutines is left.
func TestProxyCleanup(t *testing.T) {
	echo := echoServer(t)
	var open, cut *client
	t.Run("proxy", func(st *testing.T) {
		p := storetest.NewProxy(st, echo)
		// The clients belong to the parent test: they outlive the proxy.
		open, cut = dial(t, p.Addr()), dial(t, p.Addr())
		open.echo(st, "open")
		cut.echo(st, "cut")
		// Closed by the client: the proxy ends that link by itself.
		cut.Close()
	})
	open.closed(t)
	if stacks := proxyGoroutines(); stacks != "" {
		t.Fatalf("proxy goroutines left after the cleanup:\n%s", stacks)
	}
}

// proxyGoroutines returns the stacks of the goroutines running Proxy code.
// A goroutine's deferred wg.Done lets the cleanup return a moment before
// the goroutine has left its last frame: one that is only exiting gets
// that moment (yielding, not sleeping; at most 5 s).
func proxyGoroutines() string {
	stacks := proxyStacks()
	for end := time.Now().Add(5 * time.Second); stacks != "" && time.Now().Before(end); stacks = proxyStacks() {
		runtime.Gosched()
	}
	return stacks
}

func proxyStacks() string {
	buf := make([]byte, 1<<16)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "storetest.(*Proxy)") {
			left = append(left, g)
		}
	}
	return strings.Join(left, "\n\n")
}

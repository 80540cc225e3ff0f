package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// FuzzAnnounceServer is differential: the bytes a client reads back
// from announceServer for any request bytes must be the bytes a plain
// net/http server, with the same handlers and settings, gives for them.
//
// The connection is in memory (fuzzConn): the client's bytes, delivered
// step bytes per read (0: as many as the reader asks for), then end of
// file, as from a client that sends its requests and half-closes. Over
// loopback TCP a case would cost a port in TIME_WAIT and a closed
// connection with unread bytes would be reset, losing replies at random;
// in memory each case runs in a synctest bubble, whose fake clock
// bounds it without sleeping and which fails on a goroutine left
// blocked (a hang or a leak).
//
// The announce handler reads what Forwarder.ServeAnnounce reads (the raw
// query, the remote address) and the method, path, protocol and Close,
// and sets its headers as ServeAnnounce does; a query containing "big"
// makes its one write longer than net/http buffers before it must choose
// the framing. The fast path leaves Host, Header and RequestURI unset
// (httpserve.go), so the handler reads none of them.
//
// Normalised: the Date header's value only (the two servers run one
// after the other).
func FuzzAnnounceServer(f *testing.F) {
	get := func(target, proto, headers string) string {
		return "GET " + target + " " + proto + "\r\n" + headers + "\r\n"
	}
	host := "Host: x\r\n"
	a1 := get("/announce?"+q1, "HTTP/1.1", host)
	a2 := get("/announce?"+q2, "HTTP/1.1", host)
	long := strings.Repeat("a", announceBufSize+100)
	for _, seed := range []string{
		// httpserve_test.go's cases.
		a1 + get("/announce?"+q2, "HTTP/1.1", host+"Connection: keep-alive\r\n"),
		get("/announce", "HTTP/1.1", host),
		get("/announce?"+q1, "HTTP/1.1", host+"Connection: keep-alive, Close\r\n"),
		get("/announce?"+q1, "HTTP/1.0", ""),
		get("/announce?"+q1, "HTTP/1.0", "Connection: keep-alive\r\n") + get("/announce?"+q2, "HTTP/1.0", ""),
		get("/announce?"+q1, "HTTP/1.1", host+"content-length: 0\r\n"),
		get("/stats", "HTTP/1.1", host) + a1,
		a1 + get("/scrape?"+q2, "HTTP/1.1", host),
		get("/announcement?"+q1, "HTTP/1.1", host),
		"POST /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab",
		get("/announce?"+q1, "HTTP/1.1", host+"Content-Length: 2\r\n") + "ab" + a2,
		get("/announce?"+q1, "HTTP/1.1", ""),
		"GET /announce?" + q1 + " HTTP/1.1\nHost: x\n\n",
		get("/announce?"+q1, "HTTP/1.1", host+"X-Long: "+long+"\r\n"),
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		// Pipelined, truncated, odd.
		a1 + a2 + a1 + a2,
		a1 + a2[:len(a2)/2],
		"GET /annou",
		"GET /announce?" + q1 + " HTTP/1.1\r\nHo",
		a1 + "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n",
		get("/announce?"+q1, "HTTP/1.1", "Host:   x  \r\nX-A:\t b \r\n"),
		get("/announce?"+q1, "HTTP/1.1", host+"X-A: b\r\n  folded\r\n"),
		get("/announce?"+q1, "HTTP/1.1", " Host: x\r\n"),
		get("/announce?"+q1, "HTTP/1.1", host+"Content-Length: 0\r\nContent-Length: 0\r\n"),
		get("/announce?"+q1, "HTTP/1.1", host+"Content-Length: 0\r\nContent-Length: 1\r\n") + "a",
		get("/announce?"+q1, "HTTP/1.1", host+"Transfer-Encoding: chunked\r\n") + "0\r\n\r\n",
		get("/announce?"+q1, "HTTP/1.1", host+"Host: y\r\n"),
		get("http://x/announce?"+q1, "HTTP/1.1", host),
		get("//announce?"+q1, "HTTP/1.1", host),
		"GET /announce?x HTTP/1.1\n",
		"GET /announce?x HTTP/1.1\nHost: x\r\n\r\n",
		get("/announce?a\x00b", "HTTP/1.1", host),
		get("/announce?a", "HTTP/1.1", host+"X-A: a\x00b\r\n"),
		get("/announce?a", "HTTP/1.1", "Host: a\x00b\r\n"),
		get("/announce?a", "HTTP/1.1", "Host: a b\r\n"),
		get("/announce?a", "HTTP/1.1", host+"X@A: b\r\n"),
		get("/announce?"+long, "HTTP/1.1", host),
		get("/announce?big", "HTTP/1.1", host) + a1,
		get("/announce?big", "HTTP/1.0", "Connection: keep-alive\r\n") + a1,
		get("/announce?big&many", "HTTP/1.1", host) + a1,
		get("/announce?big&many&notype", "HTTP/1.1", host+"Connection: close\r\n"),
		get("/announce?notype", "HTTP/1.0", "Connection: keep-alive\r\n") + get("/announce?many", "HTTP/1.0", ""),
		"GET /announce\r\n\r\n",
		"GET /announce\r\n",
		get("/announce?"+q1, "HTTP/1.2", host),
		get("/announce?"+q1, "HTTP/2.0", host),
		get("/announce?"+q1, "http/1.1", host),
		"get /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET  /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /announce?" + q1 + "  HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET\t/announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\n",
		get("/%61nnounce?"+q1, "HTTP/1.1", host),
		get("/announce?info_hash=%aa%bb&peer_id=%zz", "HTTP/1.1", host),
		get("/announce/../announce?"+q1, "HTTP/1.1", host),
		get("/announce?"+q1, "HTTP/1.1", host+"Expect: 100-continue\r\n"),
		get("/announce?"+q1, "HTTP/1.1", host+"Upgrade: h2c\r\nConnection: Upgrade\r\n"),
		get("/announce?"+q1, "HTTP/1.0", "Connection: close, keep-alive\r\n") + a1,
		get("/announce?"+q1, "HTTP/1.1", host+"Connection: closed\r\n") + a2,
		"\r\n" + a1,
		"\r\n\r\n" + a1,
	} {
		f.Add([]byte(seed), uint16(0))
	}
	f.Add([]byte(a1+a2[:len(a2)/2]), uint16(1))
	f.Add([]byte(a1+a2), uint16(7))
	f.Fuzz(func(t *testing.T, raw []byte, step uint16) {
		if len(raw) > 16<<10 {
			return
		}
		want := fuzzExchange(t, raw, int(step), false)
		got := fuzzExchange(t, raw, int(step), true)
		if !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			from := max(i-200, 0)
			t.Errorf("request %.600q (step %d)\nthe replies differ from byte %d:\nannounceServer: …%.400q\nnet/http:       …%.400q",
				raw, step, i, got[from:], want[from:])
		}
	})
}

var dateHeader = regexp.MustCompile(`\r\nDate: [^\r\n]*\r\n`)

// fuzzExchange serves one connection delivering raw, through
// announceServer (fast) or net/http alone, and returns what the server
// wrote on it, the Date header normalised.
func fuzzExchange(t *testing.T, raw []byte, step int, fast bool) []byte {
	var out []byte
	synctest.Test(t, func(t *testing.T) {
		announce := func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h["Cache-Control"] = hdrNoCache
			if !strings.Contains(r.URL.RawQuery, "notype") { // else sniffed
				h["Content-Type"] = hdrTextPlain
			}
			body := fmt.Appendf(nil, "fast:%s %s %q %s close=%t %s", r.Method, r.URL.Path, r.URL.RawQuery, r.Proto, r.Close, r.RemoteAddr)
			if strings.Contains(r.URL.RawQuery, "big") {
				body = append(body, strings.Repeat("b", 3000)...)
			}
			if !strings.Contains(r.URL.RawQuery, "many") {
				w.Write(body)
				return
			}
			// Writes of 1, 2, 4, … bytes: some fill net/http's buffer
			// part way, some go through it.
			for n := 1; len(body) > 0; n *= 2 {
				k := min(n, len(body))
				w.Write(body[:k])
				body = body[k:]
			}
		}
		mux := http.NewServeMux()
		mux.HandleFunc("GET "+announcePath, announce)
		mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			io.WriteString(w, "slow:"+r.Method+" "+r.URL.RequestURI())
		})
		// serveOn's settings.
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
			ErrorLog: log.New(io.Discard, "", 0)}
		c := newFuzzConn(raw, step)
		ln := newFuzzListener(c)
		served := make(chan error, 2)
		shutdown := srv.Shutdown
		if fast {
			as := newAnnounceServer(announce, srv)
			go func() { served <- as.ServeSlow() }()
			go func() { served <- as.Serve(ln) }()
			shutdown = as.Shutdown
		} else {
			go func() { served <- srv.Serve(ln) }()
			served <- http.ErrServerClosed
		}
		select {
		case <-c.closed:
		case <-time.After(time.Hour): // fake time: reached only if the server hangs on a readable connection
			t.Errorf("fast=%t: the connection is still open after an hour; written so far: %q", fast, c.written())
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			t.Errorf("fast=%t: Shutdown: %v", fast, err)
		}
		for range 2 {
			if err := <-served; err != http.ErrServerClosed {
				t.Errorf("fast=%t: Serve returned %v", fast, err)
			}
		}
		out = dateHeader.ReplaceAll(c.written(), []byte("\r\nDate: (date)\r\n"))
	})
	return out
}

// fuzzConn is a connection from a client that sends in and half-closes:
// reads return in, at most step bytes at a time (0: no limit), then
// io.EOF. It never blocks, so deadlines are no-ops.
type fuzzConn struct {
	mu     sync.Mutex
	in     []byte
	step   int
	out    []byte
	closed chan struct{}
	once   sync.Once
}

func newFuzzConn(in []byte, step int) *fuzzConn {
	return &fuzzConn{in: in, step: step, closed: make(chan struct{})}
}

func (c *fuzzConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return 0, net.ErrClosed
	}
	if len(c.in) == 0 {
		return 0, io.EOF
	}
	if c.step > 0 && len(p) > c.step {
		p = p[:c.step]
	}
	n := copy(p, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *fuzzConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.isClosed() {
		return 0, net.ErrClosed
	}
	c.out = append(c.out, p...)
	return len(p), nil
}

func (c *fuzzConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

func (c *fuzzConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out)
}

func (c *fuzzConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

var fuzzRemote = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}

func (c *fuzzConn) LocalAddr() net.Addr                { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6969} }
func (c *fuzzConn) RemoteAddr() net.Addr               { return fuzzRemote }
func (c *fuzzConn) SetDeadline(t time.Time) error      { return nil }
func (c *fuzzConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *fuzzConn) SetWriteDeadline(t time.Time) error { return nil }

// fuzzListener accepts its one connection, then waits for Close.
type fuzzListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newFuzzListener(c net.Conn) *fuzzListener {
	l := &fuzzListener{ch: make(chan net.Conn, 1), done: make(chan struct{})}
	l.ch <- c
	return l
}

func (l *fuzzListener) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *fuzzListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *fuzzListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6969} }

package main

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testAnnounceServer serves on a loopback listener: announces through
// the fast path answer "fast:QUERY", everything net/http serves answers
// "slow:METHOD PATH?QUERY" (with 405 for a POST to the announce path).
func testAnnounceServer(t *testing.T) (addr string, as *announceServer) {
	t.Helper()
	return testAnnounceServerWith(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = hdrTextPlain
		w.Header()["Cache-Control"] = hdrNoCache
		io.WriteString(w, "fast:"+r.URL.RawQuery)
	})
}

// testAnnounceServerWith is testAnnounceServer with fast serving the
// fast path's announces.
func testAnnounceServerWith(t testing.TB, fast http.HandlerFunc) (addr string, as *announceServer) {
	t.Helper()
	return testAnnounceServerOn(t, fast, nil)
}

// netListener hides a TCP listener's type, so that Serve accepts through
// the net package (acceptLoop, answerFirst) where it would otherwise take
// the raw path.
type netListener struct{ net.Listener }

// testAnnounceServerOn is testAnnounceServerWith serving the listener
// that wrap (if not nil) makes of the TCP listener.
func testAnnounceServerOn(t testing.TB, fast http.HandlerFunc, wrap func(net.Listener) net.Listener) (addr string, as *announceServer) {
	t.Helper()
	// A listener as main's: where the kernel hands over a connection
	// once its request has arrived, a connection's first request is
	// answered by the accepting goroutine (answerFirst), or on Linux with
	// system calls of its own (serveRaw).
	lns, err := listenAll([]string{"127.0.0.1:0"})
	require.NoError(t, err)
	ln := lns[0]
	if wrap != nil {
		ln = wrap(ln)
	}
	return ln.Addr().String(), serveAnnounceOn(t, ln, fast)
}

// serveAnnounceOn runs an announce server on ln, with fast serving the
// fast path's announces and a net/http handler answering "slow:" and the
// request's method and target, until the test ends.
func serveAnnounceOn(t testing.TB, ln net.Listener, fast http.HandlerFunc) *announceServer {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "slow:"+r.Method+" "+r.URL.RequestURI())
	})
	// Panics in the handlers some tests make are logged there, not here.
	as := newAnnounceServer(fast, &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: log.New(io.Discard, "", 0)})
	served := make(chan error, 2)
	go func() { served <- as.ServeSlow() }()
	go func() { served <- as.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		require.NoError(t, as.Shutdown(ctx))
		for range 2 {
			assert.ErrorIs(t, <-served, http.ErrServerClosed)
		}
	})
	return as
}

// exchange writes raw on a new connection and reads n replies from it.
// With wantEOF it then checks that the server closed the connection.
func exchange(t *testing.T, addr, raw string, n int, wantEOF bool) (replies []*http.Response, bodies []string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(waitLimit)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	br := bufio.NewReader(c)
	for range n {
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		replies, bodies = append(replies, resp), append(bodies, string(b))
	}
	if wantEOF {
		_, err = br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the server closes the connection")
	}
	return replies, bodies
}

const q1, q2 = "info_hash=a&port=1", "info_hash=b&port=2"

func TestAnnounceServerServesPlainAnnouncesItself(t *testing.T) {
	addr, _ := testAnnounceServer(t)
	get := func(target, proto, headers string) string {
		return "GET " + target + " " + proto + "\r\n" + headers + "\r\n"
	}
	host := "Host: x\r\n"
	for _, tc := range []struct {
		name   string
		raw    string
		bodies []string
		proto  string
		conn   string // the reply's Connection header (close: resp.Close)
		closed bool   // the server closes the connection after the replies
	}{
		{name: "keep-alive, two in turn", raw: get("/announce?"+q1, "HTTP/1.1", host) + get("/announce?"+q2, "HTTP/1.1", host+"Connection: keep-alive\r\n"),
			bodies: []string{"fast:" + q1, "fast:" + q2}, proto: "HTTP/1.1"},
		{name: "no query", raw: get("/announce", "HTTP/1.1", host), bodies: []string{"fast:"}, proto: "HTTP/1.1"},
		{name: "Connection: close", raw: get("/announce?"+q1, "HTTP/1.1", host+"Connection: Close\r\n"),
			bodies: []string{"fast:" + q1}, proto: "HTTP/1.1", conn: "close", closed: true},
		{name: "HTTP/1.0", raw: get("/announce?"+q1, "HTTP/1.0", ""), bodies: []string{"fast:" + q1}, proto: "HTTP/1.0", closed: true},
		{name: "HTTP/1.0 keep-alive", raw: get("/announce?"+q1, "HTTP/1.0", "Connection: keep-alive\r\n") + get("/announce?"+q2, "HTTP/1.0", ""),
			bodies: []string{"fast:" + q1, "fast:" + q2}, proto: "HTTP/1.0", conn: "keep-alive", closed: true},
		{name: "a zero Content-Length", raw: get("/announce?"+q1, "HTTP/1.1", host+"content-length: 0\r\n"), bodies: []string{"fast:" + q1}, proto: "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replies, bodies := exchange(t, addr, tc.raw, len(tc.bodies), tc.closed)
			assert.Equal(t, tc.bodies, bodies)
			assert.Equal(t, tc.proto, replies[0].Proto)
			if tc.conn == "close" {
				assert.True(t, replies[0].Close, "Connection: close")
			} else {
				assert.Equal(t, tc.conn, replies[0].Header.Get("Connection"))
			}
			assert.Equal(t, "text/plain", replies[0].Header.Get("Content-Type"))
			assert.Equal(t, "no-cache", replies[0].Header.Get("Cache-Control"))
			_, err := http.ParseTime(replies[0].Header.Get("Date"))
			assert.NoError(t, err, "Date")
			assert.EqualValues(t, len(tc.bodies[0]), replies[0].ContentLength)
		})
	}
}

func TestAnnounceServerHandsEverythingElseToNetHTTP(t *testing.T) {
	addr, _ := testAnnounceServer(t)
	long := "X-Long: " + strings.Repeat("a", 2*announceBufSize) + "\r\n"
	for _, tc := range []struct {
		name   string
		raw    string
		status []int
		bodies []string
	}{
		{name: "another path, then an announce on the same connection",
			raw:    "GET /stats HTTP/1.1\r\nHost: x\r\n\r\nGET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\n",
			status: []int{200, 200}, bodies: []string{"slow:GET /stats", "slow:GET /announce?" + q1}},
		{name: "an announce, then another path",
			raw:    "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\nGET /scrape?" + q2 + " HTTP/1.1\r\nHost: x\r\n\r\n",
			status: []int{200, 200}, bodies: []string{"fast:" + q1, "slow:GET /scrape?" + q2}},
		{name: "a longer path", raw: "GET /announcement?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\n",
			status: []int{200}, bodies: []string{"slow:GET /announcement?" + q1}},
		{name: "POST", raw: "POST /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab",
			status: []int{405}},
		{name: "a GET with a body", raw: "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab",
			status: []int{200}, bodies: []string{"slow:GET /announce?" + q1}},
		{name: "no Host", raw: "GET /announce?" + q1 + " HTTP/1.1\r\n\r\n", status: []int{400}},
		{name: "bare LF lines", raw: "GET /announce?" + q1 + " HTTP/1.1\nHost: x\n\n",
			status: []int{200}, bodies: []string{"slow:GET /announce?" + q1}},
		{name: "a head longer than the buffer", raw: "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n" + long + "\r\n",
			status: []int{200}, bodies: []string{"slow:GET /announce?" + q1}},
		{name: "two Connection tokens", raw: "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n",
			status: []int{200}, bodies: []string{"slow:GET /announce?" + q1}},
		{name: "HTTP/2 preface", raw: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", status: []int{http.StatusBadRequest}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			replies, bodies := exchange(t, addr, tc.raw, len(tc.status), false)
			for i, want := range tc.status {
				assert.Equal(t, want, replies[i].StatusCode, "reply %d", i)
				if i < len(tc.bodies) {
					assert.Equal(t, tc.bodies[i], bodies[i], "reply %d", i)
				}
			}
		})
	}
}

// A head that arrives in pieces is read whole before it is answered.
func TestAnnounceServerWaitsForTheWholeHead(t *testing.T) {
	addr, _ := testAnnounceServer(t)
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(waitLimit)))
	br := bufio.NewReader(c)
	for _, part := range []string{"GE", "T /annou", "nce?" + q1 + " HTTP/1.1\r", "\nHost: x\r\n", "\r\n"} {
		_, err := io.WriteString(c, part)
		require.NoError(t, err)
		// Nothing is answered before the head is whole: the reply below
		// is the first bytes read, and it answers the one request.
	}
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, "fast:"+q1, string(b))
	assert.Zero(t, br.Buffered(), "one reply")
}

// Shutdown closes idle connections, and Serve and ServeSlow return
// http.ErrServerClosed (checked by testAnnounceServer's cleanup).
func TestAnnounceServerShutdownClosesIdleConnections(t *testing.T) {
	addr, as := testAnnounceServer(t)
	var conns []net.Conn
	for _, first := range []string{"/announce?" + q1, "/stats"} { // one of each server
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(waitLimit)))
		_, err = io.WriteString(c, "GET "+first+" HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err)
		resp.Body.Close()
		conns = append(conns, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, as.Shutdown(ctx))
	for i, c := range conns {
		_, err := c.Read(make([]byte, 1))
		assert.ErrorIs(t, err, io.EOF, "connection %d is closed", i)
	}
}

// The fast path answers an announce with the forwarder's own reply,
// byte for byte what net/http gives for it, headers included.
func TestAnnounceServerRepliesAsNetHTTP(t *testing.T) {
	h := newHarness(t, []string{"http"}, false)
	mux := h.f.Handler()
	as := newAnnounceServer(h.f.ServeAnnounce, &http.Server{Handler: mux})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go as.ServeSlow()
	go as.Serve(ln)
	t.Cleanup(func() { as.Shutdown(context.Background()) })

	for i, query := range []string{clientQuery(1, 1, 7001, nil), clientQuery(1, 2, 7002, nil),
		clientQuery(1, 3, 7003, map[string]string{"compact": "0"}), "info_hash=short"} {
		// The second peer sees the first; a swarm of two has no random
		// draw, so both servers give the same peers.
		raw := "GET /announce?" + query + " HTTP/1.1\r\nHost: x\r\n\r\n"
		replies, bodies := exchange(t, ln.Addr().String(), raw, 1, false)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/announce?"+query, nil)
		req.RemoteAddr = "127.0.0.1:1"
		mux.ServeHTTP(rec, req)
		// net/http's recorder saw the table after the fast path's
		// announce; the same peer again is known, and answered the same.
		assert.Equal(t, rec.Body.String(), bodies[0], "announce %d", i)
		for _, k := range []string{"Content-Type", "Cache-Control"} {
			assert.Equal(t, rec.Header().Values(k), replies[0].Header.Values(k), "announce %d: %s", i, k)
		}
	}
}

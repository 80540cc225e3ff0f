package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The announce path's HTTP server.
//
// net/http's server pays, on every request, for things an announce does
// not use: a goroutine that reads the connection while the handler runs
// (to cancel the request's context if the client goes away), the read
// deadlines that stop it again, the wake-ups between the two goroutines,
// and a parsed header map and URL. A client that announces on a
// keep-alive connection pays them on every announce, and each wake-up is
// one more turn in a run queue (docs/benchmarks.md, "the announce path's
// own HTTP server").
//
// announceServer reads each request's head from the connection's buffer
// without consuming it. A plain GET of the announce path (HTTP/1.0 or
// 1.1, CRLF lines, no body, no Expect, plain header names and values, at
// most one Connection header with one token, a head that fits the
// buffer) it serves itself: it calls the announce handler with a request
// that carries the query, the client's address and a background context,
// and writes the reply as net/http would (FuzzAnnounceServer compares
// the two byte for byte). Anything else — another path or method, a malformed or
// unusual request — hands the connection, with what it has buffered,
// to a net/http server, which serves it from then on: the fast path
// keeps none of net/http's behaviour from the requests it does not
// take, and the replies it writes are the ones the handler would give
// through net/http.
type announceServer struct {
	announce http.HandlerFunc // called for the requests served here
	slow     *http.Server     // everything else, through handoff
	handoff  *handoffListener
	// idle is how long a connection may wait for its next request,
	// header how long the rest of a request's head may take once it
	// has begun (net/http's ReadHeaderTimeout).
	idle, header time.Duration

	mu      sync.Mutex
	conns   map[net.Conn]struct{} // served here, not yet handed off
	closing bool                  // Shutdown was called
	lns     []io.Closer           // the listeners, and raw listeners' descriptors
	wg      sync.WaitGroup        // the connections' goroutines
	// stopping is closing, read without mu after each reply.
	stopping atomic.Bool
	// inline counts the connections answered by an accept loop's
	// goroutine (answerFirst) or with system calls of their own
	// (answerRaw).
	inline atomic.Uint64
}

// announceBufSize is each connection's read buffer: an announce's head
// is a few hundred bytes; one that does not fit goes to net/http, which
// reads heads up to its MaxHeaderBytes.
const announceBufSize = 4 << 10

// announceIdleTimeout is how long a connection served here may stay
// idle between requests before it is closed.
const announceIdleTimeout = 2 * time.Minute

// deadlineSlack is how stale a connection's idle deadline may grow
// before it is moved: moving it costs a timer update, done at most once
// a second per connection rather than per request.
const deadlineSlack = time.Second

// newAnnounceServer returns a server whose connections are served by
// announce for plain announces and by slow otherwise. slow's
// ReadHeaderTimeout bounds a request head here too (default 10 s).
func newAnnounceServer(announce http.HandlerFunc, slow *http.Server) *announceServer {
	header := slow.ReadHeaderTimeout
	if header <= 0 {
		header = 10 * time.Second
	}
	return &announceServer{
		announce: announce,
		slow:     slow,
		handoff:  newHandoffListener(),
		idle:     announceIdleTimeout,
		header:   header,
		conns:    make(map[net.Conn]struct{}),
	}
}

// ServeSlow runs the net/http server that takes the connections handed
// off, until Shutdown; it returns http.ErrServerClosed then.
func (s *announceServer) ServeSlow() error { return s.slow.Serve(s.handoff) }

// Serve accepts connections on ln until accepting fails or Shutdown is
// called (then it returns http.ErrServerClosed), and closes ln.
// Temporary accept errors (out of file descriptors) are retried after a
// pause, as net/http does. Only Shutdown stops it: on Linux it accepts
// on a duplicate of ln's descriptor, which closing ln leaves open.
//
// Most clients announce on a connection of their own, and the kernel
// hands one over once its request has arrived (TCP_DEFER_ACCEPT, see
// listenAll). Such a connection is answered by the goroutine that
// accepted it: a goroutine for it would cost its start and, as often as
// not, the wake-up of a second thread to run it, more than the answer
// itself. Any other connection gets a goroutine of its own.
//
// On Linux a TCP listener's connections are accepted and answered with
// system calls of their own (serveRaw, rawaccept_linux.go), by one loop
// that answers them, with helper goroutines beside it under a backlog. Elsewhere, and for other listeners, Serve runs an accept
// loop per CPU (procsCeiling) through the net package (answerFirst), so
// that connections do not wait while a loop answers one.
func (s *announceServer) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	rl, raw := newRawListener(ln)
	if raw {
		s.lns = append(s.lns, rl)
	}
	s.mu.Unlock()
	if raw {
		err := s.serveRaw(rl)
		ln.Close()
		rl.Close()
		return err
	}
	loops := procsCeiling()
	errs := make(chan error, loops-1)
	for range loops - 1 {
		go func() { errs <- s.acceptLoop(ln) }()
	}
	err := s.acceptLoop(ln)
	ln.Close() // the other loops end too
	for range loops - 1 {
		<-errs
	}
	return err
}

// acceptLoop is one of Serve's accept loops.
func (s *announceServer) acceptLoop(ln net.Listener) error {
	var pause time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.isClosing() {
				return http.ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				pause = min(max(2*pause, 5*time.Millisecond), time.Second)
				time.Sleep(pause)
				continue
			}
			return err
		}
		pause = 0
		if !s.track(c) {
			c.Close()
			return http.ErrServerClosed
		}
		ac := getAnnounceConn(c)
		if !s.answerFirst(ac) {
			go s.serveConn(ac)
		}
	}
}

// maxInlineReply is the largest reply answerFirst writes on the
// accepting goroutine: one that an empty socket's send buffer takes
// whole, so that the write does not wait for the client to read.
const maxInlineReply = 4 << 10

// answerFirst answers ac's request on the calling goroutine, and ends
// the connection, when the request is there to read without waiting, has
// arrived whole, is one for the fast path and asks for the connection to
// be closed after its reply; it reports whether it did. Otherwise the
// connection, with whatever was read, is serveConn's.
func (s *announceServer) answerFirst(ac *announceConn) bool {
	sc, ok := ac.c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	ac.raw = raw
	_, err = ac.br.Peek(1)
	ac.raw = nil
	if err != nil {
		// Not there yet, or the read failed: serveConn's read waits, or
		// meets the failure again.
		return false
	}
	h, ok := ac.closingRequest()
	if !ok {
		return false
	}
	s.inline.Add(1)
	if !ac.serve(s.announce, &h, s.slow.ErrorLog) {
		s.endConn(ac, false)
		return true
	}
	if len(ac.out) > maxInlineReply {
		go func() {
			ac.c.Write(ac.out)
			s.endConn(ac, true)
		}()
		return true
	}
	ac.c.Write(ac.out)
	s.endConn(ac, true)
	return true
}

// closingRequest returns the head of the request in ac's buffer when it
// has arrived whole, is one for the fast path and asks for the
// connection to be closed after its reply: one an accept loop answers
// itself (answerFirst, answerRaw).
func (ac *announceConn) closingRequest() (requestHead, bool) {
	buf, _ := ac.br.Peek(ac.br.Buffered())
	h, complete := parseHead(buf)
	return h, complete && h.fast && !h.keepAlive
}

// endConn closes ac's connection and stops tracking it; ac goes back to
// the pool when reusable (see release).
func (s *announceServer) endConn(ac *announceConn, reusable bool) {
	c := ac.c
	c.Close()
	s.untrack(c)
	if reusable {
		ac.release()
	}
}

func (s *announceServer) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// track adds c to the connections served here; false once Shutdown was
// called.
func (s *announceServer) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *announceServer) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}

// setIdleDeadline moves c's read deadline to idle from now, unless
// Shutdown has begun (then it leaves the deadline Shutdown set, in the
// past). Under s.mu, so that Shutdown's deadline is never overwritten.
func (s *announceServer) setIdleDeadline(c net.Conn, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	c.SetReadDeadline(now.Add(s.idle))
	return true
}

// Shutdown stops accepting, closes the connections served here once
// their request in progress (if any) is answered, shuts down the
// net/http server with ctx, and waits for the connections' goroutines
// or for ctx.
func (s *announceServer) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.stopping.Store(true)
	lns := s.lns
	// A request already read is answered (its write has no deadline);
	// a connection waiting for one wakes and is closed.
	for c := range s.conns {
		c.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
	// Outside mu: closing a raw listener's descriptor waits for its
	// accept loop to leave the descriptor, which takes mu (trackRaw).
	for _, ln := range lns {
		ln.Close()
	}
	err := s.slow.Shutdown(ctx)
	s.handoff.Close()
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	return err
}

// announceConn is one connection's state, reused from request to
// request.
type announceConn struct {
	c      net.Conn
	remote string // c's remote address, the requests' RemoteAddr
	// raw, while set, makes the reads of br one attempt that does not
	// wait (readNow): answerFirst's.
	raw syscall.RawConn
	// fd, when not -1, is a descriptor accepted by a raw listener, read
	// without waiting (rawRead) until it becomes c.
	fd      int
	br      *bufio.Reader // reads c, through ac's Read
	req     http.Request
	url     url.URL
	w       announceWriter
	out     []byte
	dateSec int64 // the second date was formatted for
	date    []byte
	// deadline is when the read deadline was last moved (zero: it must
	// be moved before the next wait).
	deadline time.Time
	served   bool // a request has been answered on the connection
}

// announceConns holds the state of connections that have ended, for
// the next ones. A client that opens a connection for each announce
// (most do) would otherwise allocate a read buffer, a request and a
// reply buffer for every announce: most of the bytes the announce path
// allocated, and so of the garbage collector's work.
var announceConns = sync.Pool{New: func() any { return newAnnounceConn() }}

func newAnnounceConn() *announceConn {
	ac := &announceConn{br: bufio.NewReaderSize(nil, announceBufSize), fd: -1}
	ac.req = http.Request{Header: http.Header{}}
	ac.w.h = make(http.Header, 4)
	return ac
}

// maxPooledReply is the largest reply buffer kept with a pooled
// connection state; a larger one (a reply to a huge numwant) is left to
// the garbage collector rather than held.
const maxPooledReply = 16 << 10

// getAnnounceConn returns connection state for c, from the pool.
func getAnnounceConn(c net.Conn) *announceConn {
	ac := announceConns.Get().(*announceConn)
	ac.c = c
	ac.br.Reset(ac)
	ac.remote = c.RemoteAddr().String()
	return ac
}

// errNotYet is what a read that does not wait returns when nothing has
// arrived.
var errNotYet = errors.New("forwarder: nothing to read yet")

// Read reads c for br: with raw set, in one attempt that does not wait.
func (ac *announceConn) Read(p []byte) (int, error) {
	switch {
	case ac.fd != -1:
		return rawRead(ac.fd, p)
	case ac.raw != nil:
		return readNow(ac.raw, p)
	}
	return ac.c.Read(p)
}

// release returns ac to the pool. Only a connection that ended on the
// fast path may: a handed-off one's buffer is still being read, and a
// handler that panicked may have left the request changed.
func (ac *announceConn) release() {
	ac.c, ac.fd = nil, -1
	ac.br.Reset(nil)
	ac.remote, ac.req.RemoteAddr, ac.url.RawQuery = "", "", ""
	clear(ac.req.Header)
	ac.w.reset()
	ac.deadline, ac.served = time.Time{}, false
	if cap(ac.out) > maxPooledReply {
		ac.out = nil
	}
	if cap(ac.w.body) > maxPooledReply {
		ac.w.body = nil
	}
	announceConns.Put(ac)
}

// serveConn serves ac's connection, request after request, until it
// ends or is handed off to net/http.
func (s *announceServer) serveConn(ac *announceConn) {
	c := ac.c
	handedOff, reusable := false, true
	defer func() {
		if handedOff {
			s.untrack(c)
		} else {
			s.endConn(ac, reusable)
		}
	}()
	for {
		now := time.Now()
		if now.Sub(ac.deadline) > deadlineSlack {
			if !s.setIdleDeadline(c, now) {
				return
			}
			ac.deadline = now
		}
		head, err := s.readHead(ac)
		if err != nil {
			return
		}
		if !head.fast {
			// Not one for the fast path: net/http serves this request,
			// from the bytes buffered, and the connection from now on.
			c.SetReadDeadline(time.Time{})
			handedOff = s.handoff.put(&bufferedConn{Conn: c, r: ac.br})
			return
		}
		if !ac.serve(s.announce, &head, s.slow.ErrorLog) {
			reusable = false
			return
		}
		ac.served = true
		// A connection that misses stopping here stops at its next
		// read: Shutdown has moved its deadline into the past.
		if _, err := c.Write(ac.out); err != nil || !head.keepAlive || s.stopping.Load() {
			return
		}
	}
}

// requestHead is what readHead found at the start of the buffer.
type requestHead struct {
	fast      bool   // a plain announce, for the fast path
	n         int    // the head's length in bytes, to consume when fast
	target    []byte // the request target (path and query), within the buffer
	http10    bool   // HTTP/1.0: the reply's protocol, and no keep-alive unless asked
	keepAlive bool
}

// readHead waits for a request and reads its head from the buffer
// without consuming it. It returns a head that is not fast as soon as
// the request cannot be one for the fast path. The wait for the head's
// first bytes is bounded by the idle deadline; once it has begun, the
// rest must come within s.header.
func (s *announceServer) readHead(ac *announceConn) (requestHead, error) {
	// Between requests net/http waits for 4 bytes (conn.serve's
	// Peek(4)) and closes the connection without a reply if it ends
	// before them; before the first it reads whatever comes.
	first := 1
	if ac.served {
		first = 4
	}
	if _, err := ac.br.Peek(first); err != nil {
		return requestHead{}, err
	}
	headDeadline := false
	for {
		buf, _ := ac.br.Peek(ac.br.Buffered())
		h, complete := parseHead(buf)
		if complete || !h.fast {
			return h, nil
		}
		if len(buf) == ac.br.Size() {
			return requestHead{}, nil // a head this long is net/http's to read
		}
		if !headDeadline {
			// The head has begun but not arrived whole: the rest has
			// s.header, and the idle deadline is set again after it.
			if !s.setHeadDeadline(ac.c) {
				return requestHead{}, net.ErrClosed
			}
			headDeadline, ac.deadline = true, time.Time{}
		}
		if _, err := ac.br.Peek(len(buf) + 1); err != nil {
			if err == io.EOF {
				// The client sent part of a head and stopped sending:
				// net/http answers what it has (400, or a request
				// line without a version), so it gets those bytes.
				return requestHead{}, nil
			}
			return requestHead{}, err
		}
	}
}

// setHeadDeadline bounds the rest of a request's head, unless Shutdown
// has begun.
func (s *announceServer) setHeadDeadline(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	c.SetReadDeadline(time.Now().Add(s.header))
	return true
}

var (
	announceGet = []byte("GET " + announcePath)
	http11      = []byte(" HTTP/1.1")
	http10      = []byte(" HTTP/1.0")
)

// parseHead reads a request head from buf. complete reports that buf
// holds all of it (its empty line); h.fast is false as soon as the
// request is not one for the fast path, complete or not.
func parseHead(buf []byte) (h requestHead, complete bool) {
	if !bytes.HasPrefix(buf, announceGet) {
		// Fast until buf's prefix rules it out: more bytes may yet make
		// it "GET /announce".
		h.fast = len(buf) < len(announceGet) && bytes.HasPrefix(announceGet, buf)
		return h, false
	}
	line, rest, ok := bytes.Cut(buf, []byte("\n"))
	if !ok {
		h.fast = true
		return h, false
	}
	line, ok = bytes.CutSuffix(line, []byte("\r"))
	if !ok {
		return h, false
	}
	var target []byte
	switch {
	case bytes.HasSuffix(line, http11):
		target = line[len("GET ") : len(line)-len(http11)]
		h.keepAlive = true
	case bytes.HasSuffix(line, http10):
		target = line[len("GET ") : len(line)-len(http10)]
		h.http10 = true
	default:
		return h, false
	}
	// The path itself, nothing longer ("/announcer"), and a target
	// without spaces, fragments or control bytes.
	if len(target) > len(announcePath) && target[len(announcePath)] != '?' {
		return h, false
	}
	for _, c := range target {
		if c <= ' ' || c == '#' || c == 0x7f {
			return h, false
		}
	}
	h.target = target
	host, conn := false, false
	for {
		line, rest, ok = bytes.Cut(rest, []byte("\n"))
		if !ok {
			h.fast = true
			return h, false
		}
		line, ok = bytes.CutSuffix(line, []byte("\r"))
		if !ok {
			return requestHead{}, false
		}
		if len(line) == 0 {
			break
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !isToken(name) || !isPlainValue(value) {
			return requestHead{}, false // malformed, folded or unusual: net/http's to judge
		}
		value = bytes.Trim(value, " \t")
		switch {
		case bytes.EqualFold(name, []byte("Host")):
			if host || !isPlainHost(value) {
				return requestHead{}, false
			}
			host = true
		case bytes.EqualFold(name, []byte("Connection")):
			// One header with one token: net/http reads the first
			// Connection header for some decisions and all of them for
			// others, and the two may disagree.
			switch {
			case conn:
				return requestHead{}, false
			case bytes.EqualFold(value, []byte("close")):
				h.keepAlive = false
			case bytes.EqualFold(value, []byte("keep-alive")):
				h.keepAlive = true
			default:
				return requestHead{}, false
			}
			conn = true
		case bytes.EqualFold(name, []byte("Content-Length")):
			if string(value) != "0" {
				return requestHead{}, false
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")), bytes.EqualFold(name, []byte("Expect")),
			bytes.EqualFold(name, []byte("Upgrade")):
			return requestHead{}, false
		}
	}
	if !host && !h.http10 {
		return requestHead{}, false // HTTP/1.1 requires Host: net/http answers 400
	}
	h.n = len(buf) - len(rest)
	h.fast = true
	return h, true
}

// isToken reports whether name is a header name net/http takes: an RFC
// 9110 token.
func isToken(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0) {
			return false
		}
	}
	return true
}

// isPlainValue reports whether a header value holds printable ASCII,
// spaces and tabs only; anything else is net/http's to judge.
func isPlainValue(v []byte) bool {
	for _, c := range v {
		if (c < ' ' && c != '\t') || c >= 0x7f {
			return false
		}
	}
	return true
}

// isPlainHost reports whether a Host value is a name or an address with
// an optional port: bytes net/http's Host check takes. Anything else,
// valid or not, is net/http's to judge.
func isPlainHost(v []byte) bool {
	for _, c := range v {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '.' || c == '-' || c == ':' || c == '[' || c == ']') {
			return false
		}
	}
	return true
}

// serve answers the request head h on ac with announce, leaving the
// reply in ac.out, and consumes the head from the buffer. It returns
// false if announce panicked: as net/http does, the panic is logged (to
// logger, or the log package's default) and the connection closed
// without a reply.
func (ac *announceConn) serve(announce http.HandlerFunc, h *requestHead, logger *log.Logger) (ok bool) {
	// A fresh request each time but for its (emptied) header map: the
	// handler may have changed the last one (its URL, address, a parsed
	// form), and the state serves request after request, connection
	// after connection.
	ac.url = url.URL{Path: announcePath}
	if len(h.target) > len(announcePath) {
		ac.url.RawQuery = string(h.target[len(announcePath)+1:])
	}
	hdr := ac.req.Header
	if hdr == nil {
		hdr = http.Header{}
	}
	clear(hdr) // the fast path passes no headers
	ac.req = http.Request{Method: http.MethodGet, URL: &ac.url, Header: hdr, Body: http.NoBody,
		RemoteAddr: ac.remote, Close: !h.keepAlive,
		RequestURI: announcePath, // the handler reads the query from URL
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
	if h.http10 {
		ac.req.Proto, ac.req.ProtoMinor = "HTTP/1.0", 0
	}
	ac.br.Discard(h.n)
	ac.w.reset()
	defer func() {
		if err := recover(); err != nil {
			if logger == nil {
				logger = log.Default()
			}
			logger.Printf("forwarder: panic serving %s: %v\n%s", ac.req.RemoteAddr, err, debug.Stack())
			ok = false
		}
	}()
	announce(&ac.w, &ac.req)
	ac.out = ac.appendReply(ac.out[:0], h)
	return true
}

// appendReply appends the response to h written by the handler, framed
// as net/http frames it: with a Content-Length when the body fit
// net/http's buffer, else chunked (HTTP/1.1) or ended by closing the
// connection (HTTP/1.0, which then clears h.keepAlive).
func (ac *announceConn) appendReply(b []byte, h *requestHead) []byte {
	w := &ac.w
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	if h.http10 {
		b = append(b, "HTTP/1.0 "...)
	} else {
		b = append(b, "HTTP/1.1 "...)
	}
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\n"...)
	hdr := w.h
	var keysBuf [8]string
	keys := keysBuf[:0]
	for k := range hdr {
		if k != "Content-Length" && k != "Date" && k != "Connection" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range hdr[k] {
			b = append(b, k...)
			b = append(b, ": "...)
			b = append(b, v...)
			b = append(b, "\r\n"...)
		}
	}
	// Then net/http's own headers, in its order.
	b = append(b, "Date: "...)
	b = append(b, ac.httpDate()...)
	b = append(b, "\r\n"...)
	chunked := len(w.chunks) > 0
	if !chunked {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(w.body)), 10)
		b = append(b, "\r\n"...)
	} else if h.http10 {
		h.keepAlive = false
	}
	if _, ok := hdr["Content-Type"]; !ok && len(w.body) > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, http.DetectContentType(w.body)...)
		b = append(b, "\r\n"...)
	}
	switch {
	case !h.keepAlive && !h.http10:
		b = append(b, "Connection: close\r\n"...)
	case h.keepAlive && h.http10:
		b = append(b, "Connection: keep-alive\r\n"...)
	}
	if !chunked {
		b = append(b, "\r\n"...)
		return append(b, w.body...)
	}
	if h.http10 {
		b = append(b, "\r\n"...)
		return append(b, w.body...)
	}
	b = append(b, "Transfer-Encoding: chunked\r\n\r\n"...)
	body := w.body
	for _, n := range append(w.chunks, w.pending) {
		if n == 0 {
			continue
		}
		b = strconv.AppendInt(b, int64(n), 16)
		b = append(b, "\r\n"...)
		b = append(b, body[:n]...)
		b = append(b, "\r\n"...)
		body = body[n:]
	}
	return append(b, "0\r\n\r\n"...)
}

// httpDate is the Date header's value, formatted once a second.
func (ac *announceConn) httpDate() []byte {
	now := time.Now()
	if sec := now.Unix(); sec != ac.dateSec || ac.date == nil {
		ac.dateSec = sec
		ac.date = now.UTC().AppendFormat(ac.date[:0], http.TimeFormat)
	}
	return ac.date
}

// announceWriter is the http.ResponseWriter of the fast path: it keeps
// the status, headers and body for appendReply, and where net/http would
// have cut the body into chunks.
//
// It serves handlers that write as Forwarder.ServeAnnounce does: status
// 200, headers set before the first Write, and none of Content-Length,
// Transfer-Encoding, Connection, Date or trailers among them, no Flush.
type announceWriter struct {
	h      http.Header
	status int
	body   []byte
	// net/http holds a reply's first bufferBeforeChunking bytes to send
	// it with a Content-Length; a body that outgrows the buffer while
	// the handler runs goes out chunked, one chunk per flush of the
	// buffer. chunks are those flushes' lengths (none: the body fit),
	// pending the bytes held after them.
	chunks  []int
	pending int
}

// bufferBeforeChunking is net/http's bufferBeforeChunkingSize.
const bufferBeforeChunking = 2048

func (w *announceWriter) reset() {
	clear(w.h)
	w.status = 0
	w.body = w.body[:0]
	w.chunks = w.chunks[:0]
	w.pending = 0
}

// Header returns the reply's headers.
func (w *announceWriter) Header() http.Header { return w.h }

// WriteHeader sets the reply's status; the first call wins.
func (w *announceWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

// Write appends to the reply's body, noting the flushes net/http's
// buffer (a bufio.Writer) would make.
func (w *announceWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, b...)
	n := len(b)
	for n > bufferBeforeChunking-w.pending {
		if w.pending == 0 { // written through, whole
			w.chunks = append(w.chunks, n)
			return len(b), nil
		}
		fill := bufferBeforeChunking - w.pending
		w.chunks = append(w.chunks, bufferBeforeChunking)
		w.pending, n = 0, n-fill
	}
	w.pending += n
	return len(b), nil
}

// bufferedConn is a connection whose first bytes are in r's buffer.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// handoffListener is the net.Listener the net/http server accepts the
// handed-off connections from.
type handoffListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newHandoffListener() *handoffListener {
	return &handoffListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

// put hands c to the net/http server; false (and c closed) once the
// listener is closed.
func (l *handoffListener) put(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		c.Close()
		return false
	}
}

// Accept returns the next connection handed off.
func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops Accept; connections handed off later are closed.
func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder: the connections come from the real listeners.
func (l *handoffListener) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "handoff" }

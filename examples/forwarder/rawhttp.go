package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// rawHTTP announces to a plain-http upstream with a minimal HTTP/1.1
// client: one GET, a status line, headers and a body of Content-Length
// bytes, chunks, or up to the connection's close. Forwarding is the
// forwarder's main cost, and net/http's Transport spends two goroutines
// and their channel handoffs on every connection; opentracker closes the
// connection after each reply, so every forward pays for them afresh.
// Connections a server keeps open are reused (a few per upstream). A
// redirect is left to net/http (errRedirect), and so are upstreams
// reached through a proxy (the raw client is not used for them). Safe for
// concurrent use.
type rawHTTP struct {
	addr    string // host:port to dial
	host    string // the Host header
	dialer  net.Dialer
	timeout time.Duration // without a deadline in ctx
	idle    chan net.Conn // kept-alive connections
}

// errRedirect says the upstream answered 3xx: net/http follows it.
var errRedirect = errors.New("redirect")

// rawIdleConns is how many kept-alive connections an upstream keeps.
const rawIdleConns = 16

var rawReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}

// newRawHTTP returns the raw client for u, or nil when u is to be left to
// client: https, a proxy that client's Transport would use for u, or a
// Transport that is not an *http.Transport (a test's, a wrapper's).
func newRawHTTP(u *url.URL, client *http.Client) *rawHTTP {
	if u.Scheme != "http" || u.User != nil {
		return nil
	}
	timeout := 10 * time.Second
	var rt http.RoundTripper = http.DefaultTransport
	if client != nil {
		if client.Timeout > 0 {
			timeout = client.Timeout
		}
		if client.Transport != nil {
			rt = client.Transport
		}
	}
	tr, ok := rt.(*http.Transport)
	if !ok {
		return nil
	}
	if tr.Proxy != nil {
		if p, err := tr.Proxy(&http.Request{URL: u}); err != nil || p != nil {
			return nil
		}
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &rawHTTP{addr: addr, host: u.Host, timeout: timeout, dialer: net.Dialer{Timeout: timeout},
		idle: make(chan net.Conn, rawIdleConns)}
}

// get sends GET target (a path and query) and returns the reply's status
// and body, at most limit+1 bytes of it. A kept-alive connection that
// fails before the reply's first byte (the server closed it meanwhile) is
// replaced once, as net/http does.
func (r *rawHTTP) get(ctx context.Context, target string, limit int) (int, []byte, error) {
	for attempt := 0; ; attempt++ {
		c, reused, err := r.conn(ctx)
		if err != nil {
			return 0, nil, err
		}
		status, body, keep, started, err := r.roundTrip(ctx, c, target, limit)
		if err != nil {
			c.Close()
			if reused && !started && attempt == 0 && ctx.Err() == nil {
				continue
			}
			// The connection's deadline is ctx's, and may pass a moment
			// before ctx says so.
			if d, ok := ctx.Deadline(); ok && isTimeout(err) && !time.Now().Before(d) {
				err = fmt.Errorf("%w (%v)", context.DeadlineExceeded, err)
			} else if ctx.Err() != nil && !errors.Is(err, errRedirect) {
				err = fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return 0, nil, err
		}
		if keep {
			select {
			case r.idle <- c:
			default:
				c.Close()
			}
		} else {
			c.Close()
		}
		return status, body, nil
	}
}

func (r *rawHTTP) conn(ctx context.Context) (net.Conn, bool, error) {
	select {
	case c := <-r.idle:
		return c, true, nil
	default:
	}
	c, err := r.dialer.DialContext(ctx, "tcp", r.addr)
	return c, false, err
}

// roundTrip is one request on c. keep reports whether c may carry
// another; started whether any of the reply arrived.
func (r *rawHTTP) roundTrip(ctx context.Context, c net.Conn, target string, limit int) (status int, body []byte, keep, started bool, err error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(r.timeout)
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	req := make([]byte, 0, len(target)+len(r.host)+64)
	req = append(req, "GET "...)
	req = append(req, target...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, r.host...)
	req = append(req, "\r\nUser-Agent: queuekit-forwarder/1\r\n\r\n"...)
	if _, err := c.Write(req); err != nil {
		return 0, nil, false, false, err
	}
	rd := rawReaders.Get().(*bufio.Reader)
	rd.Reset(c)
	defer func() { rd.Reset(nil); rawReaders.Put(rd) }()
	line, err := rd.ReadSlice('\n')
	if err != nil {
		return 0, nil, false, len(line) > 0, err
	}
	proto, rest, _ := strings.Cut(strings.TrimRight(string(line), "\r\n"), " ")
	code, _, _ := strings.Cut(rest, " ")
	if status, err = strconv.Atoi(code); err != nil || !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 {
		return 0, nil, false, true, fmt.Errorf("malformed HTTP status line %q", line)
	}
	keep = proto != "HTTP/1.0"
	length, chunked := -1, false
	for {
		h, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, nil, false, true, err
		}
		name, val, _ := strings.Cut(strings.TrimSpace(string(h)), ":")
		if name == "" {
			break
		}
		val = strings.TrimSpace(val)
		switch {
		case strings.EqualFold(name, "Content-Length"):
			if length, err = strconv.Atoi(val); err != nil || length < 0 {
				return 0, nil, false, true, fmt.Errorf("malformed Content-Length %q", val)
			}
		case strings.EqualFold(name, "Transfer-Encoding"):
			chunked = strings.EqualFold(val, "chunked")
			if !chunked {
				return 0, nil, false, true, fmt.Errorf("unsupported Transfer-Encoding %q", val)
			}
		case strings.EqualFold(name, "Connection"):
			keep = keep && !strings.EqualFold(val, "close")
		}
	}
	if status >= 300 && status < 400 {
		return status, nil, false, true, errRedirect
	}
	var src io.Reader = rd
	switch {
	case chunked:
		src, keep = httputil.NewChunkedReader(rd), false
	case length >= 0:
		if length > limit {
			keep = false
		}
		src = io.LimitReader(rd, int64(length))
	default:
		keep = false // the body ends with the connection
	}
	body, err = io.ReadAll(io.LimitReader(src, int64(limit)+1))
	if err != nil {
		return 0, nil, false, true, err
	}
	if length >= 0 && len(body) < min(length, limit+1) {
		return 0, nil, false, true, io.ErrUnexpectedEOF
	}
	return status, body, keep && rd.Buffered() == 0, true, nil
}

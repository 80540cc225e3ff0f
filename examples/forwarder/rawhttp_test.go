package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const okReply = "d8:intervali1800e5:peers6:\x7f\x00\x00\x01\x1b\x59e"

// rawServer answers each request on a connection with reply(i), i
// counting requests over all connections, and closes the connection when
// closeAfter is set. It counts the connections it accepted.
type rawServer struct {
	ln    net.Listener
	conns atomic.Int64
	reqs  atomic.Int64
}

func startRawServer(t *testing.T, closeAfter bool, reply func(i int64) string) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &rawServer{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := http.ReadRequest(r); err != nil {
						return
					}
					io.WriteString(c, reply(s.reqs.Add(1)))
					if closeAfter {
						return
					}
				}
			}()
		}
	}()
	return s
}

func (s *rawServer) upstream(t *testing.T) *Upstream {
	t.Helper()
	up, err := ParseUpstream("raw=http://"+s.ln.Addr().String()+"/announce", newHTTPClient(2*time.Second))
	require.NoError(t, err)
	require.NotNil(t, up.client.(*httpAnnouncer).raw, "plain http takes the raw client")
	return up
}

func lengthReply(body string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
}

// The replies trackers send are read whole, whatever their framing, and
// a kept-alive connection carries the next announce.
func TestRawHTTPFramings(t *testing.T) {
	a := peerAnnounce(1, 1, EventNone)
	for _, tc := range []struct {
		name       string
		closeAfter bool
		reply      string
		conns      int64 // connections for 3 announces
	}{
		{"content-length, kept alive", false, lengthReply(okReply), 1},
		{"content-length, closed silently (opentracker)", true, lengthReply(okReply), 3},
		{"connection close", false, fmt.Sprintf("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s", len(okReply), okReply), 3},
		{"HTTP/1.0 to the close", true, "HTTP/1.0 200 OK\r\n\r\n" + okReply, 3},
		{"chunked", true, fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n", okReply[:5], len(okReply)-5, okReply[5:]), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, tc.closeAfter, func(int64) string { return tc.reply })
			up := srv.upstream(t)
			for i := range 3 {
				r, err := up.client.announce(context.Background(), a, EventNone)
				require.NoError(t, err, "announce %d", i)
				assert.Equal(t, 30*time.Minute, r.Interval)
				require.Len(t, r.Peers, 1)
				assert.Equal(t, "127.0.0.1:7001", r.Peers[0].String())
			}
			assert.Equal(t, tc.conns, srv.conns.Load())
		})
	}
}

// Errors are classified as net/http's were: a status, a bencoded failure
// with it, a reply over the limit, a malformed status line.
func TestRawHTTPErrors(t *testing.T) {
	a := peerAnnounce(1, 1, EventNone)
	for _, tc := range []struct {
		name, reply, want string
	}{
		{"429", "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n", "429"},
		{"404 with a reason", strings.Replace(lengthReply("d14:failure reason7:unknowne"), "200 OK", "404 Not Found", 1), "unknown"},
		{"too long", fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", maxReplyBytes+10) + strings.Repeat("x", maxReplyBytes+10), "longer than"},
		{"garbage", "SMTP ready\r\n\r\n", "malformed HTTP status line"},
		{"cut short", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nd8:", "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startRawServer(t, true, func(int64) string { return tc.reply })
			_, err := srv.upstream(t).client.announce(context.Background(), a, EventNone)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, err.Error(), "info_hash", "the request's URL stays out of errors")
		})
	}
}

// A redirect is followed by net/http; an upstream that never answers
// fails at the context's deadline.
func TestRawHTTPRedirectAndTimeout(t *testing.T) {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, okReply)
	}))
	defer target.Close()
	srv := startRawServer(t, true, func(int64) string {
		return "HTTP/1.1 302 Found\r\nLocation: " + target.URL + "/announce\r\nContent-Length: 0\r\n\r\n"
	})
	r, err := srv.upstream(t).client.announce(context.Background(), peerAnnounce(1, 1, EventNone), EventNone)
	require.NoError(t, err)
	assert.Len(t, r.Peers, 1)

	hung, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer hung.Close()
	up, err := ParseUpstream("hung=http://"+hung.Addr().String()+"/announce", newHTTPClient(time.Minute))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = up.client.announce(ctx, peerAnnounce(1, 1, EventNone), EventNone)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// https, proxied upstreams and clients with their own RoundTripper stay
// with net/http.
func TestRawHTTPOnlyForPlainHTTP(t *testing.T) {
	up, err := ParseUpstream("s=https://tracker.example/announce", newHTTPClient(time.Second))
	require.NoError(t, err)
	assert.Nil(t, up.client.(*httpAnnouncer).raw)
	proxied := newHTTPClient(time.Second)
	proxied.Transport.(*http.Transport).Proxy = func(*http.Request) (*url.URL, error) { return url.Parse("http://127.0.0.1:3128") }
	up, err = ParseUpstream("p=http://tracker.example/announce", proxied)
	require.NoError(t, err)
	assert.Nil(t, up.client.(*httpAnnouncer).raw)
	own := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) { return nil, io.EOF })}
	up, err = ParseUpstream("o=http://tracker.example/announce", own)
	require.NoError(t, err)
	assert.Nil(t, up.client.(*httpAnnouncer).raw)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

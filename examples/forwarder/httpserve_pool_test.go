package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoAnnounce answers with the request's client address and query, and
// panics for the query "panic".
func echoAnnounce(w http.ResponseWriter, r *http.Request) {
	if r.URL.RawQuery == "panic" {
		panic("test panic")
	}
	if len(r.Header) != 0 || r.URL.Path != announcePath || r.Form != nil {
		panic(fmt.Sprintf("left by an earlier request: headers %v, path %q, form %v", r.Header, r.URL.Path, r.Form))
	}
	addr, q := r.RemoteAddr, r.URL.RawQuery
	// A handler may change its request; the next must not see it.
	r.Header.Set("X-Left", "by this request")
	r.URL.Path, r.RemoteAddr, r.Form = "/changed", "changed", url.Values{"x": nil}
	w.Header()["Content-Type"] = hdrTextPlain
	io.WriteString(w, addr+" "+q)
}

// TestAnnounceServerPooledStateCarriesNothingOver serves connections one
// after another, so that each takes the state the last one released, and
// checks that every reply is built from its own connection's request
// only: the client address, the query, the buffered bytes.
func TestAnnounceServerPooledStateCarriesNothingOver(t *testing.T) {
	addr, _ := testAnnounceServerWith(t, echoAnnounce)
	get := func(q, conn string) string {
		return "GET /announce?" + q + " HTTP/1.1\r\nHost: x\r\n" + conn + "\r\n"
	}
	for i := range 60 {
		q := fmt.Sprintf("n=%d", i)
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(waitLimit)))
		br := bufio.NewReader(c)
		read := func() string {
			t.Helper()
			resp, err := http.ReadResponse(br, nil)
			require.NoError(t, err)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return string(b)
		}
		want := c.LocalAddr().String() + " " + q
		switch i % 4 {
		case 0: // a connection per announce
			_, err = io.WriteString(c, get(q, "Connection: close\r\n"))
			require.NoError(t, err)
			assert.Equal(t, want, read(), "connection %d", i)
		case 1: // keep-alive, then the start of a request left in the buffer
			_, err = io.WriteString(c, get(q, "")+get(q+"b", "")+"GE")
			require.NoError(t, err)
			assert.Equal(t, want, read(), "connection %d", i)
			assert.Equal(t, want+"b", read(), "connection %d", i)
		case 2: // a handler that panics: the connection closes, no reply
			_, err = io.WriteString(c, get("panic", ""))
			require.NoError(t, err)
			_, err = br.ReadByte()
			assert.ErrorIs(t, err, io.EOF, "connection %d", i)
		case 3: // a long query and a header the next must not see
			q += "&" + strings.Repeat("x", 3000)
			_, err = io.WriteString(c, get(q, "X-Extra: 1\r\nConnection: close\r\n"))
			require.NoError(t, err)
			assert.Equal(t, c.LocalAddr().String()+" "+q, read(), "connection %d", i)
		}
		c.Close()
	}
}

// TestAnnounceConnReleaseClears checks what release leaves in pooled
// state: nothing of the connection, its request or its reply, and no
// reply buffer larger than maxPooledReply.
func TestAnnounceConnReleaseClears(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	defer server.Close()
	ac := getAnnounceConn(server)
	ac.url.RawQuery = "info_hash=a"
	ac.req.Header.Set("X-A", "1")
	ac.w.Header().Set("X-B", "2")
	ac.w.WriteHeader(http.StatusTeapot)
	ac.w.Write(make([]byte, 3*bufferBeforeChunking))
	ac.out = make([]byte, 0, 2*maxPooledReply)
	ac.served, ac.deadline = true, time.Now()
	ac.release()

	assert.Nil(t, ac.c)
	assert.Empty(t, ac.req.RemoteAddr)
	assert.Empty(t, ac.url.RawQuery)
	assert.Empty(t, ac.req.Header)
	assert.Empty(t, ac.w.h)
	assert.Zero(t, ac.w.status)
	assert.Empty(t, ac.w.body)
	assert.Empty(t, ac.w.chunks)
	assert.Zero(t, ac.w.pending)
	assert.Nil(t, ac.out, "a reply buffer over maxPooledReply is dropped")
	assert.False(t, ac.served)
	assert.True(t, ac.deadline.IsZero())
	assert.Zero(t, ac.br.Buffered())
	assert.Equal(t, announceBufSize, ac.br.Size())
}

// BenchmarkAnnounceServerConnPerRequest is a client that opens a
// connection for each announce, as most BitTorrent clients do, against
// the announce server on loopback (client and server in this process:
// the allocations reported are both sides').
func BenchmarkAnnounceServerConnPerRequest(b *testing.B) {
	addr := benchAnnounceServer(b)
	buf := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		if err := announceOnce(addr, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAnnounceServerConnPerRequestParallel is
// BenchmarkAnnounceServerConnPerRequest from 8 clients a CPU at once, so
// that connections wait to be accepted: the server answers a backlog.
func BenchmarkAnnounceServerConnPerRequestParallel(b *testing.B) {
	addr := benchAnnounceServer(b)
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 512)
		for pb.Next() {
			if err := announceOnce(addr, buf); err != nil {
				b.Error(err) // not Fatal: this is not the benchmark's goroutine
				return
			}
		}
	})
}

// closingAnnounce is the announce of announceOnce.
var closingAnnounce = []byte("GET /announce?info_hash=aaaaaaaaaaaaaaaaaaaa&port=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")

// announceOnce opens a connection to addr, announces once asking for it
// to be closed, and reads the reply (into buf) until the server closes.
func announceOnce(addr string, buf []byte) error {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.Write(closingAnnounce); err != nil {
		return err
	}
	for {
		if _, err := c.Read(buf); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// BenchmarkAnnounceServerKeepAliveOnce is a client that opens a
// connection, announces once without asking for it to be closed, reads
// the reply and closes it: a keep-alive connection that carries one
// announce (a client's next comes after the server's idle timeout).
func BenchmarkAnnounceServerKeepAliveOnce(b *testing.B) {
	addr := benchAnnounceServer(b)
	req := []byte("GET /announce?info_hash=aaaaaaaaaaaaaaaaaaaa&port=1 HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(nil)
	b.ReportAllocs()
	for b.Loop() {
		c := benchSend(b, addr, req)
		br.Reset(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		c.Close()
	}
}

// benchAnnounceServer runs an announce server answering every announce
// with an empty peer list, and returns its address.
func benchAnnounceServer(b *testing.B) string {
	addr, _ := testAnnounceServerWith(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = hdrTextPlain
		io.WriteString(w, "d8:intervali1800e5:peers0:e")
	})
	return addr
}

// benchSend opens a connection to addr and writes req on it.
func benchSend(b *testing.B, addr string, req []byte) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := c.Write(req); err != nil {
		b.Fatal(err)
	}
	return c
}

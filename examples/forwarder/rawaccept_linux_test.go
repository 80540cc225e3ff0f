//go:build linux && (amd64 || arm64)

package main

import (
	"bufio"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A raw listener gives the handler the client's address as the net
// package would, over IPv4 and IPv6.
func TestRawListenerRemoteAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		lns, err := listenAll([]string{addr})
		if err != nil && strings.Contains(addr, "::") {
			t.Logf("no IPv6 loopback: %v", err)
			continue
		}
		require.NoError(t, err)
		got := make(chan string, 1)
		as := serveAnnounceOn(t, lns[0], func(w http.ResponseWriter, r *http.Request) {
			got <- r.RemoteAddr
			io.WriteString(w, "ok")
		})
		c := dialSend(t, lns[0].Addr().String(), "GET /announce HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		_, body := readReply(t, bufio.NewReader(c))
		assert.Equal(t, "ok", body)
		assert.Equal(t, c.LocalAddr().String(), <-got, addr)
		assert.Equal(t, uint64(1), as.inline.Load(), "answered with raw calls")
	}
}

// A connection accepted before its request arrived (a listener without
// deferred accept) is served once the request comes; a client that
// connects and closes without a word costs nothing but the close.
func TestRawListenerRequestAfterAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	as := serveAnnounceOn(t, ln, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fast:"+r.URL.RawQuery)
	})
	silent, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	silent.Close()

	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(waitLimit)))
	br := bufio.NewReader(c)
	// Two in turn on a keep-alive connection: it is served as a net.Conn
	// from the first request on, whichever way it was accepted.
	for _, q := range []string{q1, q2} {
		_, err = io.WriteString(c, "GET /announce?"+q+" HTTP/1.1\r\nHost: x\r\n\r\n")
		require.NoError(t, err)
		_, body := readReply(t, br)
		assert.Equal(t, "fast:"+q, body)
	}
	assert.Zero(t, as.inline.Load(), "keep-alive is not answered by the accept loop")
}

// A reply larger than the socket takes at once is written in part by
// the accept loop and the rest by a goroutine, while the client reads
// it; the loop goes on answering meanwhile.
func TestRawListenerReplyLargerThanTheSocket(t *testing.T) {
	lns, err := listenAll([]string{"127.0.0.1:0"})
	require.NoError(t, err)
	big := strings.Repeat("0123456789abcdef", 1<<20) // 16 MiB
	as := serveAnnounceOn(t, lns[0], func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "big" {
			io.WriteString(w, big)
			return
		}
		io.WriteString(w, "small")
	})
	addr := lns[0].Addr().String()
	get := func(q string) string {
		return "GET /announce?" + q + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	}
	slow := dialSend(t, addr, get("big"))
	// Not read yet: the reply waits in the socket and the goroutine.
	c := dialSend(t, addr, get("small"))
	_, body := readReply(t, bufio.NewReader(c))
	assert.Equal(t, "small", body)

	_, body = readReply(t, bufio.NewReader(slow))
	assert.Equal(t, len(big), len(body))
	assert.True(t, body == big, "the large reply arrived whole and in order")
	assert.Equal(t, uint64(2), as.inline.Load())
}

func TestSockaddrString(t *testing.T) {
	// Covered end to end by TestRawListenerRemoteAddr; the mapped and
	// zoned forms here, which loopback does not produce.
	ln, err := net.Listen("tcp", "[::]:0")
	if err != nil {
		t.Skipf("no dual-stack listener: %v", err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	got := make(chan string, 1)
	serveAnnounceOn(t, ln, func(w http.ResponseWriter, r *http.Request) {
		got <- r.RemoteAddr
	})
	c := dialSend(t, "127.0.0.1:"+port, "GET /announce HTTP/1.0\r\n\r\n")
	readReply(t, bufio.NewReader(c))
	assert.Equal(t, c.LocalAddr().String(), <-got, "an IPv4 client of a dual-stack listener, as net gives it")
}

// Shutdown under a stream of connections returns, and the accept loop
// with it: the loop, busy answering, takes the server's lock that
// Shutdown must not hold while it closes the loop's descriptor.
func TestRawListenerShutdownUnderLoad(t *testing.T) {
	lns, err := listenAll([]string{"127.0.0.1:0"})
	require.NoError(t, err)
	answered := make(chan struct{}, 1000)
	as := newAnnounceServer(func(w http.ResponseWriter, r *http.Request) {
		select {
		case answered <- struct{}{}:
		default:
		}
		io.WriteString(w, "ok")
	}, &http.Server{Handler: http.NotFoundHandler(), ErrorLog: log.New(io.Discard, "", 0)})
	served := make(chan error, 2)
	go func() { served <- as.ServeSlow() }()
	go func() { served <- as.Serve(lns[0]) }()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.Dial("tcp", lns[0].Addr().String())
				if err != nil {
					continue // refused once the listener is closed
				}
				c.SetDeadline(time.Now().Add(waitLimit))
				io.WriteString(c, "GET /announce HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				io.Copy(io.Discard, c)
				c.Close()
			}
		})
	}
	for range 200 {
		<-answered
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	require.NoError(t, as.Shutdown(ctx))
	for range 2 {
		assert.ErrorIs(t, <-served, http.ErrServerClosed)
	}
	close(stop)
	wg.Wait()
}

// A backlog of connections brings a helper to accept beside the loop
// that waits in the poller: while that loop is held inside the fourth
// connection in a row it answers, the fifth is answered by another.
func TestRawListenerHelperAcceptsBeside(t *testing.T) {
	defer setProcs(runtime.GOMAXPROCS(0))
	setProcs(2) // one helper at least, woken
	// listenAll's listener hands over a connection once its request has
	// arrived: each is answered by the loop that accepts it.
	lns, err := listenAll([]string{"127.0.0.1:0"})
	require.NoError(t, err)
	ln := lns[0]
	var (
		calls   atomic.Int64
		entered = make(chan struct{})
		release = make(chan struct{})
		beside  = make(chan struct{})
		once    sync.Once
		alone   atomic.Bool
	)
	as := serveAnnounceOn(t, ln, func(w http.ResponseWriter, r *http.Request) {
		switch k := calls.Add(1); {
		case k == 1:
			close(entered)
			<-release
		case k == rawInlineBatch:
			// The loop woke a helper before this call; the call
			// returns when another connection has been answered.
			select {
			case <-beside:
			case <-time.After(waitLimit):
				alone.Store(true)
			}
		case k > rawInlineBatch:
			once.Do(func() { close(beside) })
		}
		io.WriteString(w, "ok")
	})
	addr := ln.Addr().String()
	req := "GET /announce HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	conns := []net.Conn{dialSend(t, addr, req)}
	<-entered // the loop is held inside the first
	for range 3 * rawInlineBatch {
		conns = append(conns, dialSend(t, addr, req)) // waiting to be accepted
	}
	close(release)
	for i, c := range conns {
		_, body := readReply(t, bufio.NewReader(c))
		assert.Equal(t, "ok", body, "connection %d", i)
	}
	assert.False(t, alone.Load(), "no connection was answered beside the held loop")
	assert.Equal(t, uint64(len(conns)), as.inline.Load(), "all answered with raw calls")
}

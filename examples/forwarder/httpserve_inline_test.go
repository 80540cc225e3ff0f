package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dialSend opens a connection to addr and writes raw on it.
func dialSend(t *testing.T, addr, raw string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(waitLimit)))
	_, err = io.WriteString(c, raw)
	require.NoError(t, err)
	return c
}

// readReply reads one reply from br and its body.
func readReply(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

// A connection whose one request came with it and asks to be closed is
// answered by the goroutine that accepted it; a keep-alive one is
// served as before, by a goroutine of its own.
func TestAnnounceServerAnswersOnTheAcceptingGoroutine(t *testing.T) {
	forEachAcceptPath(t, func(t *testing.T, wrap func(net.Listener) net.Listener) {
		testAnswersOnTheAcceptingGoroutine(t, wrap)
	})
}

// forEachAcceptPath runs test with the listener as listenAll makes it
// (the raw path, on Linux) and through the net package (acceptLoop).
func forEachAcceptPath(t *testing.T, test func(t *testing.T, wrap func(net.Listener) net.Listener)) {
	t.Run("listener", func(t *testing.T) { test(t, nil) })
	t.Run("net", func(t *testing.T) {
		test(t, func(ln net.Listener) net.Listener { return netListener{ln} })
	})
}

func testAnswersOnTheAcceptingGoroutine(t *testing.T, wrap func(net.Listener) net.Listener) {
	addr, as := testAnnounceServerOn(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fast:"+r.URL.RawQuery)
	}, wrap)
	for i, raw := range []string{
		"GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
		"GET /announce?" + q1 + " HTTP/1.0\r\n\r\n",
	} {
		c := dialSend(t, addr, raw)
		br := bufio.NewReader(c)
		resp, body := readReply(t, br)
		assert.Equal(t, "fast:"+q1, body)
		assert.True(t, resp.Close)
		_, err := br.ReadByte()
		assert.ErrorIs(t, err, io.EOF, "the server closes the connection")
		assert.Equal(t, uint64(i+1), as.inline.Load(), "answered by the accepting goroutine")
	}

	c := dialSend(t, addr, "GET /announce?"+q1+" HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	_, body := readReply(t, br)
	assert.Equal(t, "fast:"+q1, body)
	_, err := io.WriteString(c, "GET /announce?"+q2+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.NoError(t, err)
	_, body = readReply(t, br)
	assert.Equal(t, "fast:"+q2, body, "the keep-alive connection's next request")
	assert.Equal(t, uint64(2), as.inline.Load(), "a keep-alive connection has a goroutine of its own")
}

// answerFirst leaves a connection to serveConn, with what it read, when
// the request has not arrived whole or is not the fast path's: the
// reply is the same.
func TestAnswerFirstLeavesWhatItCannotAnswer(t *testing.T) {
	_, as := testAnnounceServer(t)
	full := "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	for _, tc := range []struct {
		name        string
		first, rest string
		deferAccept bool // accepted once the first bytes arrived
		body        string
	}{
		{name: "nothing sent yet", rest: full, body: "fast:" + q1},
		{name: "half a head", first: full[:30], rest: full[30:], deferAccept: true, body: "fast:" + q1},
		{name: "another path", first: "GET /stats HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", deferAccept: true,
			body: "slow:GET /stats"},
		{name: "keep-alive", first: "GET /announce?" + q1 + " HTTP/1.1\r\nHost: x\r\n\r\n", deferAccept: true, body: "fast:" + q1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ln net.Listener
			if tc.deferAccept {
				lns, err := listenAll([]string{"127.0.0.1:0"})
				require.NoError(t, err)
				ln = lns[0]
			} else {
				var err error
				ln, err = net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
			}
			defer ln.Close()
			c := dialSend(t, ln.Addr().String(), tc.first)
			sc, err := ln.Accept()
			require.NoError(t, err)
			require.True(t, as.track(sc))
			ac := getAnnounceConn(sc)
			before := as.inline.Load()
			require.False(t, as.answerFirst(ac), "answered")
			assert.Equal(t, before, as.inline.Load())
			assert.Equal(t, len(tc.first), ac.br.Buffered(), "what answerFirst read stays buffered")
			go as.serveConn(ac)
			_, err = io.WriteString(c, tc.rest)
			require.NoError(t, err)
			_, body := readReply(t, bufio.NewReader(c))
			assert.Equal(t, tc.body, body)
		})
	}
}

// A reply too large for answerFirst to write without the risk of
// waiting for the client is written by a goroutine; a handler that
// panics gets the connection closed without a reply, as on the other
// path, and the next connection is answered.
func TestAnswerFirstLargeReplyAndPanic(t *testing.T) {
	forEachAcceptPath(t, testLargeReplyAndPanic)
}

func testLargeReplyAndPanic(t *testing.T, wrap func(net.Listener) net.Listener) {
	big := strings.Repeat("x", 3*maxInlineReply)
	addr, as := testAnnounceServerOn(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.RawQuery {
		case "panic":
			panic("handler fails")
		case "big":
			io.WriteString(w, big)
		default:
			io.WriteString(w, "fast:"+r.URL.RawQuery)
		}
	}, wrap)
	get := func(q string) string {
		return "GET /announce?" + q + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	}
	c := dialSend(t, addr, get("big"))
	resp, body := readReply(t, bufio.NewReader(c))
	assert.Equal(t, big, body)
	assert.Equal(t, []string{"chunked"}, resp.TransferEncoding, "as net/http frames a body past its buffer")

	c = dialSend(t, addr, get("panic"))
	_, err := bufio.NewReader(c).ReadByte()
	assert.ErrorIs(t, err, io.EOF, "closed without a reply")

	c = dialSend(t, addr, get(q1))
	_, body = readReply(t, bufio.NewReader(c))
	assert.Equal(t, "fast:"+q1, body)
	assert.Equal(t, uint64(3), as.inline.Load())
}

// Many clients at once, each on connections of their own, get their
// own replies: the accept loops answer side by side, from pooled state.
func TestAnnounceServerConcurrentConnectionsPerAnnounce(t *testing.T) {
	forEachAcceptPath(t, testConcurrentConnectionsPerAnnounce)
}

func testConcurrentConnectionsPerAnnounce(t *testing.T, wrap func(net.Listener) net.Listener) {
	addr, as := testAnnounceServerOn(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fast:"+r.URL.RawQuery)
	}, wrap)
	const clients, each = 8, 40
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			for j := range each {
				q := fmt.Sprintf("info_hash=%d&port=%d", i, j)
				c, err := net.Dial("tcp", addr)
				if !assert.NoError(t, err) {
					return
				}
				c.SetDeadline(time.Now().Add(waitLimit))
				_, err = io.WriteString(c, "GET /announce?"+q+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				assert.NoError(t, err)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if assert.NoError(t, err) {
					b, _ := io.ReadAll(resp.Body)
					assert.Equal(t, "fast:"+q, string(b))
				}
				c.Close()
			}
		})
	}
	wg.Wait()
	assert.Positive(t, as.inline.Load())
}

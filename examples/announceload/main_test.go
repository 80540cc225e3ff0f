package main

import (
	"bufio"
	"bytes"
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

func TestPercentile(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var d []time.Duration
		for _, v := range n {
			d = append(d, time.Duration(v)*time.Millisecond)
		}
		return d
	}
	assert.Zero(t, percentile(nil, 99))
	assert.Equal(t, 5*time.Millisecond, percentile(ms(5), 50))
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond
	}
	assert.Equal(t, 50*time.Millisecond, percentile(hundred, 50))
	assert.Equal(t, 99*time.Millisecond, percentile(hundred, 99))
	assert.Equal(t, 100*time.Millisecond, percentile(hundred, 100))
}

// The announces are loadbench.lua's: the prefix, the torrent's index,
// a 20-byte peer id, a port and the other parameters.
func TestQuery(t *testing.T) {
	cfg, err := parseFlags([]string{"-url", "http://127.0.0.1:1/announce", "-torrents", "3"}, io.Discard)
	require.NoError(t, err)
	w := newWorker(cfg)
	hashes := map[string]bool{}
	for range 200 {
		u, err := url.Parse(string(w.appendQuery(nil)))
		require.NoError(t, err)
		q := u.Query()
		h := q.Get("info_hash")
		require.Len(t, h, 20)
		assert.Equal(t, "loadbench-torren\x00\x00\x00", h[:19])
		assert.Less(t, h[19], byte(3))
		hashes[h] = true
		assert.Len(t, q.Get("peer_id"), 20)
		assert.True(t, strings.HasPrefix(q.Get("peer_id"), "-LB0001-"))
		assert.NotEmpty(t, q.Get("port"))
		assert.Equal(t, "1", q.Get("compact"))
		assert.Equal(t, "50", q.Get("numwant"))
	}
	assert.Len(t, hashes, 3, "every torrent is announced")
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-url", "http://x/announce", "-rate", "-1"},
		{"-url", "http://x/announce", "-c", "0"},
		{"-url", "http://x/announce", "-prefix", "abc"},
		{"-url", "http://x/announce", "-d", "0"},
		{"-url", "http://x/announce", "extra"},
		{"-url", "https://x/announce"},
	} {
		_, err := parseFlags(args, io.Discard)
		assert.Error(t, err, "%q", args)
	}
}

// Every request is answered and counted: ok, failure, busy failure and
// other statuses, closed loop and paced, on keep-alive connections and on
// connections the server closes after every reply.
func TestLoadCounts(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("info_hash") == "" {
			http.Error(w, "no hash", http.StatusBadRequest)
			return
		}
		switch n.Add(1) % 4 {
		case 0:
			io.WriteString(w, "d14:failure reason12:tracker busye")
		case 1:
			io.WriteString(w, "d14:failure reason14:not authorizede")
		case 2:
			w.Header().Set("Connection", "close")
			io.WriteString(w, "d8:intervali1800e5:peers0:e")
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	for _, rate := range []string{"0", "1000000"} {
		n.Store(0)
		var out bytes.Buffer
		code := run([]string{"-url", srv.URL + "/announce", "-c", "4", "-n", "200", "-d", "0", "-rate", rate}, &out, io.Discard)
		require.Zero(t, code)
		line := strings.TrimSpace(out.String())
		assert.Contains(t, line, "LOADBENCH requests=200 ", "rate %s", rate)
		assert.Contains(t, line, " failures=100 busy=50 non200=50 sockerr=0 ", "rate %s", rate)
	}
}

// A paced run sends no sooner than the schedule: n requests at rate r take
// at least (n-1)/r.
func TestLoadPaced(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "d8:intervali1800e5:peers0:e")
	}))
	defer srv.Close()
	cfg, err := parseFlags([]string{"-url", srv.URL, "-c", "2", "-n", "21", "-d", "0", "-rate", "200"}, io.Discard)
	require.NoError(t, err)
	res := load(context.Background(), cfg)
	assert.Len(t, res.latencies, 21)
	assert.GreaterOrEqual(t, res.elapsed, 100*time.Millisecond)
}

// opentracker answers HTTP/1.1 with a Content-Length and no "Connection:
// close", then closes: the next request on the connection goes out on a
// new one, and no error is counted.
func TestLoadSurvivesSilentClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if l == "\r\n" {
						break
					}
				}
				const body = "d8:intervali1800e5:peers0:e"
				fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
			}()
		}
	}()
	var out bytes.Buffer
	require.Zero(t, run([]string{"-url", "http://" + ln.Addr().String() + "/announce", "-c", "2", "-n", "100", "-d", "0"}, &out, io.Discard))
	assert.Contains(t, out.String(), "LOADBENCH requests=100 ")
	assert.Contains(t, out.String(), " failures=0 busy=0 non200=0 sockerr=0 ")
}

// With -close every announce asks for "Connection: close" and goes on a
// connection of its own, even to a server that would keep it alive.
func TestLoadCloseEachRequest(t *testing.T) {
	var (
		conns  atomic.Int64
		asked  atomic.Int64
		served atomic.Int64
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.Close {
			asked.Add(1)
		}
		io.WriteString(w, "d8:intervali1800e5:peers0:e")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	var out bytes.Buffer
	require.Zero(t, run([]string{"-url", srv.URL + "/announce", "-c", "2", "-n", "50", "-d", "0", "-close"}, &out, io.Discard))
	assert.Contains(t, out.String(), "LOADBENCH requests=50 ")
	assert.Contains(t, out.String(), " failures=0 busy=0 non200=0 sockerr=0 ")
	assert.Equal(t, int64(50), served.Load())
	assert.Equal(t, int64(50), asked.Load(), "requests with Connection: close")
	assert.Equal(t, int64(50), conns.Load(), "connections")
}

// A run past its deadline is over even before its context's timer has
// marked it done: errors from then on end the run, not count as socket
// errors.
func TestOver(t *testing.T) {
	assert.False(t, over(context.Background()))
	ctx, cancel := context.WithCancel(context.Background())
	assert.False(t, over(ctx))
	cancel()
	assert.True(t, over(ctx))
	assert.False(t, over(deadlineCtx{context.Background(), time.Now().Add(time.Hour)}))
	assert.True(t, over(deadlineCtx{context.Background(), time.Now().Add(-time.Millisecond)}),
		"a deadline passed, Err still nil")
}

// deadlineCtx has a deadline its Err does not report.
type deadlineCtx struct {
	context.Context
	dl time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.dl, true }

func TestStatusCode(t *testing.T) {
	for line, want := range map[string]int{
		"HTTP/1.1 200 OK\r\n":         200,
		"HTTP/1.0 503 Busy\r\n":       503,
		"HTTP/1.1 404\r\n":            404,
		"HTTP/1.1 20\r\n":             -1,
		"HTTP/1.1 2x0 OK\r\n":         -1,
		"HTTP/1.1\r\n":                -1,
		"garbage":                     -1,
		"HTTP/1.1 -12 negative\r\n":   -1,
		"HTTP/1.1 200OK-no-space\r\n": 200,
	} {
		assert.Equal(t, want, statusCode([]byte(line)), "%q", line)
	}
	for s, want := range map[string]int{"0": 0, "27": 27, "123456789": 123456789, "1234567890": -1, "": -1, "1a": -1, "-1": -1} {
		assert.Equal(t, want, atoi([]byte(s)), "%q", s)
	}
}

// A reply the generator cannot read (a bad status line or Content-Length)
// counts as a request with no reply, and its error is reported.
func TestLoadBadReply(t *testing.T) {
	for _, reply := range []string{
		"HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: many\r\n\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				io.WriteString(c, reply)
				c.Close()
			}
		}()
		var out, errs bytes.Buffer
		require.Zero(t, run([]string{"-url", "http://" + ln.Addr().String() + "/announce", "-c", "1", "-n", "3", "-d", "0"}, &out, &errs))
		ln.Close()
		<-done
		assert.Contains(t, out.String(), "LOADBENCH requests=0 ", "%q", reply)
		assert.Contains(t, out.String(), " sockerr=3 ", "%q", reply)
		assert.Contains(t, errs.String(), "3 requests got no reply; the first: ", "%q", reply)
	}
}

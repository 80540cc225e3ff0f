// Command announceload sends BitTorrent announces to an HTTP tracker at a
// fixed rate, wrk2-style, and prints their latency percentiles: the paced
// load of scripts/loadbench.sh.
//
//	go run ./examples/announceload -url http://127.0.0.1:6969/announce -rate 4000 -d 20s
//
// Request i is due at start + i/rate, whether or not earlier requests
// have been answered (open loop). Its latency is measured from when it
// was due, not from when it was sent, so a tracker that falls behind is
// charged for the wait of every request queued behind a slow one
// (coordinated omission corrected, as wrk2 does). -c connections send
// the requests, each on its own keep-alive connection (reconnecting when
// the server closes it, as opentracker does after every reply). With
// -rate 0 every connection sends its next request as soon as the last
// is answered (closed loop, as wrk), and latency is the service time.
// It drops a connection with a reset, not a FIN, so that a server
// closing every connection leaves no socket in TIME_WAIT to stall the
// next connect from 127.0.0.1's ports. With -close every request asks
// for "Connection: close" and goes on a connection of its own, whatever
// the server does: two trackers compared under -close both accept a
// connection per announce (opentracker closes every connection anyway),
// and the generator does the same work for each, instead of keeping its
// connections to one and reconnecting per request to the other.
//
// The announces are scripts/loadbench.lua's: torrent i of -torrents has
// the info hash -prefix (16 bytes in hex) followed by i as 4 big-endian
// bytes; each announce comes from a new random peer id and port, a
// seeder one time in four, compact=1, numwant=50.
//
// It prints one line for loadbench.sh:
//
//	LOADBENCH requests=N p50_us=N p99_us=N max_us=N failures=N busy=N non200=N sockerr=N duration_us=N late_us=N
//
// failures counts bencoded failure replies, busy those of them that say
// "busy" (a tracker refusing the announce for load), non200 the replies
// with another HTTP status, sockerr the requests that got no reply (the
// first one's error goes to standard error).
// late_us is how far behind the schedule the last request was sent: more
// than a few milliseconds means the load generator itself could not keep
// the rate (too few connections, or no CPU left), and the run's rate was
// lower than asked.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// config is the command's flags.
type config struct {
	url      string
	rate     float64 // requests per second; 0: closed loop
	conns    int
	duration time.Duration
	total    int // stop after this many requests (0: after duration)
	torrents int
	prefix   [16]byte
	timeout  time.Duration
	close    bool // a connection per request ("Connection: close")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "announceload:", err)
		return 2
	}
	res := load(context.Background(), cfg)
	fmt.Fprintln(stdout, res.line())
	if res.firstErr != nil {
		fmt.Fprintf(stderr, "announceload: %d requests got no reply; the first: %v\n", res.sockerr, res.firstErr)
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("announceload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.url, "url", "", "the tracker's announce `URL`, e.g. http://127.0.0.1:6969/announce")
	fs.Float64Var(&cfg.rate, "rate", 0, "send `N` announces per second on a fixed schedule; 0 sends each connection's next as soon as its last is answered")
	fs.IntVar(&cfg.conns, "c", 50, "`N` connections")
	fs.DurationVar(&cfg.duration, "d", 10*time.Second, "how long to send")
	fs.IntVar(&cfg.total, "n", 0, "stop after `N` announces, or after -d if that comes first (0: run for -d; -d 0: run until N)")
	fs.IntVar(&cfg.torrents, "torrents", 10000, "announce over `N` torrents")
	prefix := fs.String("prefix", "6c6f616462656e63682d746f7272656e", "the info hashes' first 16 bytes, in `HEX`")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "give up on a reply after this long (counted in sockerr)")
	fs.BoolVar(&cfg.close, "close", false, "send each announce on a new connection, with \"Connection: close\" (as opentracker closes every connection: the same work for both trackers)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case cfg.url == "":
		return cfg, errors.New("-url is required")
	case cfg.rate < 0:
		return cfg, fmt.Errorf("-rate %g: must be >= 0", cfg.rate)
	case cfg.conns < 1:
		return cfg, fmt.Errorf("-c %d: must be at least 1", cfg.conns)
	case cfg.duration <= 0 && cfg.total <= 0:
		return cfg, errors.New("-d or -n must be positive")
	case cfg.torrents < 1:
		return cfg, fmt.Errorf("-torrents %d: must be at least 1", cfg.torrents)
	case cfg.timeout <= 0:
		return cfg, fmt.Errorf("-timeout %v: must be positive", cfg.timeout)
	}
	if u, err := url.Parse(cfg.url); err != nil || u.Scheme != "http" || u.Host == "" {
		return cfg, fmt.Errorf("-url %q: want http://host:port/path", cfg.url)
	}
	b, err := hex.DecodeString(*prefix)
	if err != nil || len(b) != 16 {
		return cfg, fmt.Errorf("-prefix %q: want 32 hex digits", *prefix)
	}
	copy(cfg.prefix[:], b)
	return cfg, nil
}

// result is one run's totals.
type result struct {
	latencies []time.Duration // one per answered request, sorted
	failures  int64           // bencoded failure replies
	busy      int64           // of which "busy"
	non200    int64
	sockerr   int64
	firstErr  error // the first of the sockerr requests' errors
	elapsed   time.Duration
	late      time.Duration // how late the last request was sent
}

// percentile returns the p-th percentile (0 < p <= 100) of the sorted
// latencies, by the nearest-rank method; 0 with none.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

func (r *result) line() string {
	us := func(d time.Duration) int64 { return d.Microseconds() }
	var maxLat time.Duration
	if n := len(r.latencies); n > 0 {
		maxLat = r.latencies[n-1]
	}
	return fmt.Sprintf("LOADBENCH requests=%d p50_us=%d p99_us=%d max_us=%d failures=%d busy=%d non200=%d sockerr=%d duration_us=%d late_us=%d",
		len(r.latencies), us(percentile(r.latencies, 50)), us(percentile(r.latencies, 99)), us(maxLat),
		r.failures, r.busy, r.non200, r.sockerr, us(r.elapsed), us(r.late))
}

// load runs cfg and returns its totals.
func load(ctx context.Context, cfg config) *result {
	cancel := context.CancelFunc(func() {})
	if cfg.duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, cfg.duration)
	}
	defer cancel()
	var (
		next  atomic.Int64 // the next request's index
		mu    sync.Mutex
		total result
		wg    sync.WaitGroup
	)
	start := time.Now()
	for range cfg.conns {
		wg.Go(func() {
			w := newWorker(cfg)
			defer w.close()
			var pace *time.Timer // one per worker, reset for each wait
			for {
				i := next.Add(1) - 1
				if cfg.total > 0 && i >= int64(cfg.total) {
					break
				}
				due := time.Now()
				if cfg.rate > 0 {
					due = start.Add(time.Duration(float64(i) * float64(time.Second) / cfg.rate))
					if d := time.Until(due); d > 0 {
						if pace == nil {
							pace = time.NewTimer(d)
						} else {
							pace.Reset(d)
						}
						select {
						case <-ctx.Done():
						case <-pace.C:
						}
					}
				}
				if over(ctx) {
					break
				}
				w.late = max(w.late, time.Since(due))
				w.announce(ctx, due)
			}
			if pace != nil {
				pace.Stop()
			}
			mu.Lock()
			total.latencies = append(total.latencies, w.res.latencies...)
			total.failures += w.res.failures
			total.busy += w.res.busy
			total.non200 += w.res.non200
			total.sockerr += w.res.sockerr
			if total.firstErr == nil {
				total.firstErr = w.res.firstErr
			}
			total.late = max(total.late, w.late)
			mu.Unlock()
		})
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	slices.Sort(total.latencies)
	return &total
}

// over reports whether the run is over: ctx is done or past its deadline.
// A dial or read that fails at the deadline may return before ctx's own
// timer has marked it done; its error is the run ending, not a socket
// error, and the worker must not spin on new dials that fail at once.
func over(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// worker is one connection and its share of the totals. It speaks just
// enough HTTP/1.1 for a tracker's reply (a status line, headers, a body of
// Content-Length bytes or up to the connection's close), so that the load
// generator spends little of the CPU the trackers share with it.
type worker struct {
	cfg    config
	host   string // host:port to dial
	path   string // the announce path
	dialer net.Dialer
	conn   net.Conn
	rd     *bufio.Reader // reset onto each new connection
	rng    *rand.Rand
	res    result
	late   time.Duration
	req    []byte
	body   []byte
}

func newWorker(cfg config) *worker {
	u, _ := url.Parse(cfg.url) // checked by parseFlags
	w := &worker{
		cfg: cfg,
		// No keep-alive probes: a run is shorter than their first, and
		// setting them up costs a connection four system calls.
		dialer: net.Dialer{Timeout: cfg.timeout, KeepAlive: -1},
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		rd:     bufio.NewReaderSize(nil, 4096),
		body:   make([]byte, 0, 4096),
	}
	w.host, w.path = u.Host, u.EscapedPath()
	return w
}

// close drops the worker's connection with a reset (SO_LINGER 0), not a
// FIN. A server that closes after every reply (opentracker) would
// otherwise leave a socket in TIME_WAIT per request, and from 127.0.0.1
// the client's ports come round again within the minute TIME_WAIT lasts:
// a connect to a 4-tuple still waiting stalls for a second or more. The
// reset ends the server's half-closed socket (FIN_WAIT2) outright.
func (w *worker) close() {
	if w.conn != nil {
		if tc, ok := w.conn.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		w.conn.Close()
		w.conn = nil
	}
}

// announce sends one announce due at due and records its outcome.
func (w *worker) announce(ctx context.Context, due time.Time) {
	status, err := w.roundTrip(ctx)
	if err != nil {
		w.close()
		if !over(ctx) {
			w.res.sockerr++
			if w.res.firstErr == nil {
				w.res.firstErr = err
			}
		}
		return
	}
	w.res.latencies = append(w.res.latencies, time.Since(due))
	w.res.classify(status, w.body)
}

// roundTrip sends the next announce on the worker's connection, dialing
// one first if it has none, and reads the reply's status and body. A
// server may close a kept-alive connection after a reply without saying
// so (opentracker answers HTTP/1.1 with no "Connection: close", then
// closes): a reused connection that fails before the reply's first byte
// is replaced once, as net/http's client does.
func (w *worker) roundTrip(ctx context.Context) (int, error) {
	reused := w.conn != nil
	status, started, err := w.try(ctx)
	if err != nil && reused && !started && !over(ctx) {
		w.close()
		status, _, err = w.try(ctx)
	}
	return status, err
}

// try is one attempt of roundTrip; started reports whether any of the
// reply was read.
func (w *worker) try(ctx context.Context) (status int, started bool, err error) {
	if w.conn == nil {
		c, err := w.dialer.DialContext(ctx, "tcp", w.host)
		if err != nil {
			return 0, started, err
		}
		w.conn = c
		w.rd.Reset(c)
	}
	w.conn.SetDeadline(time.Now().Add(w.cfg.timeout))
	w.req = append(w.req[:0], "GET "...)
	w.req = w.appendQuery(w.req)
	w.req = append(w.req, " HTTP/1.1\r\nHost: "...)
	w.req = append(w.req, w.host...)
	w.req = append(w.req, "\r\nUser-Agent: announceload\r\n"...)
	if w.cfg.close {
		w.req = append(w.req, "Connection: close\r\n"...)
	}
	w.req = append(w.req, "\r\n"...)
	if _, err := w.conn.Write(w.req); err != nil {
		return 0, started, err
	}
	line, err := w.rd.ReadSlice('\n')
	if err != nil {
		return 0, len(line) > 0, err
	}
	started = true
	if status = statusCode(line); status < 0 {
		return 0, started, fmt.Errorf("bad status line %q", line)
	}
	length, closing := -1, false
	for {
		h, err := w.rd.ReadSlice('\n')
		if err != nil {
			return 0, started, err
		}
		h = bytes.TrimSpace(h)
		if len(h) == 0 {
			break
		}
		name, val, _ := bytes.Cut(h, []byte(":"))
		val = bytes.TrimSpace(val)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length = atoi(val); length < 0 {
				return 0, started, fmt.Errorf("bad Content-Length %q", val)
			}
		case bytes.EqualFold(name, []byte("Connection")):
			closing = bytes.EqualFold(val, []byte("close"))
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, started, fmt.Errorf("transfer-encoding %q not supported", val)
		}
	}
	w.body = w.body[:0]
	if length >= 0 {
		w.body = slices.Grow(w.body, length)[:length]
		if _, err := io.ReadFull(w.rd, w.body); err != nil {
			return 0, started, err
		}
	} else {
		closing = true
		if w.body, err = readAll(w.rd, w.body); err != nil {
			return 0, started, err
		}
	}
	if closing || w.cfg.close {
		w.close()
	}
	return status, true, nil
}

// statusCode returns the status of an HTTP status line ("HTTP/1.1 200
// OK"), or -1 if it has none.
func statusCode(line []byte) int {
	_, rest, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(rest) < 3 {
		return -1
	}
	return atoi(rest[:3])
}

// atoi returns the decimal number b holds, or -1 if it holds anything
// else (or nothing, or more than nine digits).
func atoi(b []byte) int {
	if len(b) == 0 || len(b) > 9 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// classify counts a reply's status and failure reason.
func (r *result) classify(status int, body []byte) {
	switch {
	case status != http.StatusOK:
		r.non200++
	case bytes.Contains(body, []byte("failure reason")):
		r.failures++
		if bytes.Contains(body, []byte("busy")) {
			r.busy++
		}
	}
}

func readAll(r io.Reader, b []byte) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = slices.Grow(b, 4096)
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

const hexDigits = "0123456789abcdef"

// appendQuery appends the next announce's URL to b: a random torrent of
// the benchmark's, a new random peer.
func (w *worker) appendQuery(b []byte) []byte {
	b = append(b, w.path...)
	b = append(b, "?info_hash="...)
	var hash [20]byte
	copy(hash[:], w.cfg.prefix[:])
	i := uint32(w.rng.IntN(w.cfg.torrents))
	hash[16], hash[17], hash[18], hash[19] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	b = escape(b, hash[:])
	b = append(b, "&peer_id=-LB0001-"...)
	var id [12]byte
	for j := range id {
		id[j] = byte(w.rng.Uint32())
	}
	b = escape(b, id[:])
	b = append(b, "&port="...)
	b = strconv.AppendInt(b, int64(1024+w.rng.IntN(65535-1024+1)), 10)
	left := 0
	if w.rng.IntN(4) != 0 {
		left = 1 + w.rng.IntN(1_000_000_000)
	}
	b = append(b, "&uploaded=0&downloaded=0&left="...)
	b = strconv.AppendInt(b, int64(left), 10)
	return append(b, "&compact=1&numwant=50"...)
}

// escape appends every byte of p to b, percent-encoded.
func escape(b, p []byte) []byte {
	for _, c := range p {
		b = append(b, '%', hexDigits[c>>4], hexDigits[c&15])
	}
	return b
}

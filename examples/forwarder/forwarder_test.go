package main

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/queuekit/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The integration tests run the forwarder in process against simulated
// upstreams on 127.0.0.1. They wait for the queue's events (through
// queue.WithObserver) with a deadline; none sleeps.

const waitLimit = 10 * time.Second

// eventLog records queue events and lets a test wait for one.
type eventLog struct {
	mu      sync.Mutex
	list    []queue.Event
	changed chan struct{}
}

func newEventLog() *eventLog { return &eventLog{changed: make(chan struct{})} }

func (l *eventLog) hook(ev queue.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.list = append(l.list, ev)
	close(l.changed)
	l.changed = make(chan struct{})
}

// wait returns the n-th event (1-based) matching kind and target, failing
// the test if it does not come within waitLimit.
func (l *eventLog) wait(t *testing.T, kind queue.EventKind, target string, n int) queue.Event {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		l.mu.Lock()
		seen := 0
		for _, ev := range l.list {
			if ev.Kind == kind && ev.Target == target {
				if seen++; seen == n {
					l.mu.Unlock()
					return ev
				}
			}
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("no %d× %s event for %q within %s", n, kind, target, waitLimit)
		}
	}
}

type harness struct {
	f    *Forwarder
	srv  *httptest.Server
	ev   *eventLog
	sims map[string]*simServer
	udp  *simUDPTracker
	ctx  context.Context
}

// newHarness starts one simulated upstream per kind (named after it; "udp"
// is a BEP 15 tracker) and a forwarder in front of them. The queue starts
// only when start is set.
func newHarness(t *testing.T, kinds []string, start bool, qopts ...queue.Option) *harness {
	t.Helper()
	return newHarnessOpts(t, Options{}, kinds, start, qopts...)
}

// newHarnessOpts is newHarness with the forwarder's options (o.Upstreams
// is set from kinds).
func newHarnessOpts(t *testing.T, o Options, kinds []string, start bool, qopts ...queue.Option) *harness {
	t.Helper()
	h := &harness{ev: newEventLog(), sims: map[string]*simServer{}}
	client := newHTTPClient(5 * time.Second)
	var ups []*Upstream
	for _, k := range kinds {
		var spec string
		if k == "udp" {
			u, err := startSimUDP()
			require.NoError(t, err)
			t.Cleanup(u.Close)
			h.udp, spec = u, "udp=udp://"+u.Addr
		} else {
			sv, err := startSimServer(newSimTracker(k))
			require.NoError(t, err)
			t.Cleanup(sv.Close)
			sv.Delay = 5 * time.Millisecond
			h.sims[k], spec = sv, k+"="+sv.URL
		}
		up, err := ParseUpstream(spec, client)
		require.NoError(t, err)
		ups = append(ups, up)
	}
	opts := append([]queue.Option{
		queue.WithWorkers(2, 4),
		queue.WithRetry(0, 5*time.Millisecond, 20*time.Millisecond),
		queue.WithJobTimeout(5 * time.Second),
		queue.WithObserver(h.ev.hook),
	}, qopts...)
	o.Upstreams = ups
	f, err := NewForwarder(o, opts...)
	require.NoError(t, err)
	h.f = f
	h.srv = httptest.NewServer(f.Handler())
	t.Cleanup(h.srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	h.ctx = ctx
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		f.Shutdown(sctx)
		cancel()
	})
	if start {
		require.NoError(t, f.Start(ctx))
	}
	return h
}

// reply is a decoded announce answer.
type reply struct {
	Failure    string        `bencode:"failure reason"`
	Interval   int64         `bencode:"interval"`
	Complete   int64         `bencode:"complete"`
	Incomplete int64         `bencode:"incomplete"`
	Peers      bencode.Bytes `bencode:"peers"`
}

func (r reply) compact(t *testing.T) []netip.AddrPort {
	t.Helper()
	p, err := decodePeers(r.Peers, 4)
	require.NoError(t, err)
	return p
}

// announce sends GET /announce?query and decodes the answer, which must
// be HTTP 200.
func (h *harness) announce(t *testing.T, query string) reply {
	t.Helper()
	resp, err := h.srv.Client().Get(h.srv.URL + "/announce?" + query)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var r reply
	require.NoError(t, bencode.Unmarshal(body, &r), "body %q", body)
	return r
}

// clientQuery is an announce of torrent hashN by peer peerN on port.
func clientQuery(hashN, peerN, port int, over map[string]string) string {
	var hash, peer [20]byte
	binary.BigEndian.PutUint32(hash[:], uint32(hashN))
	copy(peer[:], "-QK0001-")
	binary.BigEndian.PutUint32(peer[16:], uint32(peerN))
	v := url.Values{
		"info_hash": {string(hash[:])}, "peer_id": {string(peer[:])}, "port": {strconv.Itoa(port)},
		"uploaded": {"0"}, "downloaded": {"0"}, "left": {"100"},
	}
	for k, val := range over {
		v.Set(k, val)
	}
	return v.Encode()
}

func hexOf(hashN, peerN int) (string, string) {
	a, err := ParseAnnounce(clientQuery(hashN, peerN, 1, nil), remote)
	if err != nil {
		panic(err)
	}
	return a.HashHex(), a.PeerHex()
}

func TestFastUpstreamPeersReachClients(t *testing.T) {
	h := newHarness(t, []string{simFast, "udp"}, true)
	first := h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	assert.Empty(t, first.Failure)
	assert.Equal(t, int64(1800), first.Interval)
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.ev.wait(t, queue.EventDone, "udp", 1)
	assert.Equal(t, int64(1), h.sims[simFast].Hits())
	assert.Equal(t, int64(1), h.udp.Hits())
	assert.Equal(t, uint32(2), h.udp.last.Load(), "BEP 15 event started")

	// A second client gets the first (local) and both upstreams' peers.
	r := h.announce(t, clientQuery(1, 2, 7002, nil))
	peers := r.compact(t)
	assert.Contains(t, peers, netip.MustParseAddrPort("127.0.0.1:7001"), "local client")
	assert.Contains(t, peers, netip.MustParseAddrPort("127.2.0.1:6881"), "from the UDP upstream")
	assert.Positive(t, httpSimPeers(peers), "from the HTTP upstream")
	h.waitDone(t, []string{simFast, "udp"}, 2) // the second peer is forwarded too (ForwardPeer)
	enqueued := h.f.Queue().Stats().Enqueued
	h.announce(t, clientQuery(1, 2, 7002, nil))
	assert.Equal(t, enqueued, h.f.Queue().Stats().Enqueued, "its re-announce is not: the peer is not due yet")

	// numwant and the dict form.
	r = h.announce(t, clientQuery(1, 3, 7003, map[string]string{"numwant": "2"}))
	assert.Len(t, r.compact(t), 2)
	r = h.announce(t, clientQuery(1, 4, 7004, map[string]string{"compact": "0", "numwant": "3"}))
	var list []struct {
		IP   string `bencode:"ip"`
		Port int    `bencode:"port"`
	}
	require.NoError(t, bencode.Unmarshal(r.Peers, &list))
	assert.Len(t, list, 3)
}

func TestOverloadedUpstreamIsSuspended(t *testing.T) {
	h := newHarness(t, []string{sim429, simFast}, true, queue.WithSuspend(time.Hour, nil))
	h.announce(t, clientQuery(1, 1, 7001, nil))
	ev := h.ev.wait(t, queue.EventSuspended, sim429, 1)
	assert.Equal(t, time.Hour, ev.Delay)
	st, ok := h.f.Queue().Target(sim429)
	require.True(t, ok)
	assert.False(t, st.SuspendedUntil.IsZero())
	assert.False(t, st.Disabled)

	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.announce(t, clientQuery(2, 1, 7001, nil))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	assert.Equal(t, int64(1), h.sims[sim429].Hits(), "a suspended upstream gets no new announces")
}

func TestRejectingUpstreamsAreDisabled(t *testing.T) {
	h := newHarness(t, []string{sim404, simNever, simFast}, true)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	for _, name := range []string{sim404, simNever} {
		ev := h.ev.wait(t, queue.EventDisabled, name, 1)
		st, _ := h.f.Queue().Target(name)
		assert.True(t, st.Disabled, name)
		assert.NotNil(t, ev.Err)
	}
	ev := h.ev.wait(t, queue.EventDisabled, simNever, 1)
	assert.Contains(t, ev.Err.Error(), "never")
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.announce(t, clientQuery(2, 1, 7001, nil))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	assert.Equal(t, int64(1), h.sims[sim404].Hits())
	assert.Equal(t, int64(1), h.sims[simNever].Hits())
}

func TestRetryInIsScheduled(t *testing.T) {
	h := newHarness(t, []string{simRetryIn}, true)
	h.sims[simRetryIn].RetryIn.Store(2)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	ev := h.ev.wait(t, queue.EventRetried, simRetryIn, 1)
	assert.InDelta(t, (2 * time.Minute).Seconds(), ev.Delay.Seconds(), 1, "retried when the tracker asked")
	hash, peer := hexOf(1, 1)
	assert.False(t, h.f.Queue().Due(simRetryIn, hash+peer), "not due before the retry")
	st := h.f.Queue().Stats()
	assert.Equal(t, 1, st.Store.Scheduled)
	got, _ := h.f.Queue().Target(simRetryIn)
	assert.False(t, got.Disabled)

	// Ten minutes or more is treated as done (BEP 31).
	h.sims[simRetryIn].RetryIn.Store(10)
	h.announce(t, clientQuery(2, 1, 7001, nil))
	h.ev.wait(t, queue.EventDone, simRetryIn, 1)
}

// "retry in: 0" asks for no wait at all. A BEP 31 retry uses up no
// attempt, so taken as asked the job ran again at once, for as long as
// the upstream kept answering so: it is held to the upstream floor (1m).
func TestRetryInZeroWaitsTheUpstreamFloor(t *testing.T) {
	h := newHarness(t, []string{simRetryIn}, true)
	h.sims[simRetryIn].RetryIn.Store(0)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	ev := h.ev.wait(t, queue.EventRetried, simRetryIn, 1)
	assert.InDelta(t, time.Minute.Seconds(), ev.Delay.Seconds(), 1)
	hash, peer := hexOf(1, 1)
	assert.False(t, h.f.Queue().Due(simRetryIn, hash+peer))
	assert.Equal(t, 1, h.f.Queue().Stats().Store.Scheduled)
}

func TestTorrentRefusalIsNotAnUpstreamFailure(t *testing.T) {
	h := newHarness(t, []string{simReject}, true)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	h.ev.wait(t, queue.EventDead, simReject, 1)
	st, _ := h.f.Queue().Target(simReject)
	assert.False(t, st.Disabled, "one torrent's refusal does not disable the upstream")
	hash, _ := hexOf(1, 1)
	assert.False(t, h.f.Queue().Due(simReject, hash), "the refused torrent is left alone")
	hash2, _ := hexOf(2, 1)
	assert.True(t, h.f.Queue().Due(simReject, hash2), "other torrents are not")
}

func TestFailingUpstreamsRetryWithBackoff(t *testing.T) {
	h := newHarness(t, []string{sim500, simGarbage, simHuge, simFast}, true, queue.WithRetry(2, 0, 0))
	h.announce(t, clientQuery(1, 1, 7001, nil))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	for name, why := range map[string]string{sim500: "HTTP 500", simGarbage: "malformed tracker reply", simHuge: "longer than 1048576"} {
		ev := h.ev.wait(t, queue.EventRetried, name, 1)
		assert.Contains(t, ev.Err.Error(), why, name)
		ev = h.ev.wait(t, queue.EventDead, name, 1)
		assert.Contains(t, ev.Err.Error(), why, name)
		st, _ := h.f.Queue().Target(name)
		assert.False(t, st.Disabled, "%s: failures retry, they do not disable", name)
	}
	// The healthy upstream's peers are served regardless.
	r := h.announce(t, clientQuery(1, 2, 7002, nil))
	assert.Greater(t, len(r.compact(t)), 1)
}

func TestStoppedCancelsPendingAndForwardsStop(t *testing.T) {
	h := newHarness(t, []string{simFast, "fast2"}, false)
	hash, peer := hexOf(1, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.announce(t, clientQuery(1, 2, 7002, map[string]string{"event": "started"})) // another peer: not cancelled
	require.Equal(t, 4, h.f.Queue().Stats().Store.PendingKeys)

	r := h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "stopped"}))
	assert.Empty(t, r.Failure)
	st := h.f.Queue().Stats()
	assert.Equal(t, uint64(2), st.Cancelled, "the stopped peer's two pending jobs")
	assert.Equal(t, 4, st.Store.PendingKeys, "two stops replace them; the other peer's stay")

	require.NoError(t, h.f.Start(h.ctx))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	h.ev.wait(t, queue.EventDone, "fast2", 2)
	assert.Equal(t, []string{"stopped"}, h.simByName(simFast).Events(hash, peer), "only the stop reaches the upstream")
	_, peer2 := hexOf(1, 2)
	assert.Equal(t, []string{"started"}, h.simByName(simFast).Events(hash, peer2))
}

func (h *harness) simByName(name string) *simServer { return h.sims[name] }

// A stop is the peer's own: sent with its peer id from another address
// (peer ids are in every compact=0 reply), it neither drops the peer nor
// cancels or forwards anything. Trackers key a peer by its address
// (opentracker) or by id and address (chihaya).
func TestStopFromAnotherAddressIsIgnored(t *testing.T) {
	h := newHarness(t, []string{simFast}, true)
	hash, peer := hexOf(1, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started", "ip": "10.0.0.1"}))
	h.ev.wait(t, queue.EventDone, simFast, 1)

	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "stopped", "ip": "10.0.0.66"}))
	st := h.f.Queue().Stats()
	assert.Equal(t, uint64(1), st.Enqueued, "no stop forwarded")
	assert.Zero(t, st.Cancelled)
	peers := h.announce(t, clientQuery(1, 2, 7002, nil)).compact(t)
	assert.Contains(t, peers, netip.MustParseAddrPort("10.0.0.1:7001"), "the peer is still served")

	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "stopped", "ip": "10.0.0.1"}))
	h.ev.wait(t, queue.EventDone, simFast, 3) // peer 2's started, and the stop
	assert.Equal(t, []string{"started", "stopped"}, h.sims[simFast].Events(hash, peer), "its own stop is")
}

// A stop's reply lists no peers (opentracker answers "5:peers0:"): it
// must not replace the peers the upstream gave for the torrent, which its
// other clients are still served.
func TestForwardedStopKeepsTheUpstreamsPeers(t *testing.T) {
	h := newHarness(t, []string{simFast, "udp"}, true)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.ev.wait(t, queue.EventDone, "udp", 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "stopped"}))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	h.ev.wait(t, queue.EventDone, "udp", 2)
	hash, peer := hexOf(1, 1)
	require.Equal(t, []string{"started", "stopped"}, h.sims[simFast].Events(hash, peer))

	peers := h.announce(t, clientQuery(1, 2, 7002, nil)).compact(t)
	assert.Contains(t, peers, netip.MustParseAddrPort("127.2.0.1:6881"), "the UDP upstream's peers")
	assert.Positive(t, httpSimPeers(peers), "the HTTP upstream's peers")
}

// httpSimPeers counts the peers in peers that the HTTP simulator made up
// (127.1.x.x).
func httpSimPeers(peers []netip.AddrPort) int {
	n := 0
	for _, p := range peers {
		if p.Addr().As4()[1] == 1 {
			n++
		}
	}
	return n
}

func TestCompletedIsForwardedOnce(t *testing.T) {
	h := newHarness(t, []string{simFast}, true)
	hash, peer := hexOf(1, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "completed", "left": "0"}))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	before := h.f.Queue().Stats().Enqueued
	r := h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "completed", "left": "0"}))
	assert.Empty(t, r.Failure)
	assert.Equal(t, before, h.f.Queue().Stats().Enqueued, "a second completed is not forwarded")
	assert.Equal(t, []string{"started", "completed"}, h.sims[simFast].Events(hash, peer))
}

// A completed that finds the peer's earlier announce still queued for an
// upstream (a backed-up queue, a job waiting out a 5xx backoff) replaces
// it: completed is forwarded once, so dropped as a duplicate it was lost.
func TestCompletedReplacesAQueuedAnnounce(t *testing.T) {
	h := newHarness(t, []string{simFast}, false)
	hash, peer := hexOf(1, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "completed", "left": "0"}))
	require.NoError(t, h.f.Start(h.ctx))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	assert.Equal(t, []string{"completed"}, h.sims[simFast].Events(hash, peer))
}

// Admission refuses forwarding work, not announces: past the rate-limit
// fill, a new peer out of tokens is answered with the swarm's peers like
// any other, its forward is shed and counted, and its next announce is
// forwarded once the queue admits it.
func TestRateLimitShedsForwardsNotAnnounces(t *testing.T) {
	h := newHarness(t, []string{simFast}, false,
		queue.WithCapacity(10, 0), queue.WithRateLimit(queue.RateLimit{FillPct: 50, PerSecond: 0.001, Burst: 1}))
	for i := 1; i <= 6; i++ { // 5 fill the queue to 50 %, the 6th takes the only token
		r := h.announce(t, clientQuery(1, i, 7000+i, nil))
		require.Empty(t, r.Failure, "announce %d", i)
	}
	require.Equal(t, uint64(6), h.f.Queue().Stats().Enqueued)
	r := h.announce(t, clientQuery(1, 7, 7007, nil))
	assert.Empty(t, r.Failure, "a new peer is answered past the limit")
	assert.Equal(t, int64(1800), r.Interval, "with the usual interval")
	assert.Len(t, r.compact(t), 6, "and the swarm's peers")
	assert.Equal(t, uint64(6), h.f.Queue().Stats().Enqueued, "its forward is shed")
	assert.Equal(t, uint64(1), h.f.Queue().Stats().RateLimited)
	assert.Equal(t, 1.0, testutil.ToFloat64(h.f.cShed))
	assert.Equal(t, 7.0, testutil.ToFloat64(h.f.cOK))

	r = h.announce(t, clientQuery(1, 2, 7002, nil))
	assert.Empty(t, r.Failure, "a known peer's re-announce")
	r = h.announce(t, clientQuery(2, 8, 7008, map[string]string{"event": "stopped"}))
	assert.Empty(t, r.Failure, "a stop")
	assert.Equal(t, uint64(1), h.f.Queue().Stats().RateLimited, "neither asks admission")

	// Once the queue has room, the shed peer's next announce is forwarded.
	require.NoError(t, h.f.Start(h.ctx))
	h.ev.wait(t, queue.EventDone, simFast, 6)
	hash, peer := hexOf(1, 7)
	h.announce(t, clientQuery(1, 7, 7007, nil))
	h.ev.wait(t, queue.EventDone, simFast, 7)
	assert.Len(t, h.sims[simFast].Events(hash, peer), 1, "forwarded once")
}

func TestBadAnnouncesNeverReachUpstreams(t *testing.T) {
	h := newHarness(t, []string{simFast}, true)
	for _, q := range []string{
		"",
		clientQuery(1, 1, 7001, map[string]string{"info_hash": "short"}),
		clientQuery(1, 1, 7001, map[string]string{"port": "x"}),
		clientQuery(1, 1, 7001, map[string]string{"uploaded": "1e9"}),
		clientQuery(1, 1, 7001, map[string]string{"pad": strings.Repeat("x", 9000)}),
		"info_hash=%ZZ",
	} {
		r := h.announce(t, q)
		assert.NotEmpty(t, r.Failure, "query %.40q", q)
	}
	assert.Zero(t, h.f.Queue().Stats().Enqueued)
	assert.Zero(t, h.sims[simFast].Hits())
}

func TestStatsAndMetricsMounted(t *testing.T) {
	h := newHarness(t, []string{simFast}, true)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	for path, want := range map[string]string{
		"/stats":             "dropped_full",
		"/stats?format=json": `"capacity"`,
		"/metrics":           "forwarder_announces_total",
	} {
		resp, err := h.srv.Client().Get(h.srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, string(body), want, path)
	}
}

func TestRefusedUpstreamIsDisabledWithoutLeakingTheURL(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	up, err := ParseUpstream("gone=http://"+addr+"/announce?passkey=secret", newHTTPClient(time.Second))
	require.NoError(t, err)
	ev := newEventLog()
	f, err := NewForwarder(Options{Upstreams: []*Upstream{up}}, queue.WithObserver(ev.hook), queue.WithWorkers(1, 1))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, f.Start(ctx))
	defer f.Shutdown(context.Background())
	srv := httptest.NewServer(f.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/announce?" + clientQuery(1, 1, 7001, nil))
	require.NoError(t, err)
	resp.Body.Close()
	got := ev.wait(t, queue.EventDisabled, "gone", 1)
	assert.Contains(t, got.Err.Error(), "connection refused")
	assert.NotContains(t, got.Err.Error(), "secret")
	assert.NotContains(t, got.Err.Error(), "info_hash")
}

package main

import (
	"encoding/binary"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/queuekit/queue"
	"github.com/queuekit/queue/queuetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Per-peer forwarding, stopped peers and the bound on the peer table,
// against simulated upstreams. Time is a queuetest.FakeClock shared by the
// queue and the forwarder: an upstream's interval passes when the test
// advances it.

// newClockHarness is newHarness with the queue and the forwarder on clk.
func newClockHarness(t *testing.T, o Options, kinds []string, clk *queuetest.FakeClock, qopts ...queue.Option) *harness {
	t.Helper()
	o.Now = clk.Now
	return newHarnessOpts(t, o, kinds, true, append([]queue.Option{queue.WithClock(clk)}, qopts...)...)
}

// Every local peer reaches every upstream with its own events, and is
// announced again once the upstream's interval for it has passed.
// Forwarded per torrent, only the first peer did: the others waited for
// the torrent to be due again (30 min), and their completed never came.
func TestEveryPeerReachesEveryUpstream(t *testing.T) {
	clk := queuetest.NewFakeClock(t0)
	ups := []string{simFast, "fast2"}
	h := newClockHarness(t, Options{}, ups, clk)
	hash, _ := hexOf(1, 1)
	for i := 1; i <= 3; i++ {
		h.announce(t, clientQuery(1, i, 7000+i, map[string]string{"event": "started"}))
	}
	h.waitDone(t, ups, 3)
	h.announce(t, clientQuery(1, 2, 7002, map[string]string{"event": "completed", "left": "0"}))
	h.waitDone(t, ups, 4)

	// Within the interval (the simulated upstreams ask for 60 s) a plain
	// re-announce is not forwarded.
	clk.Advance(30 * time.Second)
	enqueued := h.f.Queue().Stats().Enqueued
	h.announce(t, clientQuery(1, 1, 7001, nil))
	assert.Equal(t, enqueued, h.f.Queue().Stats().Enqueued, "peer 1 is not due yet")

	clk.Advance(31 * time.Second)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	h.waitDone(t, ups, 5)
	h.announce(t, clientQuery(1, 3, 7003, map[string]string{"event": "stopped"}))
	h.waitDone(t, ups, 6)

	want := map[int][]string{1: {"started", ""}, 2: {"started", "completed"}, 3: {"started", "stopped"}}
	for _, up := range ups {
		for i, events := range want {
			_, peer := hexOf(1, i)
			assert.Equal(t, events, h.sims[up].Events(hash, peer), "%s, peer %d", up, i)
		}
	}
}

// waitDone waits until each upstream has completed n jobs.
func (h *harness) waitDone(t *testing.T, upstreams []string, n int) {
	t.Helper()
	for _, up := range upstreams {
		h.ev.wait(t, queue.EventDone, up, n)
	}
}

// -forward torrent keeps the per-torrent cadence: one announce per
// torrent per upstream interval, whichever peer comes first.
func TestForwardTorrentSpacesAnnouncesPerTorrent(t *testing.T) {
	clk := queuetest.NewFakeClock(t0)
	h := newClockHarness(t, Options{Forward: ForwardTorrent}, []string{simFast}, clk)
	hash, peer1 := hexOf(1, 1)
	_, peer2 := hexOf(1, 2)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.announce(t, clientQuery(1, 2, 7002, map[string]string{"event": "started"}))
	assert.Equal(t, uint64(1), h.f.Queue().Stats().Enqueued, "the torrent is not due")

	clk.Advance(61 * time.Second)
	h.announce(t, clientQuery(1, 2, 7002, nil))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	assert.Equal(t, []string{"started"}, h.sims[simFast].Events(hash, peer1))
	assert.Equal(t, []string{""}, h.sims[simFast].Events(hash, peer2))
}

// A stopped peer that starts again is forwarded at once: its started must
// reach the upstreams that have just dropped it.
func TestRestartAfterStopIsForwarded(t *testing.T) {
	h := newHarness(t, []string{simFast}, true)
	hash, peer := hexOf(1, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.ev.wait(t, queue.EventDone, simFast, 1)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "stopped"}))
	h.ev.wait(t, queue.EventDone, simFast, 2)
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started"}))
	h.ev.wait(t, queue.EventDone, simFast, 3)
	assert.Equal(t, []string{"started", "stopped", "started"}, h.sims[simFast].Events(hash, peer))
}

// Forwarding per peer still leaves alone a torrent an upstream refused:
// the torrent's other peers are not sent there either.
func TestForwardPeerKeepsATorrentRefusal(t *testing.T) {
	h := newHarness(t, []string{simReject}, true)
	h.announce(t, clientQuery(1, 1, 7001, nil))
	h.ev.wait(t, queue.EventDead, simReject, 1)
	h.announce(t, clientQuery(1, 2, 7002, nil))
	assert.Equal(t, uint64(1), h.f.Queue().Stats().Enqueued, "the refused torrent's other peer is not forwarded")
	h.announce(t, clientQuery(2, 1, 7001, nil))
	assert.Equal(t, uint64(2), h.f.Queue().Stats().Enqueued, "another torrent is")
}

// A peer that sent event=stopped is not handed out again: not from the
// reply an upstream gave before the stop, nor from a later one by an
// upstream that still lists it.
func TestStoppedPeerIsNotServedFromUpstreamReplies(t *testing.T) {
	h := newHarness(t, []string{simEcho}, true)
	h.sims[simEcho].KeepStopped = true
	gone := netip.MustParseAddrPort("10.0.0.1:7001")
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started", "ip": "10.0.0.1"}))
	h.ev.wait(t, queue.EventDone, simEcho, 1)
	h.announce(t, clientQuery(1, 2, 7002, map[string]string{"event": "started", "ip": "10.0.0.2"}))
	h.ev.wait(t, queue.EventDone, simEcho, 2) // its reply lists peer 1

	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "stopped", "ip": "10.0.0.1"}))
	h.ev.wait(t, queue.EventDone, simEcho, 3)
	r := h.announce(t, clientQuery(1, 3, 7003, map[string]string{"event": "started", "ip": "10.0.0.3"}))
	assert.NotContains(t, r.compact(t), gone, "the upstream's earlier reply")
	assert.Contains(t, r.compact(t), netip.MustParseAddrPort("10.0.0.2:7002"))
	h.ev.wait(t, queue.EventDone, simEcho, 4) // this reply lists peer 1 again

	r = h.announce(t, clientQuery(1, 4, 7004, map[string]string{"ip": "10.0.0.4"}))
	assert.NotContains(t, r.compact(t), gone, "a later reply")
	assert.ElementsMatch(t, []netip.AddrPort{netip.MustParseAddrPort("10.0.0.2:7002"), netip.MustParseAddrPort("10.0.0.3:7003")}, r.compact(t))

	// Back with a new announce, it is served again.
	h.announce(t, clientQuery(1, 1, 7001, map[string]string{"event": "started", "ip": "10.0.0.1"}))
	r = h.announce(t, clientQuery(1, 4, 7004, map[string]string{"ip": "10.0.0.4"}))
	assert.Contains(t, r.compact(t), gone)
}

// The peer table holds at most MaxPeers; the least recently seen go
// first, are counted in /stats and /metrics, and their next-due times
// are dropped with them (with ForwardPeer they would outgrow the bound).
// The Go runtime's and the process's metrics are on the registry too.
func TestPeerTableIsBounded(t *testing.T) {
	clk := queuetest.NewFakeClock(t0)
	h := newClockHarness(t, Options{MaxPeers: 2}, []string{simFast}, clk)
	for i := 1; i <= 2; i++ {
		h.announce(t, clientQuery(i, i, 7000+i, nil))
		clk.Advance(time.Second)
	}
	h.ev.wait(t, queue.EventDone, simFast, 2)
	hash1, peer1 := hexOf(1, 1)
	require.False(t, h.f.Queue().Due(simFast, hash1+peer1))
	h.announce(t, clientQuery(1, 1, 7001, nil)) // peer 1 is now the most recent
	clk.Advance(time.Second)
	h.announce(t, clientQuery(3, 3, 7003, nil))

	hash2, peer2 := hexOf(2, 2)
	assert.True(t, h.f.Queue().Due(simFast, hash2+peer2), "the evicted peer's next-due time is dropped")
	assert.False(t, h.f.Queue().Due(simFast, hash1+peer1))
	r := h.announce(t, clientQuery(2, 9, 7009, nil))
	assert.NotContains(t, r.compact(t), netip.MustParseAddrPort("127.0.0.1:7002"), "peer 2 (torrent 2) was evicted")

	assert.Contains(t, h.get(t, "/stats"), "peers 2 / 2, evicted 2\n", "peer 9 evicted peer 1")
	assert.Contains(t, h.get(t, "/stats?format=json"), `"peers_evicted": 2`)
	metrics := h.get(t, "/metrics")
	for _, want := range []string{"forwarder_peers 2\n", "forwarder_peers_evicted_total 2\n", "go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_cpu_seconds_total "} {
		assert.Contains(t, metrics, want)
	}
	problems, err := testutil.GatherAndLint(h.f.reg, "forwarder_peers", "forwarder_peers_evicted_total")
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func (h *harness) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := h.srv.Client().Get(h.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, path)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// inShard is an announce of peer i of a torrent whose hash starts with
// sh and ends with i (the shard is mixed from all 20 bytes).
func inShard(sh byte, i int) *Announce {
	a := peerAnnounce(i, 1, EventNone)
	a.InfoHash[0] = sh
	binary.BigEndian.PutUint32(a.InfoHash[16:], uint32(i))
	return a
}

// Eviction takes the table's least recently seen peer, whichever shard
// holds it, and never the peer just announced.
func TestSwarmEvictsTheLeastRecentlySeen(t *testing.T) {
	s := newSwarms(time.Hour, 3)
	a1, a2, a3 := inShard(1, 1), inShard(2, 2), inShard(1, 3)
	for i, a := range []*Announce{a1, a2, a3} {
		s.update(a, t0.Add(time.Duration(i)*time.Second))
		assert.Empty(t, s.evict(a))
	}
	s.update(a1, t0.Add(10*time.Second)) // a2 is now the oldest
	a4 := inShard(3, 4)
	s.update(a4, t0.Add(11*time.Second))
	ev := s.evict(a4)
	require.Len(t, ev, 1)
	assert.Equal(t, a2.PeerID, ev[0].id)
	assert.False(t, s.known(a2, t0.Add(11*time.Second)))
	for _, a := range []*Announce{a1, a3, a4} {
		assert.True(t, s.known(a, t0.Add(11*time.Second)))
	}
	n, evicted := s.size()
	assert.Equal(t, int64(3), n)
	assert.Equal(t, uint64(1), evicted)

	// A table of one keeps the newest peer.
	one := newSwarms(time.Hour, 1)
	one.update(a1, t0)
	one.update(a2, t0) // same instant: the announcer is never its own victim
	assert.Len(t, one.evict(a2), 1)
	assert.True(t, one.known(a2, t0))
	assert.False(t, one.known(a1, t0))

	// The same, whichever of the two shards the table looks at first.
	b1, b2 := inShard(1, 1), inShard(1, 2)
	for i := 3; shardIndex(one, b2) >= shardIndex(one, b1) && i < 10000; i++ { // keep's shard first
		b2 = inShard(1, i)
	}
	require.Less(t, shardIndex(one, b2), shardIndex(one, b1))
	other := newSwarms(time.Hour, 1)
	other.update(b1, t0)
	other.update(b2, t0)
	assert.Len(t, other.evict(b2), 1)
	assert.True(t, other.known(b2, t0))
	assert.False(t, other.known(b1, t0))

	// Expiry and eviction share the list: a sweep empties the table.
	assert.Equal(t, 0, s.sweep(t0.Add(2*time.Hour)))
	n, _ = s.size()
	assert.Zero(t, n)
}

// A stop strikes the peer's address from every upstream reply kept, and a
// reply recorded later that lists it does not bring it back.
func TestSwarmStopStrikesUpstreamCopies(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	a1, a2 := peerAnnounce(1, 1, EventStarted), peerAnnounce(2, 1, EventStarted)
	s.update(a1, t0)
	s.update(a2, t0)
	other := netip.MustParseAddrPort("203.0.113.5:51413")
	s.recordReply(a1, "A", &Reply{Peers: []netip.AddrPort{a1.Addr, other}}, t0, time.Hour)
	s.recordReply(a2, "B", &Reply{Peers: []netip.AddrPort{a1.Addr}}, t0, time.Hour)

	s.remove(peerAnnounce(1, 1, EventStopped), t0)
	assert.Equal(t, []netip.AddrPort{other}, upstreamOf(s, a1.InfoHash, "A").peers)
	assert.Empty(t, upstreamOf(s, a1.InfoHash, "B").peers)
	peers, _, _ := s.peers(a2, 50, t0)
	assert.Equal(t, []netip.AddrPort{other}, addrs(peers))

	s.recordReply(a2, "B", &Reply{Peers: []netip.AddrPort{a1.Addr}}, t0, time.Hour)
	peers, _, incomplete := s.peers(a2, 50, t0)
	assert.Equal(t, []netip.AddrPort{other}, addrs(peers), "nor from a later reply")
	assert.Equal(t, int64(1), incomplete, "nor counted")
	assert.False(t, s.known(a1, t0))

	// Another client at the stopped one's address (a restart with a new
	// peer id) is served.
	a3 := peerAnnounce(3, 1, EventStarted)
	a3.Addr = a1.Addr
	s.update(a3, t0)
	peers, _, _ = s.peers(a2, 50, t0)
	assert.ElementsMatch(t, []netip.AddrPort{other, a1.Addr}, addrs(peers))
}

func shardIndex(s *swarms, a *Announce) int {
	for i := range s.shards {
		if &s.shards[i] == s.shard(a.InfoHash) {
			return i
		}
	}
	return -1
}

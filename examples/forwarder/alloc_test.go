package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/anacrolix/torrent/bencode"
	"github.com/queuekit/queue"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The announce handler writes its replies with appendCompactAnnounce and
// appendFailure: they must be byte for byte what bencode.Marshal writes.
func TestAppendCompactAnnounceMatchesMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		peers := make([]Peer, rng.IntN(60))
		for j := range peers {
			var a netip.Addr
			if rng.IntN(3) == 0 {
				var b [16]byte
				for k := range b {
					b[k] = byte(rng.Uint32())
				}
				b[0] = 0x20 // not a v4-mapped address
				a = netip.AddrFrom16(b)
			} else {
				a = netip.AddrFrom4([4]byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32())})
			}
			peers[j] = Peer{Addr: netip.AddrPortFrom(a, uint16(rng.Uint32())), HasID: rng.IntN(2) == 0}
		}
		want := announceResponse{
			Interval:   rng.Int64N(1 << 40),
			Complete:   rng.Int64N(1 << 20),
			Incomplete: rng.Int64N(1 << 20),
		}
		if i%4 != 0 {
			want.MinInterval = rng.Int64N(1 << 20)
		}
		encodePeers(&want, peers, true, false)
		got := appendCompactAnnounce([]byte("junk"), want.Interval, want.MinInterval, want.Complete, want.Incomplete, peers)
		require.Equal(t, string(bencode.MustMarshal(want)), string(got[len("junk"):]), "case %d", i)
	}
	// The answer to a stop.
	assert.Equal(t, string(bencode.MustMarshal(announceResponse{Interval: 1800, Peers: ""})),
		string(appendCompactAnnounce(nil, 1800, 0, 0, 0, nil)))
}

func TestAppendFailureMatchesMarshal(t *testing.T) {
	for _, tc := range []struct {
		reason string
		retry  time.Duration
	}{
		{"tracker busy, retry in 10 seconds", 10 * time.Second},
		{"missing info_hash", 0},
		{"", 0},
		{"ü\x00:e", 1500 * time.Millisecond},
	} {
		secs := int64(tc.retry / time.Second)
		want := bencode.MustMarshal(failureResponse{Failure: tc.reason, Interval: secs, MinInterval: secs})
		assert.Equal(t, string(want), string(appendFailure(nil, tc.reason, tc.retry)))
	}
}

// TestAnnounceAllocs bounds the allocations of the announce handler's
// common case, a known peer announcing again (nothing due upstream), in a
// swarm large enough that duplicates are found with a map, and of a
// client's stop and a malformed announce. Each allocation is garbage the
// collector must chase under load; the bounds hold what the handler's own
// reply building needs (none) plus parsing (the Announce and its hex).
func TestAnnounceAllocs(t *testing.T) {
	f, err := NewForwarder(Options{Upstreams: []*Upstream{{Name: "up", client: nopAnnouncer{}}}}, queue.WithCapacity(1<<16, 0))
	require.NoError(t, err)
	w := &discardWriter{h: http.Header{}}
	for p := range 40 {
		f.ServeAnnounce(w, httptest.NewRequest(http.MethodGet, "/announce?"+clientQuery(1, p, 7000+p, map[string]string{"event": "started"}), nil))
	}
	// The queue is not started: drop the forwards and mark the peer
	// announced upstream, as a run of its job would.
	f.q.Purge(context.Background())
	q := clientQuery(1, 3, 7003, nil)
	a, err := ParseAnnounce(q, remote)
	require.NoError(t, err)
	f.q.SetNextDue("up", a.PeerKey(), time.Now().Add(time.Hour))
	again := httptest.NewRequest(http.MethodGet, "/announce?"+q, nil)
	n := testing.AllocsPerRun(200, func() { f.ServeAnnounce(w, again) })
	assert.Zero(t, f.q.Stats().Enqueued-40, "the re-announce was forwarded")
	if !raceEnabled {
		assert.LessOrEqual(t, n, 2.0, "allocations per re-announce")
	}
}

// ParseAnnounce reads info_hash and peer_id without url.QueryUnescape (so
// without allocating): it must read every spelling of them as it does.
func TestParseAnnounceUnescapesIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	spell := func(b []byte) string {
		var s []byte
		for _, c := range b {
			switch r := rng.IntN(4); {
			case c == ' ' && r == 0:
				s = append(s, '+')
			case r == 1:
				s = fmt.Appendf(s, "%%%02X", c)
			case r == 2 && c != '%' && c != '&' && c != '+' && c != ';' && c != '=' && c != '#':
				s = append(s, c)
			default:
				s = fmt.Appendf(s, "%%%02x", c)
			}
		}
		return string(s)
	}
	for range 300 {
		var hash, peer [20]byte
		for i := range hash {
			hash[i], peer[i] = byte(rng.IntN(256)), byte(32+rng.IntN(96))
		}
		q := "info_hash=" + spell(hash[:]) + "&peer_id=" + spell(peer[:]) + "&port=1"
		vals, err := url.ParseQuery(q)
		require.NoError(t, err, q)
		require.Equal(t, string(hash[:]), vals.Get("info_hash"), q)
		a, err := ParseAnnounce(q, remote)
		require.NoError(t, err, q)
		assert.Equal(t, hash, a.InfoHash, q)
		assert.Equal(t, peer, a.PeerID, q)
	}
	for _, bad := range []string{"%zz", "%4", "%", "ab%g0"} {
		_, err := ParseAnnounce("info_hash="+bad+"&peer_id=x&port=1", remote)
		assert.Equal(t, errMalformed, err, bad)
		_, uerr := url.QueryUnescape(bad)
		assert.Error(t, uerr, bad)
	}
	_, err := ParseAnnounce("info_hash=%41%42&peer_id=x&port=1", remote)
	assert.EqualError(t, err, "invalid info_hash: want 20 bytes, got 2")
}

// An upstream's reply replaces the previous one's peers in place: with a
// reply per forwarded peer, a new array each time was most of the garbage
// the forwarder made under load.
func TestRecordReplyReusesItsArray(t *testing.T) {
	s := newSwarms(time.Hour, 100)
	t0 := time.Unix(1_700_000_000, 0)
	asker := peerAnnounce(1000, 1, EventNone)
	reply := func(base int) *Reply {
		r := &Reply{Complete: int64(base)}
		for i := range 50 {
			r.Peers = append(r.Peers, peerAnnounce(base+i, 1, EventNone).Addr)
		}
		return r
	}
	first, second := reply(0), reply(100)
	s.recordReply(asker, "up", first, t0, time.Hour)
	n := testing.AllocsPerRun(100, func() { s.recordReply(asker, "up", second, t0, time.Hour) })
	assert.Zero(t, n, "allocations per reply")
	got, complete, _ := s.peers(asker, 200, t0)
	assert.ElementsMatch(t, second.Peers, addrs(got), "the second reply's peers, only")
	assert.EqualValues(t, 100, complete)
	// A longer reply than the array holds still fits whole.
	third := reply(200)
	third.Peers = append(third.Peers, reply(300).Peers...)
	s.recordReply(asker, "up", third, t0, time.Hour)
	got, _, _ = s.peers(asker, 200, t0)
	assert.ElementsMatch(t, third.Peers, addrs(got))
}

// The upstream URL is built with one allocation (its string).
func TestAnnounceURLAllocs(t *testing.T) {
	up, err := ParseUpstream("http://127.0.0.1:6969/announce?passkey=abc", http.DefaultClient)
	require.NoError(t, err)
	a, err := ParseAnnounce(clientQuery(1, 2, 6881, map[string]string{"key": "k1"}), netip.MustParseAddrPort("127.0.0.2:5000"))
	require.NoError(t, err)
	h := up.client.(*httpAnnouncer)
	assert.Equal(t, h.urlPrefix(), h.prefix)
	assert.True(t, strings.HasPrefix(h.announceURL(a, EventStarted), "http://127.0.0.1:6969/announce?passkey=abc&info_hash="))
	n := testing.AllocsPerRun(100, func() { h.announceURL(a, EventStarted) })
	assert.LessOrEqual(t, n, 1.0)
}

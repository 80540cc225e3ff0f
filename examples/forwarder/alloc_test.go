package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
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
	assert.LessOrEqual(t, n, 2.0, "allocations per re-announce")
	assert.Zero(t, f.q.Stats().Enqueued-40, "the re-announce was forwarded")
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

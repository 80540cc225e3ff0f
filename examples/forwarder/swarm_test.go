package main

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// peerAnnounce is an announce of testHash by peer i at 10.0.0.i.
func peerAnnounce(i int, left int64, ev Event) *Announce {
	a := &Announce{InfoHash: testHash, Left: left, Event: ev, NumWant: defaultNumWant, Compact: true}
	binary.BigEndian.PutUint32(a.PeerID[16:], uint32(i))
	a.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 6881)
	a.hashHex, a.peerHex = "h", "p"
	return a
}

func addrs(peers []Peer) []netip.AddrPort {
	out := make([]netip.AddrPort, len(peers))
	for i, p := range peers {
		out[i] = p.Addr
	}
	return out
}

func TestSwarmMergesLocalAndUpstreamPeers(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	a1, a2 := peerAnnounce(1, 0, EventStarted), peerAnnounce(2, 100, EventStarted)
	isNew, _ := s.update(a1, t0)
	assert.True(t, isNew)
	s.update(a2, t0)
	up := netip.MustParseAddrPort("203.0.113.5:51413")
	// Upstream A knows a1 (by address) and up; upstream B knows up too.
	s.recordReply(a1, "A", &Reply{Peers: []netip.AddrPort{a1.Addr, up}, Complete: 3, Incomplete: 4}, t0, time.Minute)
	s.recordReply(a1, "B", &Reply{Peers: []netip.AddrPort{up}, Complete: 1, Incomplete: 9}, t0, time.Minute)

	peers, complete, incomplete := s.peers(a2, 50, t0)
	assert.ElementsMatch(t, []netip.AddrPort{a1.Addr, up}, addrs(peers), "deduplicated, the asker left out")
	// Each count is the largest of the local one and each upstream's: an
	// upstream's counts already include the local peers forwarded to it.
	assert.Equal(t, int64(3), complete, "the largest of local (1) and upstream (3, 1) seeders")
	assert.Equal(t, int64(9), incomplete, "the largest of local (1) and upstream (4, 9) leechers")
	for _, p := range peers {
		if p.Addr == a1.Addr {
			assert.True(t, p.HasID, "local peers keep their id")
			assert.Equal(t, a1.PeerID, p.ID)
			assert.True(t, p.Seeder)
		}
	}

	peers, _, _ = s.peers(a1, 50, t0)
	assert.ElementsMatch(t, []netip.AddrPort{a2.Addr, up}, addrs(peers), "a1's own address from upstream is left out too")
}

func TestSwarmNumwant(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	for i := 1; i <= 100; i++ {
		s.update(peerAnnounce(i, 1, EventNone), t0)
	}
	asker := peerAnnounce(1, 1, EventNone)
	for _, n := range []int{0, 1, 10, 99, 200} {
		peers, _, incomplete := s.peers(asker, n, t0)
		assert.Len(t, peers, min(n, 99), "numwant %d", n)
		assert.Equal(t, int64(100), incomplete)
		seen := map[netip.AddrPort]bool{}
		for _, p := range peers {
			assert.False(t, seen[p.Addr], "no duplicates")
			seen[p.Addr] = true
		}
	}
}

func TestSwarmExpiry(t *testing.T) {
	s := newSwarms(time.Minute, defaultMaxPeers)
	a1, a2 := peerAnnounce(1, 1, EventNone), peerAnnounce(2, 1, EventNone)
	s.update(a1, t0)
	s.update(a2, t0.Add(50*time.Second))
	s.recordReply(a2, "A", &Reply{Peers: []netip.AddrPort{netip.MustParseAddrPort("203.0.113.5:1")}}, t0, 30*time.Second)

	assert.True(t, s.known(a1, t0.Add(59*time.Second)))
	assert.False(t, s.known(a1, t0.Add(time.Minute)), "silent for the TTL: gone")
	peers, _, _ := s.peers(a2, 50, t0.Add(40*time.Second))
	assert.Equal(t, []netip.AddrPort{a1.Addr}, addrs(peers), "the upstream reply expired")

	isNew, _ := s.update(a1, t0.Add(2*time.Minute))
	assert.True(t, isNew, "an expired peer coming back is new (and goes through admission)")

	assert.Equal(t, 1, s.sweep(t0.Add(2*time.Minute)), "a2 expired, a1 is back")
	assert.Equal(t, 0, s.sweep(t0.Add(time.Hour)))
}

func TestSwarmCompletedOnceAndStop(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	a := peerAnnounce(1, 10, EventStarted)
	s.update(a, t0)
	s.markForwarded(a, []string{"A", "B"})
	_, first := s.update(peerAnnounce(1, 0, EventCompleted), t0)
	assert.True(t, first)
	_, first = s.update(peerAnnounce(1, 0, EventCompleted), t0)
	assert.False(t, first, "completed is forwarded once")
	assert.ElementsMatch(t, []string{"A", "B"}, s.forwardedTo(a))

	other := peerAnnounce(1, 0, EventStopped)
	other.Addr = netip.MustParseAddrPort("192.0.2.66:6881")
	forwarded, foreign := s.remove(other, t0)
	assert.True(t, foreign, "a stop from another address")
	assert.Empty(t, forwarded)
	assert.True(t, s.known(a, t0), "leaves the peer alone")

	forwarded, foreign = s.remove(peerAnnounce(1, 0, EventStopped), t0)
	assert.False(t, foreign)
	assert.ElementsMatch(t, []string{"A", "B"}, forwarded)
	assert.False(t, s.known(a, t0))
	forwarded, _ = s.remove(a, t0)
	assert.Empty(t, forwarded, "stopping twice forwards nothing")
	assert.Equal(t, 1, s.sweep(t0), "the stopped record stays, so that upstream copies of its address are not served")
	require.Equal(t, 0, s.sweep(t0.Add(time.Hour)))
}

// An upstream may list far more peers than the swarm keeps (a 1 MiB
// compact list holds 174 762): the swarm keeps a copy of the ones it uses,
// not the reply's whole array behind them (5.6 MB per torrent, for 1.5
// intervals).
func TestSwarmKeepsOnlyTheUpstreamPeersItUses(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	a := peerAnnounce(1, 1, EventNone)
	many := make([]netip.AddrPort, 10*s.upstreamMax)
	for i := range many {
		many[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{203, 0, byte(i >> 8), byte(i)}), 6881)
	}
	s.recordReply(a, "A", &Reply{Peers: many}, t0, time.Minute)
	kept := upstreamOf(s, a.InfoHash, "A").peers
	assert.Len(t, kept, s.upstreamMax)
	assert.Less(t, cap(kept), 2*s.upstreamMax, "a copy, not the reply's array")
	peers, _, _ := s.peers(peerAnnounce(2, 1, EventNone), maxNumWant, t0)
	assert.Len(t, peers, s.upstreamMax)

	// A dict list of entries without a usable address parses to few
	// peers in a large array.
	s.recordReply(a, "A", &Reply{Peers: many[:1:len(many)]}, t0, time.Minute)
	assert.Less(t, cap(upstreamOf(s, a.InfoHash, "A").peers), 8)
}

// Torrents whose hashes share all but their last bytes (a benchmark's)
// spread over the shards as random ones do.
func TestShardSpreadsSharedPrefixes(t *testing.T) {
	s := newSwarms(time.Minute, 10)
	used := map[*swarmShard]int{}
	var h [20]byte
	copy(h[:], "loadbench-torren")
	for i := range 6400 {
		h[16], h[17], h[18], h[19] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
		used[s.shard(h)]++
	}
	require.Len(t, used, len(s.shards), "every shard is used")
	for _, n := range used {
		assert.InDelta(t, 100, n, 50, "each shard holds about its share")
	}
}

// upstreamOf returns the reply kept from upstream about h, or nil.
func upstreamOf(s *swarms, h [20]byte, upstream string) *upstreamPeers {
	sh := s.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i, ok := sh.m[h]
	if !ok {
		return nil
	}
	return sh.sws[i].upstream[upstream]
}

// checkShards verifies the table's own bookkeeping: each swarm's members
// and the shard's peers point at each other, every member is found by id
// and is in the list by seen, and the count is the members'.
func checkShards(t *testing.T, s *swarms) {
	t.Helper()
	var total int64
	for si := range s.shards {
		sh := &s.shards[si]
		inList := map[int32]bool{}
		for i := sh.head; i != none; i = sh.peers[i].next {
			require.False(t, inList[i], "shard %d's list loops at %d", si, i)
			inList[i] = true
		}
		held := 0
		for h, swi := range sh.m {
			sw := &sh.sws[swi]
			require.Equal(t, h, sw.hash)
			for pos, m := range sw.members {
				p := &sh.peers[m.peer]
				require.Equal(t, swi, p.sw, "peer %d's swarm", m.peer)
				require.Equal(t, int32(pos), p.pos, "peer %d's place in its swarm", m.peer)
				require.Equal(t, m.peer, sh.byID[peerKey{swi, m.id}], "peer %d by id", m.peer)
				require.True(t, inList[m.peer], "peer %d in the list by seen", m.peer)
			}
			held += len(sw.members)
		}
		require.Equal(t, len(inList), held, "shard %d: listed peers against members", si)
		require.Equal(t, held, len(sh.byID), "shard %d: ids against members", si)
		total += int64(held)
	}
	require.Equal(t, total, s.count.Load(), "the table's count")
}

// Random announces, stops, evictions and sweeps over a few swarms keep
// the table consistent, and each reply serves exactly the live peers a
// plain model of the table holds.
func TestSwarmMembersAgainstModel(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		const ttl, maxPeers = time.Minute, 40
		s := newSwarms(ttl, maxPeers)
		type key struct{ torrent, peer int }
		type rec struct {
			addr    netip.AddrPort
			seen    time.Time
			stopped bool
		}
		model := map[key]*rec{}
		announce := func(k key, left int64, ev Event) *Announce {
			a := peerAnnounce(k.peer, left, ev)
			binary.BigEndian.PutUint32(a.InfoHash[:], uint32(k.torrent))
			a.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(k.torrent), byte(k.peer >> 8), byte(k.peer)}), 6881)
			return a
		}
		now := t0
		for step := range 1000 {
			now = now.Add(time.Duration(rng.IntN(500)) * time.Millisecond)
			k := key{rng.IntN(4), rng.IntN(30)}
			switch op := rng.IntN(20); {
			case op < 14:
				a := announce(k, int64(rng.IntN(2)), EventNone)
				s.update(a, now)
				model[k] = &rec{addr: a.Addr, seen: now}
				for _, ev := range s.evict(a) {
					evicted := key{int(binary.BigEndian.Uint32(ev.hash[:])), int(binary.BigEndian.Uint32(ev.id[16:]))}
					require.Contains(t, model, evicted, "step %d: evicted a peer the model lacks", step)
					delete(model, evicted)
				}
			case op < 17:
				// A stop marks the record stopped, live or silent, and
				// keeps it a TTL from now.
				_, foreign := s.remove(announce(k, 0, EventStopped), now)
				require.False(t, foreign)
				if r := model[k]; r != nil && !r.stopped {
					r.stopped, r.seen = true, now
				}
			default:
				s.sweep(now)
				for mk, r := range model {
					if now.Sub(r.seen) >= ttl {
						delete(model, mk)
					}
				}
			}
			checkShards(t, s)
			require.EqualValues(t, len(model), s.count.Load(), "seed %d step %d: peers held", seed, step)
			torrent := rng.IntN(4)
			var want []netip.AddrPort
			for mk, r := range model {
				if mk.torrent == torrent && !r.stopped && now.Sub(r.seen) < ttl {
					want = append(want, r.addr)
				}
			}
			peers, complete, incomplete := s.peers(announce(key{torrent, 1000}, 1, EventNone), 1000, now)
			require.ElementsMatch(t, want, addrs(peers), "seed %d step %d: torrent %d's reply", seed, step, torrent)
			require.EqualValues(t, len(want), complete+incomplete, "seed %d step %d: counts", seed, step)
			// A small numwant samples (sampleLocked) once the swarm holds
			// more than sampleOver times as many.
			few, fc, fi := s.peers(announce(key{torrent, 1000}, 1, EventNone), 3, now)
			require.Len(t, few, min(3, len(want)), "seed %d step %d: a sampled reply", seed, step)
			require.Subset(t, want, addrs(few), "seed %d step %d: a sampled reply", seed, step)
			require.Equal(t, [2]int64{complete, incomplete}, [2]int64{fc, fi}, "seed %d step %d: sampled counts", seed, step)
		}
	}
}

// A popular torrent's reply is sampled: numwant distinct addresses,
// never the announcing peer's or a stopped peer's (not even from an
// upstream), with exact counts, and over many replies every candidate,
// local or upstream, is served.
func TestSwarmSampledReply(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	addrOf := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 6881)
	}
	const local, stopped = 1000, 100
	var seeders int64
	for i := range local {
		a := peerAnnounce(i+1, int64(i%3), EventNone)
		a.Addr = addrOf(i)
		if i%3 == 0 {
			seeders++
		}
		s.update(a, t0)
	}
	for i := range stopped {
		a := peerAnnounce(local+i+1, 1, EventNone)
		a.Addr = addrOf(local + i)
		s.update(a, t0)
		_, foreign := s.remove(a, t0)
		require.False(t, foreign)
	}
	asker := peerAnnounce(1, 1, EventNone) // a local peer: never served to itself
	asker.Addr = addrOf(0)
	// The upstream lists some local peers, some stopped ones (struck by
	// remove as they stopped, listed again after), the asker, and 130 of
	// its own: 191, within the 200 a reply keeps (upstreamMax).
	var up []netip.AddrPort
	for i := range 30 {
		up = append(up, addrOf(1+i), addrOf(local+i))
	}
	up = append(up, asker.Addr)
	for i := range 130 {
		up = append(up, netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 6881))
	}
	s.recordReply(asker, "A", &Reply{Peers: up, Complete: 1, Incomplete: 2}, t0, time.Hour)

	served := map[netip.AddrPort]int{}
	for range 600 {
		peers, complete, incomplete := s.peers(asker, defaultNumWant, t0)
		require.Len(t, peers, defaultNumWant)
		require.Equal(t, seeders, complete)
		require.Equal(t, local-seeders, incomplete)
		inReply := map[netip.AddrPort]bool{}
		for _, p := range peers {
			require.False(t, inReply[p.Addr], "%v twice in a reply", p.Addr)
			inReply[p.Addr] = true
			require.NotEqual(t, asker.Addr, p.Addr, "the announcing peer")
			require.NotEqual(t, asker.PeerID, p.ID, "the announcing peer")
			served[p.Addr]++
		}
	}
	for i := range stopped {
		assert.Zero(t, served[addrOf(local+i)], "stopped peer %d served", i)
	}
	for i := 1; i < local; i++ {
		assert.Positive(t, served[addrOf(i)], "local peer %d never served", i)
	}
	for _, a := range up[61:] {
		assert.Positive(t, served[a], "upstream peer %v never served", a)
	}
}

func TestCoprimeStepVisitsEveryIndex(t *testing.T) {
	for n := 1; n <= 300; n++ {
		for range 5 {
			step := coprimeStep(n)
			require.True(t, step >= 1 && (step < n || n == 1), "n %d step %d", n, step)
			visited := make([]bool, n)
			for k, j := 0, 0; k < n; k++ {
				require.False(t, visited[j], "n %d step %d: %d twice", n, step, j)
				visited[j] = true
				j = (j + step) % n
			}
		}
	}
}

// known reports whether a's peer is a live local peer of its torrent
// (ServeAnnounce learns it from update).
func (s *swarms) known(a *Announce, now time.Time) bool {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.peerLocked(sh.getLocked(a.InfoHash, false), a.PeerID)
	return i != none && s.live(sh.memberLocked(i), s.ns(now))
}

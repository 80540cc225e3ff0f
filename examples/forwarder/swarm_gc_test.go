package main

import (
	"fmt"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hasPointers reports whether a value of t holds a pointer the garbage
// collector would follow.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface,
		reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// The peer table's bulk, one entry per peer, holds nothing the garbage
// collector marks: what made every collection walk a million peers.
func TestPeerTableHoldsNoPointers(t *testing.T) {
	sh := reflect.TypeFor[swarmShard]()
	for _, name := range []string{"peers", "byID", "m"} {
		f, ok := sh.FieldByName(name)
		require.True(t, ok, name)
		assert.False(t, hasPointers(f.Type.Elem()), "%s's elements", name)
		if f.Type.Kind() == reflect.Map {
			assert.False(t, hasPointers(f.Type.Key()), "%s's keys", name)
		}
	}
	assert.False(t, hasPointers(reflect.TypeFor[member]()), "a swarm's members")
	assert.False(t, hasPointers(reflect.TypeFor[setSlot]()), "addrSet's table")
}

func TestPeerAddrRoundTrip(t *testing.T) {
	for _, s := range []string{"10.1.2.3:6881", "[2001:db8::1]:51413", "[::ffff:10.1.2.3]:1", "127.0.0.1:65535", "[::1]:80"} {
		a := netip.MustParseAddrPort(s)
		assert.Equal(t, a, packAddr(a).addrPort(), s)
	}
	assert.Equal(t, netip.AddrPort{}, packAddr(netip.AddrPort{}).addrPort(), "the zero AddrPort")
	assert.NotEqual(t, keyOf(netip.MustParseAddrPort("10.1.2.3:1")), keyOf(netip.MustParseAddrPort("[::ffff:10.1.2.3]:1")),
		"an IPv4 address and its IPv4-mapped IPv6 form are different keys, as netip tells them apart")
}

// A peer sent to more upstreams than the 64 that get a bit still
// remembers each, and its stop reaches them all.
func TestSwarmRemembersManyUpstreams(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	var names []string
	for i := range 70 {
		names = append(names, fmt.Sprintf("up%d", i))
	}
	a := peerAnnounce(1, 1, EventStarted)
	s.update(a, t0)
	s.markForwarded(a, names[:40])
	s.markForwarded(a, names[30:])
	s.markForwarded(a, names[65:]) // again: no duplicates
	assert.ElementsMatch(t, names, s.forwardedTo(a))
	forwarded, foreign := s.remove(peerAnnounce(1, 1, EventStopped), t0)
	require.False(t, foreign)
	assert.ElementsMatch(t, names, forwarded)
	assert.Empty(t, s.forwardedTo(a))

	// A peer taking a freed slot inherits nothing of its upstreams.
	s.sweep(t0.Add(2 * time.Hour))
	b := peerAnnounce(2, 1, EventStarted)
	s.update(b, t0.Add(2*time.Hour))
	assert.Empty(t, s.forwardedTo(b))
}

// Peers dropped and added again reuse the table's slots, and each swarm
// still lists exactly its live peers.
func TestSwarmReusesSlots(t *testing.T) {
	s := newSwarms(time.Minute, defaultMaxPeers)
	other := peerAnnounce(1, 1, EventNone)
	other.InfoHash[0] ^= 0xff // another torrent, in another shard or the same
	s.update(other, t0)
	for odd := range 2 { // the list is by seen: the even peers first
		for i := 2 - odd; i <= 60; i += 2 {
			s.update(peerAnnounce(i, 1, EventNone), t0.Add(time.Duration(odd)*30*time.Second))
		}
	}
	used := 0
	for i := range s.shards {
		used += len(s.shards[i].peers)
	}
	assert.Equal(t, 1, s.sweep(t0.Add(70*time.Second)), "the odd peers remain; other's torrent is dropped")
	for i := 61; i <= 90; i++ {
		s.update(peerAnnounce(i, 1, EventNone), t0.Add(70*time.Second))
	}
	after := 0
	for i := range s.shards {
		after += len(s.shards[i].peers)
	}
	assert.Equal(t, used, after, "the 30 new peers took the even peers' and other's slots")
	want := []netip.AddrPort{}
	for i := 1; i <= 90; i++ {
		if i > 60 || i%2 == 1 {
			want = append(want, peerAnnounce(i, 1, EventNone).Addr)
		}
	}
	asker := peerAnnounce(1000, 1, EventNone)
	got, _, incomplete := s.peers(asker, maxNumWant, t0.Add(70*time.Second))
	assert.ElementsMatch(t, want, addrs(got))
	assert.EqualValues(t, 60, incomplete)
	n, _ := s.size()
	assert.EqualValues(t, 60, n)
}

func TestAddrSetTable(t *testing.T) {
	var s addrSet
	local := netip.MustParseAddrPort("127.0.0.1:7000")
	s.reset(40, local)
	assert.False(t, s.addUpstream(netip.MustParseAddrPort("127.0.0.1:7000")), "the local peer, from an upstream")
	for i := range 1000 { // past the size reset chose: it grows
		a := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 6881)
		require.True(t, s.add(a), i)
		require.False(t, s.add(a), i)
	}
	assert.False(t, s.addLocal(local))
	s.reset(40, netip.MustParseAddrPort("10.9.9.9:1"))
	assert.True(t, s.add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, 1}), 6881)), "emptied by reset")
	assert.True(t, s.add(local))

	// Reused for the same sizes, it allocates nothing.
	n := testing.AllocsPerRun(100, func() {
		s.reset(100, local)
		for i := range 100 {
			s.add(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), 6881))
		}
	})
	assert.Zero(t, n)
}

// An announce's scratch stays pooled after a swarm of peers on loopback
// (each also entered under its alias) just below the set's table.
func TestScratchReusableAfterLoopbackSwarm(t *testing.T) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	var as []*Announce
	for i := range 31 { // and an upstream's: 32 addresses, the most the slice takes
		a := peerAnnounce(i+1, 1, EventNone)
		a.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(7000+i))
		s.update(a, t0)
		as = append(as, a)
	}
	s.recordReply(as[0], "up", &Reply{Peers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")}}, t0, time.Hour)
	sc := new(announceScratch)
	peers, _, _ := s.appendPeers(sc.peers, &sc.seen, as[0], maxNumWant, t0)
	require.Len(t, peers, 31, "30 local peers and the upstream's")
	sc.peers = peers[:0]
	assert.False(t, sc.seen.useTable)
	assert.True(t, sc.reusable(), "the set's slice holds %d", cap(sc.seen.small))
}

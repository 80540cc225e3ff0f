package main

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"
)

// BenchmarkPeerTableGC times a full garbage collection with a table of
// 500 000 local peers over 10 000 torrents (scripts/loadbench.sh's table
// after 20 s unpaced): what the table costs every collection's mark phase.
func BenchmarkPeerTableGC(b *testing.B) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	now := time.Now()
	a := &Announce{Left: 1, NumWant: defaultNumWant, Compact: true}
	for i := range 500_000 {
		binary.BigEndian.PutUint32(a.InfoHash[16:], uint32(i%10_000))
		binary.BigEndian.PutUint32(a.PeerID[16:], uint32(i))
		a.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 6881)
		s.update(a, now)
	}
	runtime.GC()
	b.ResetTimer()
	for b.Loop() {
		runtime.GC()
	}
	b.StopTimer()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.ReportMetric(float64(m.HeapAlloc)/(1<<20), "heap-MiB")
	runtime.KeepAlive(s)
}

// BenchmarkAnnounceKnownSwarm answers announces of peers already known in
// a swarm of 100 (nothing due upstream): the table's lookups and the
// reply's peer selection, with its duplicate check.
func BenchmarkAnnounceKnownSwarm(b *testing.B) {
	s := newSwarms(time.Hour, defaultMaxPeers)
	now := time.Now()
	as := make([]*Announce, 100)
	for i := range as {
		as[i] = peerAnnounce(i+1, 1, EventNone)
		s.update(as[i], now)
	}
	benchAnnounces(b, s, as, now, -1)
}

// BenchmarkAnnounceManySwarms answers announces of known peers in a
// table laid out as a tracker's is: 300 000 peers over 10 000 torrents,
// arriving in no order, so that a swarm's peers were added far apart.
// Each announce is what ServeAnnounce asks of the table: update, then a
// reply's peers (scripts/loadbench.sh's workload, once its swarms have
// grown to 30 peers).
func BenchmarkAnnounceManySwarms(b *testing.B) {
	const torrents, perSwarm = 10_000, 30
	s := newSwarms(time.Hour, defaultMaxPeers)
	now := time.Now()
	rng := rand.New(rand.NewPCG(1, 2))
	as := make([]*Announce, 0, torrents*perSwarm)
	for t := range torrents {
		for p := range perSwarm {
			a := peerAnnounce(t*perSwarm+p, int64(p%4), EventNone)
			binary.BigEndian.PutUint32(a.InfoHash[:], uint32(t))
			a.Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(t >> 8), byte(t), byte(p)}), 6881)
			as = append(as, a)
		}
	}
	rng.Shuffle(len(as), func(i, j int) { as[i], as[j] = as[j], as[i] })
	for _, a := range as {
		s.update(a, now)
	}
	rng.Shuffle(len(as), func(i, j int) { as[i], as[j] = as[j], as[i] })
	benchAnnounces(b, s, as, now, perSwarm-1)
}

// BenchmarkAnnounceBigSwarm answers announces of known peers in one
// torrent with 5 000 local peers and an upstream's reply of 200: a
// popular torrent, where a reply takes 50 of thousands.
func BenchmarkAnnounceBigSwarm(b *testing.B) {
	const n = 5000
	s := newSwarms(time.Hour, defaultMaxPeers)
	now := time.Now()
	as := make([]*Announce, n)
	for i := range as {
		as[i] = peerAnnounce(i+1, int64(i%4), EventNone)
		as[i].Addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), 6881)
		s.update(as[i], now)
	}
	up := make([]netip.AddrPort, 200)
	for i := range up {
		up[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), 6881)
	}
	s.recordReply(as[0], "A", &Reply{Peers: up, Complete: 3000, Incomplete: 4000}, now, time.Hour)
	benchAnnounces(b, s, as, now, defaultNumWant)
}

// benchAnnounces announces as in turn, each as ServeAnnounce asks of the
// table (update, then a reply's peers), checking that each reply holds
// want peers (unless want is -1).
func benchAnnounces(b *testing.B, s *swarms, as []*Announce, now time.Time, want int) {
	var seen addrSet
	var dst []Peer
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		a := as[i%len(as)]
		i++
		s.update(a, now)
		dst, _, _ = s.appendPeers(dst, &seen, a, defaultNumWant, now)
		if want >= 0 && len(dst) != want {
			b.Fatalf("%d peers, want %d", len(dst), want)
		}
	}
}

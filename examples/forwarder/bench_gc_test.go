package main

import (
	"encoding/binary"
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
	var seen addrSet
	var dst []Peer
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		a := as[i%len(as)]
		i++
		s.known(a, now)
		s.update(a, now)
		dst, _, _ = s.appendPeers(dst, &seen, a, defaultNumWant, now)
	}
}

package main

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// swarms holds what the forwarder knows per torrent: its own clients
// (local peers) and the peers each upstream last returned. It is sharded
// by info hash so concurrent announces for different torrents rarely
// share a lock. All methods are safe for concurrent use; none blocks on
// anything but its shard's mutex.
type swarms struct {
	peerTTL     time.Duration // a local peer silent this long is dropped
	shards      [64]swarmShard
	upstreamMax int // peers kept per upstream reply
}

type swarmShard struct {
	mu sync.Mutex
	m  map[[20]byte]*swarm
}

type swarm struct {
	local      map[[20]byte]*localPeer
	upstream   map[string]*upstreamPeers
	downloaded int64 // local peers' first completed events (scrape's downloaded)
}

type localPeer struct {
	addr      netip.AddrPort
	seeder    bool
	seen      time.Time
	forwarded []string // upstreams sent an announce of this peer
	completed bool     // completed already forwarded
}

type upstreamPeers struct {
	peers      []netip.AddrPort
	complete   int64
	incomplete int64
	downloaded int64
	expires    time.Time
}

func newSwarms(peerTTL time.Duration) *swarms {
	s := &swarms{peerTTL: peerTTL, upstreamMax: 200}
	for i := range s.shards {
		s.shards[i].m = make(map[[20]byte]*swarm)
	}
	return s
}

func (s *swarms) shard(h [20]byte) *swarmShard { return &s.shards[h[0]&63] }

// getLocked returns h's swarm, creating it when create is set.
func (sh *swarmShard) getLocked(h [20]byte, create bool) *swarm {
	sw := sh.m[h]
	if sw == nil && create {
		sw = &swarm{local: make(map[[20]byte]*localPeer, 1)}
		sh.m[h] = sw
	}
	return sw
}

// known reports whether a's peer is a live local peer of its torrent.
func (s *swarms) known(a *Announce, now time.Time) bool {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sw := sh.getLocked(a.InfoHash, false); sw != nil {
		if p := sw.local[a.PeerID]; p != nil {
			return now.Sub(p.seen) < s.peerTTL
		}
	}
	return false
}

// update records a's peer (any event but stopped). It reports whether the
// peer is new and whether a's completed event is the peer's first, which
// is forwarded once.
func (s *swarms) update(a *Announce, now time.Time) (isNew, firstCompleted bool) {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, true)
	p := sw.local[a.PeerID]
	if p == nil || now.Sub(p.seen) >= s.peerTTL {
		isNew = true
		p = &localPeer{}
		sw.local[a.PeerID] = p
	}
	p.addr, p.seen = a.Addr, now
	p.seeder = a.Left == 0
	if a.Event == EventCompleted && !p.completed {
		p.completed, firstCompleted = true, true
		sw.downloaded++
	}
	return isNew, firstCompleted
}

// remove drops a's peer and returns the upstreams it had been announced
// to, which should hear its stop. A peer known at another IP address is
// left alone and reported as foreign: peer ids are no secret (compact=0
// replies list them), and trackers key a peer by its address.
func (s *swarms) remove(a *Announce) (forwarded []string, foreign bool) {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, false)
	if sw == nil {
		return nil, false
	}
	p := sw.local[a.PeerID]
	if p == nil {
		return nil, false
	}
	if p.addr.Addr() != a.Addr.Addr() {
		return nil, true
	}
	delete(sw.local, a.PeerID)
	if len(sw.local) == 0 && len(sw.upstream) == 0 {
		delete(sh.m, a.InfoHash)
	}
	return slices.Clone(p.forwarded), false
}

// forwardedTo returns the upstreams that accepted an announce of a's peer.
func (s *swarms) forwardedTo(a *Announce) []string {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sw := sh.getLocked(a.InfoHash, false); sw != nil {
		if p := sw.local[a.PeerID]; p != nil {
			return slices.Clone(p.forwarded)
		}
	}
	return nil
}

// recordReply stores an upstream's successful reply about a's torrent:
// its peers, kept until ttl passes.
func (s *swarms) recordReply(a *Announce, upstream string, r *Reply, now time.Time, ttl time.Duration) {
	// A copy: the parsed reply's array can be far larger than the peers
	// kept (a 1 MiB list, or one whose entries were mostly skipped).
	peers := slices.Clone(r.Peers[:min(len(r.Peers), s.upstreamMax)])
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, true)
	if sw.upstream == nil {
		sw.upstream = make(map[string]*upstreamPeers, 1)
	}
	sw.upstream[upstream] = &upstreamPeers{peers: peers, complete: r.Complete, incomplete: r.Incomplete, downloaded: r.Downloaded, expires: now.Add(ttl)}
}

// markForwarded records that a's peer was sent to upstreams, which will
// hear its stop. The swarm keeps upstreams (the caller's fresh Fanout
// result) rather than copying it.
func (s *swarms) markForwarded(a *Announce, upstreams []string) {
	if len(upstreams) == 0 {
		return
	}
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, false)
	if sw == nil {
		return
	}
	p := sw.local[a.PeerID]
	if p == nil {
		return
	}
	if len(p.forwarded) == 0 {
		p.forwarded = slices.Clip(upstreams)
		return
	}
	for _, u := range upstreams {
		if !slices.Contains(p.forwarded, u) {
			p.forwarded = append(p.forwarded, u)
		}
	}
}

// peers returns up to numwant peers for a's torrent, other than a's own
// peer, drawn at random from local clients and live upstream replies, with
// seeder and leecher counts (local counts plus the largest upstream's).
func (s *swarms) peers(a *Announce, numwant int, now time.Time) (out []Peer, complete, incomplete int64) {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, false)
	if sw == nil {
		return nil, 0, 0
	}
	var upC, upI int64
	n := len(sw.local)
	for _, u := range sw.upstream {
		if now.Before(u.expires) {
			n += len(u.peers)
			upC, upI = max(upC, u.complete), max(upI, u.incomplete)
		}
	}
	cand := make([]Peer, 0, n)
	seen := newAddrSet(n, a.Addr)
	for id, p := range sw.local {
		if now.Sub(p.seen) >= s.peerTTL {
			continue
		}
		if p.seeder {
			complete++
		} else {
			incomplete++
		}
		if id == a.PeerID {
			continue
		}
		if !seen.addLocal(p.addr) {
			continue
		}
		cand = append(cand, Peer{Addr: p.addr, ID: id, HasID: true, Seeder: p.seeder})
	}
	for _, u := range sw.upstream {
		if !now.Before(u.expires) {
			continue
		}
		for _, addr := range u.peers {
			if !seen.addUpstream(addr) {
				continue
			}
			cand = append(cand, Peer{Addr: addr})
		}
	}
	if len(cand) > numwant {
		for i := range numwant {
			j := i + rand.IntN(len(cand)-i)
			cand[i], cand[j] = cand[j], cand[i]
		}
		cand = cand[:numwant]
	}
	return cand, complete + upC, incomplete + upI
}

// sweep drops local peers silent for peerTTL, expired upstream replies
// and empty swarms. It reports how many torrents remain.
func (s *swarms) sweep(now time.Time) int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for h, sw := range sh.m {
			for id, p := range sw.local {
				if now.Sub(p.seen) >= s.peerTTL {
					delete(sw.local, id)
				}
			}
			for name, u := range sw.upstream {
				if !now.Before(u.expires) {
					delete(sw.upstream, name)
				}
			}
			if len(sw.local) == 0 && len(sw.upstream) == 0 {
				delete(sh.m, h)
			}
		}
		total += len(sh.m)
		sh.mu.Unlock()
	}
	return total
}

// addrSet is a set of addresses: a slice while small, a map beyond.
type addrSet struct {
	small []netip.AddrPort
	big   map[netip.AddrPort]struct{}
}

func newAddrSet(n int, first netip.AddrPort) *addrSet {
	s := &addrSet{}
	if n > 32 {
		s.big = make(map[netip.AddrPort]struct{}, n+1)
	} else {
		s.small = make([]netip.AddrPort, 0, n+1)
	}
	s.addLocal(first)
	return s
}

// add adds a and reports whether it was new.
func (s *addrSet) add(a netip.AddrPort) bool {
	if s.big != nil {
		if _, ok := s.big[a]; ok {
			return false
		}
		s.big[a] = struct{}{}
		return true
	}
	if slices.Contains(s.small, a) {
		return false
	}
	s.small = append(s.small, a)
	return true
}

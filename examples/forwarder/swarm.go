package main

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// swarms holds what the forwarder knows per torrent: its own clients
// (local peers) and the peers each upstream last returned. It is sharded
// by info hash so concurrent announces for different torrents rarely
// share a lock. All methods are safe for concurrent use; none blocks on
// anything but a shard's mutex, and none holds two shards' at once.
//
// The local peers are bounded twice: by age (a peer silent for peerTTL is
// dropped) and by number (beyond maxPeers the least recently seen peer is
// evicted). Each shard keeps its peers in a list ordered by when they were
// last seen, and publishes its oldest's time, so that eviction finds the
// table's oldest peer by reading 64 numbers rather than by a scan.
type swarms struct {
	peerTTL     time.Duration // a local peer silent this long is dropped
	maxPeers    int64         // local peers (stopped ones included) kept at most
	shards      [64]swarmShard
	upstreamMax int // peers kept per upstream reply

	count   atomic.Int64  // local peers held, stopped ones included
	evicted atomic.Uint64 // local peers evicted for maxPeers
}

type swarmShard struct {
	mu sync.Mutex
	m  map[[20]byte]*swarm
	// The shard's local peers, least recently seen first; mu guards them.
	head, tail *localPeer
	// oldest is head's seen in Unix nanoseconds, or math.MaxInt64 when the
	// shard holds no peer; read without mu by evict.
	oldest atomic.Int64
}

type swarm struct {
	hash       [20]byte
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
	// stopped: the peer sent event=stopped. It is kept (until peerTTL
	// passes) only so that its address, which upstreams may still list,
	// is never handed out.
	stopped bool

	sw         *swarm
	id         [20]byte
	prev, next *localPeer // the shard's list, by seen
}

type upstreamPeers struct {
	peers      []netip.AddrPort
	complete   int64
	incomplete int64
	downloaded int64
	expires    time.Time
}

// evictedPeer is a local peer evicted for the bound on the table, for the
// forwarder to forget about as well.
type evictedPeer struct {
	hash, id  [20]byte
	forwarded []string
}

// newSwarms returns an empty table dropping peers silent for peerTTL and
// holding at most maxPeers local peers (at least 1).
func newSwarms(peerTTL time.Duration, maxPeers int) *swarms {
	s := &swarms{peerTTL: peerTTL, maxPeers: int64(max(maxPeers, 1)), upstreamMax: 200}
	for i := range s.shards {
		s.shards[i].m = make(map[[20]byte]*swarm)
		s.shards[i].oldest.Store(math.MaxInt64)
	}
	return s
}

// shard returns h's shard. Real info hashes are SHA-1 digests, uniform in
// every byte, but torrents named by a benchmark or a test often share a
// prefix (scripts/loadbench.sh's share their first 16 bytes, which put
// every one of its torrents behind one mutex): all 20 bytes are mixed.
func (s *swarms) shard(h [20]byte) *swarmShard {
	x := binary.LittleEndian.Uint64(h[:8]) ^ binary.LittleEndian.Uint64(h[8:16]) ^ uint64(binary.LittleEndian.Uint32(h[16:]))
	return &s.shards[(x*0x9E3779B97F4A7C15)>>58]
}

// getLocked returns h's swarm, creating it when create is set.
func (sh *swarmShard) getLocked(h [20]byte, create bool) *swarm {
	sw := sh.m[h]
	if sw == nil && create {
		sw = &swarm{hash: h, local: make(map[[20]byte]*localPeer, 1)}
		sh.m[h] = sw
	}
	return sw
}

// pushLocked appends p to the shard's list: it is the most recently seen.
func (sh *swarmShard) pushLocked(p *localPeer) {
	p.prev, p.next = sh.tail, nil
	if sh.tail != nil {
		sh.tail.next = p
	} else {
		sh.head = p
	}
	sh.tail = p
	sh.setOldestLocked()
}

// unlinkLocked takes p out of the shard's list.
func (sh *swarmShard) unlinkLocked(p *localPeer) {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		sh.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		sh.tail = p.prev
	}
	p.prev, p.next = nil, nil
	sh.setOldestLocked()
}

func (sh *swarmShard) setOldestLocked() {
	if sh.head == nil {
		sh.oldest.Store(math.MaxInt64)
		return
	}
	sh.oldest.Store(sh.head.seen.UnixNano())
}

// dropLocked removes p from its swarm and the shard's list, and the swarm
// too once it holds nothing.
func (s *swarms) dropLocked(sh *swarmShard, p *localPeer) {
	sh.unlinkLocked(p)
	delete(p.sw.local, p.id)
	s.count.Add(-1)
	if len(p.sw.local) == 0 && len(p.sw.upstream) == 0 {
		delete(sh.m, p.sw.hash)
	}
}

// live reports whether p is a peer to serve: not stopped, not silent for
// the TTL.
func (s *swarms) live(p *localPeer, now time.Time) bool {
	return p != nil && !p.stopped && now.Sub(p.seen) < s.peerTTL
}

// known reports whether a's peer is a live local peer of its torrent.
func (s *swarms) known(a *Announce, now time.Time) bool {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sw := sh.getLocked(a.InfoHash, false); sw != nil {
		return s.live(sw.local[a.PeerID], now)
	}
	return false
}

// update records a's peer (any event but stopped). It reports whether the
// peer is new (unknown, silent for the TTL, or stopped before) and whether
// a's completed event is the peer's first, which is forwarded once. A new
// peer may take the table past its bound: see evict.
func (s *swarms) update(a *Announce, now time.Time) (isNew, firstCompleted bool) {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, true)
	p := sw.local[a.PeerID]
	switch {
	case p == nil:
		isNew = true
		p = &localPeer{sw: sw, id: a.PeerID}
		sw.local[a.PeerID] = p
		s.count.Add(1)
	case !s.live(p, now):
		isNew = true
		sh.unlinkLocked(p)
		p.forwarded, p.completed, p.stopped = nil, false, false
	default:
		sh.unlinkLocked(p)
	}
	p.addr, p.seen = a.Addr, now
	p.seeder = a.Left == 0
	sh.pushLocked(p)
	if a.Event == EventCompleted && !p.completed {
		p.completed, firstCompleted = true, true
		sw.downloaded++
	}
	return isNew, firstCompleted
}

// evict evicts the least recently seen local peers while the table holds
// more than maxPeers, never keep's peer (the one just announced), and
// returns them. It is cheap when the table is within its bound.
func (s *swarms) evict(keep *Announce) []evictedPeer {
	var out []evictedPeer
	var skip *swarmShard // keep's shard, when keep is all it holds
	for tries := 0; s.count.Load() > s.maxPeers && tries < 2*len(s.shards); tries++ {
		sh := s.oldestShard(skip)
		if sh == nil {
			break
		}
		sh.mu.Lock()
		p := sh.head
		if p != nil && p.id == keep.PeerID && p.sw.hash == keep.InfoHash {
			p = p.next
			if p == nil {
				// Seen at the same instant as another shard's oldest,
				// keep is not to be evicted: look elsewhere.
				skip = sh
			}
		}
		if p != nil {
			out = append(out, evictedPeer{hash: p.sw.hash, id: p.id, forwarded: p.forwarded})
			s.dropLocked(sh, p)
			s.evicted.Add(1)
		}
		sh.mu.Unlock()
	}
	return out
}

// oldestShard returns the shard whose least recently seen peer is the
// table's oldest, skip aside, or nil when no other shard holds a peer.
func (s *swarms) oldestShard(skip *swarmShard) *swarmShard {
	var best *swarmShard
	oldest := int64(math.MaxInt64)
	for i := range s.shards {
		if t := s.shards[i].oldest.Load(); t < oldest && &s.shards[i] != skip {
			best, oldest = &s.shards[i], t
		}
	}
	return best
}

// remove marks a's peer stopped and returns the upstreams it had been
// announced to, which should hear its stop. Its address is struck from
// every upstream reply kept for the torrent, and is not served again
// while the stopped record lasts (peerTTL from now), whatever an upstream
// returns meanwhile: upstreams that have not processed the stop yet, or
// never heard it, still list the peer. A peer known at another IP address
// is left alone and reported as foreign: peer ids are no secret (compact=0
// replies list them), and trackers key a peer by its address.
func (s *swarms) remove(a *Announce, now time.Time) (forwarded []string, foreign bool) {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, false)
	if sw == nil {
		return nil, false
	}
	p := sw.local[a.PeerID]
	if p == nil || p.stopped {
		return nil, false
	}
	if p.addr.Addr() != a.Addr.Addr() {
		return nil, true
	}
	forwarded = p.forwarded
	p.stopped, p.forwarded, p.seeder = true, nil, false
	p.seen = now
	sh.unlinkLocked(p)
	sh.pushLocked(p)
	for _, u := range sw.upstream {
		u.peers = slices.DeleteFunc(u.peers, func(x netip.AddrPort) bool { return x == p.addr })
	}
	return forwarded, false
}

// forwardedTo returns the upstreams that accepted an announce of a's peer.
func (s *swarms) forwardedTo(a *Announce) []string {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sw := sh.getLocked(a.InfoHash, false); sw != nil {
		if p := sw.local[a.PeerID]; p != nil && !p.stopped {
			return slices.Clone(p.forwarded)
		}
	}
	return nil
}

// recordReply stores an upstream's successful reply about a's torrent:
// its peers, kept until ttl passes.
func (s *swarms) recordReply(a *Announce, upstream string, r *Reply, now time.Time, ttl time.Duration) {
	peers := r.Peers[:min(len(r.Peers), s.upstreamMax)]
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := sh.getLocked(a.InfoHash, true)
	if sw.upstream == nil {
		sw.upstream = make(map[string]*upstreamPeers, 1)
	}
	u := sw.upstream[upstream]
	if u == nil {
		u = new(upstreamPeers)
		sw.upstream[upstream] = u
	}
	// A copy: the parsed reply's array can be far larger than the peers
	// kept (a 1 MiB list, or one whose entries were mostly skipped). Into
	// the previous reply's array when it fits and is not much larger:
	// with a reply per forwarded peer, a new array per reply was most of
	// the forwarder's garbage.
	if c := cap(u.peers); c >= len(peers) && c <= 2*len(peers)+8 {
		u.peers = append(u.peers[:0], peers...)
	} else {
		u.peers = slices.Clone(peers)
	}
	u.complete, u.incomplete, u.downloaded, u.expires = r.Complete, r.Incomplete, r.Downloaded, now.Add(ttl)
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
	if p == nil || p.stopped {
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
// seeder and leecher counts: each the largest of the local count and each
// live upstream reply's, the rule scrape uses (a sum would count the local
// peers forwarded upstream twice).
// Stopped local peers are neither counted nor served, not even from an
// upstream's reply.
func (s *swarms) peers(a *Announce, numwant int, now time.Time) (out []Peer, complete, incomplete int64) {
	return s.appendPeers(nil, new(addrSet), a, numwant, now)
}

// appendPeers is peers appending to dst and using seen (whatever it
// holds) to drop duplicates, so that a caller can reuse both.
func (s *swarms) appendPeers(dst []Peer, seen *addrSet, a *Announce, numwant int, now time.Time) (out []Peer, complete, incomplete int64) {
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
	cand := slices.Grow(dst[:0], n)
	seen.reset(n, a.Addr)
	stopped := 0
	for id, p := range sw.local {
		if !s.live(p, now) {
			if p.stopped {
				stopped++
			}
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
	if stopped > 0 && len(sw.upstream) > 0 {
		// After the live peers: a live peer may use a stopped one's
		// address (a client restarted with a new peer id).
		for _, p := range sw.local {
			if p.stopped && now.Sub(p.seen) < s.peerTTL {
				seen.add(p.addr)
			}
		}
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
	return cand, max(complete, upC), max(incomplete, upI)
}

// sweep drops local peers silent for peerTTL (and stopped records as
// old), expired upstream replies and empty swarms. It reports how many
// torrents remain.
func (s *swarms) sweep(now time.Time) int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for sh.head != nil && now.Sub(sh.head.seen) >= s.peerTTL {
			s.dropLocked(sh, sh.head)
		}
		for h, sw := range sh.m {
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

// size reports the local peers held (stopped ones included) and how many
// were evicted for the bound since the table was made.
func (s *swarms) size() (peers int64, evicted uint64) {
	return s.count.Load(), s.evicted.Load()
}

// addrSet is a set of addresses: a slice while small, a map beyond.
type addrSet struct {
	small  []netip.AddrPort
	big    map[netip.AddrPort]struct{}
	useMap bool // big is in use, not small
}

// reset empties s for about n addresses and adds first, as a local
// peer's. It keeps s's storage: a slice up to 32 addresses, a map beyond.
func (s *addrSet) reset(n int, first netip.AddrPort) {
	s.small = s.small[:0]
	s.useMap = n > 32
	if s.useMap {
		if s.big == nil || len(s.big) > maxPooledSet {
			s.big = make(map[netip.AddrPort]struct{}, n+1)
		} else {
			clear(s.big)
		}
	}
	s.addLocal(first)
}

// maxPooledSet is the most addresses an addrSet's map may have held to be
// cleared and used again rather than dropped: clearing costs as much as
// the map ever held.
const maxPooledSet = 1024

// add adds a and reports whether it was new.
func (s *addrSet) add(a netip.AddrPort) bool {
	if s.useMap {
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

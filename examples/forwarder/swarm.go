package main

import (
	"encoding/binary"
	"math"
	"math/bits"
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
// anything but a shard's mutex (and, briefly, the upstream names'), and
// none holds two shards' at once.
//
// The local peers are bounded twice: by age (a peer silent for peerTTL is
// dropped) and by number (beyond maxPeers the least recently seen peer is
// evicted). Each shard keeps its peers in a list ordered by when they were
// last seen, and publishes its oldest's time, so that eviction finds the
// table's oldest peer by reading 64 numbers rather than by a scan.
//
// The table holds up to a million peers, and every one is a peer a
// garbage collection would otherwise mark: each shard keeps its swarms and
// peers by value in slices, linked by index, found through maps whose keys
// and values hold no pointer, a peer's address as bytes, its times as
// durations, and the upstreams it was sent to as bits. The collector skips
// all of that; only each swarm's upstream replies and its one slice of
// members hold pointers.
//
// A reply reads every local peer of its swarm. What it reads of each (its
// id, address, last announce, seeder and stopped flags) is kept in the
// swarm's members, side by side, so that it reads them in one sweep of
// memory: kept with the rest of each peer in the shard's table, in the
// order peers arrived, a swarm's peers lay far apart and each cost a
// cache miss, which was most of an announce's own CPU time with swarms of
// a few dozen peers (docs/benchmarks.md, "a swarm's peers side by side").
type swarms struct {
	peerTTL     time.Duration // a local peer silent this long is dropped
	maxPeers    int64         // local peers (stopped ones included) kept at most
	shards      [64]swarmShard
	upstreamMax int // peers kept per upstream reply
	// epoch is what peers' times are counted from: a time.Time holds a
	// pointer, a duration does not. Times are compared as time.Time.Sub
	// compares them (by the monotonic clock when both have it).
	epoch time.Time
	names upstreamNames

	count   atomic.Int64  // local peers held, stopped ones included
	evicted atomic.Uint64 // local peers evicted for maxPeers
}

// none is the null index of the shards' lists.
const none = -1

type swarmShard struct {
	mu  sync.Mutex
	m   map[[20]byte]int32 // info hash → index in sws
	sws []swarm            // by index; free slots chained through next
	// byID finds a peer (index in peers) by its swarm's index and its id.
	byID  map[peerKey]int32
	peers []localPeer // by index; free slots chained through next
	// The first free slot of sws and of peers, or none.
	freeSw, freePeer int32
	// The shard's local peers, least recently seen first; mu guards them.
	head, tail int32
	// extra holds, by peer index, the upstreams beyond the first 64 names
	// (upstreamNames) that a peer was sent to: a forwarder has a handful.
	extra map[int32][]string
	// oldest is head's seen (ns since epoch), or math.MaxInt64 when the
	// shard holds no peer; read without mu by evict.
	oldest atomic.Int64
}

type peerKey struct {
	sw int32
	id [20]byte
}

type swarm struct {
	hash     [20]byte
	upstream map[string]*upstreamPeers
	// members are the swarm's local peers, stopped ones included, in no
	// particular order (a peer dropped leaves its place to the last).
	members    []member
	downloaded int64 // local peers' first completed events (scrape's downloaded)
	next       int32 // the next free slot, while this one is free
}

// member is what a reply reads of a local peer, kept in its swarm.
type member struct {
	id   [20]byte
	addr peerAddr
	seen int64 // ns since epoch
	peer int32 // its index in the shard's peers
	// stopped: the peer sent event=stopped. It is kept (until peerTTL
	// passes) only so that its address, which upstreams may still list,
	// is never handed out.
	seeder, stopped bool
}

// localPeer is the rest of a local peer: its place in its swarm and in
// the shard's list by seen, and what was forwarded of it.
type localPeer struct {
	forwarded uint64 // upstreams sent an announce of this peer, by upstreamNames id (and extra)
	sw, pos   int32  // its swarm's index, and its index in the swarm's members
	// prev, next: the shard's list, by seen (next also chains free slots).
	prev, next int32
	completed  bool // completed already forwarded
}

// peerAddr is a netip.AddrPort without its pointer (the zone's): a local
// peer's address never has a zone (parseAnnounce drops it).
type peerAddr struct {
	ip   [16]byte
	port uint16
	kind uint8 // 0: the zero AddrPort; 4: IPv4; 6: IPv6
}

func packAddr(a netip.AddrPort) peerAddr {
	ip := a.Addr()
	p := peerAddr{ip: ip.As16(), port: a.Port()}
	switch {
	case ip.Is4():
		p.kind = 4
	case ip.Is6():
		p.kind = 6
	}
	return p
}

func (p peerAddr) addrPort() netip.AddrPort {
	switch p.kind {
	case 4:
		return netip.AddrPortFrom(netip.AddrFrom16(p.ip).Unmap(), p.port)
	case 6:
		return netip.AddrPortFrom(netip.AddrFrom16(p.ip), p.port)
	}
	return netip.AddrPort{}
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

// upstreamNames numbers the upstream names peers are sent to, so that a
// peer records them as bits: the first 64 get one each.
type upstreamNames struct {
	mu   sync.RWMutex
	ids  map[string]uint8
	list []string // by id
}

const maxNameBits = 64

// id returns name's bit, numbering it when it is new, or ok false past
// the 64th name.
func (n *upstreamNames) id(name string) (id uint8, ok bool) {
	n.mu.RLock()
	id, ok = n.ids[name]
	full := len(n.list) >= maxNameBits
	n.mu.RUnlock()
	if ok || full {
		return id, ok
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if id, ok = n.ids[name]; ok {
		return id, true
	}
	if len(n.list) >= maxNameBits {
		return 0, false
	}
	if n.ids == nil {
		n.ids = make(map[string]uint8)
	}
	id = uint8(len(n.list))
	n.ids[name] = id
	n.list = append(n.list, name)
	return id, true
}

// appendNames appends the names of mask's bits to dst.
func (n *upstreamNames) appendNames(dst []string, mask uint64) []string {
	if mask == 0 {
		return dst
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	for i, name := range n.list {
		if mask&(1<<i) != 0 {
			dst = append(dst, name)
		}
	}
	return dst
}

// newSwarms returns an empty table dropping peers silent for peerTTL and
// holding at most maxPeers local peers (at least 1).
func newSwarms(peerTTL time.Duration, maxPeers int) *swarms {
	s := &swarms{peerTTL: peerTTL, maxPeers: int64(max(maxPeers, 1)), upstreamMax: 200, epoch: time.Now()}
	for i := range s.shards {
		sh := &s.shards[i]
		sh.m = make(map[[20]byte]int32)
		sh.byID = make(map[peerKey]int32)
		sh.freeSw, sh.freePeer, sh.head, sh.tail = none, none, none, none
		sh.oldest.Store(math.MaxInt64)
	}
	return s
}

// ns is t in ns since the table's epoch.
func (s *swarms) ns(t time.Time) int64 { return int64(t.Sub(s.epoch)) }

// shard returns h's shard. Real info hashes are SHA-1 digests, uniform in
// every byte, but torrents named by a benchmark or a test often share a
// prefix (scripts/loadbench.sh's share their first 16 bytes, which put
// every one of its torrents behind one mutex): all 20 bytes are mixed.
func (s *swarms) shard(h [20]byte) *swarmShard {
	x := binary.LittleEndian.Uint64(h[:8]) ^ binary.LittleEndian.Uint64(h[8:16]) ^ uint64(binary.LittleEndian.Uint32(h[16:]))
	return &s.shards[(x*0x9E3779B97F4A7C15)>>58]
}

// getLocked returns h's swarm's index, creating the swarm when create is
// set, or none.
func (sh *swarmShard) getLocked(h [20]byte, create bool) int32 {
	if i, ok := sh.m[h]; ok {
		return i
	}
	if !create {
		return none
	}
	i := sh.freeSw
	if i != none {
		sh.freeSw = sh.sws[i].next
	} else {
		i = int32(len(sh.sws))
		sh.sws = append(sh.sws, swarm{})
	}
	sh.sws[i] = swarm{hash: h, next: none}
	sh.m[h] = i
	return i
}

// freeSwarmLocked drops swarm i when it holds nothing.
func (sh *swarmShard) freeSwarmLocked(i int32) {
	sw := &sh.sws[i]
	if len(sw.members) > 0 || len(sw.upstream) > 0 {
		return
	}
	delete(sh.m, sw.hash)
	*sw = swarm{next: sh.freeSw}
	sh.freeSw = i
}

// peerLocked returns the index of peer id of swarm swi, or none.
func (sh *swarmShard) peerLocked(swi int32, id [20]byte) int32 {
	if swi == none {
		return none
	}
	if i, ok := sh.byID[peerKey{swi, id}]; ok {
		return i
	}
	return none
}

// addPeerLocked adds peer id to swarm swi and returns its index; it is in
// no list by seen yet.
func (sh *swarmShard) addPeerLocked(swi int32, id [20]byte) int32 {
	i := sh.freePeer
	if i != none {
		sh.freePeer = sh.peers[i].next
	} else {
		i = int32(len(sh.peers))
		sh.peers = append(sh.peers, localPeer{})
	}
	sw := &sh.sws[swi]
	sh.peers[i] = localPeer{sw: swi, pos: int32(len(sw.members)), prev: none, next: none}
	sw.members = append(sw.members, member{id: id, peer: i})
	sh.byID[peerKey{swi, id}] = i
	return i
}

// memberLocked returns peer i's member record. The pointer is good until
// its swarm's members change (a peer added or dropped).
func (sh *swarmShard) memberLocked(i int32) *member {
	p := &sh.peers[i]
	return &sh.sws[p.sw].members[p.pos]
}

// pushLocked appends peer i to the shard's list: it is the most recently
// seen.
func (sh *swarmShard) pushLocked(i int32) {
	p := &sh.peers[i]
	p.prev, p.next = sh.tail, none
	if sh.tail != none {
		sh.peers[sh.tail].next = i
	} else {
		sh.head = i
	}
	sh.tail = i
	sh.setOldestLocked()
}

// unlinkLocked takes peer i out of the shard's list.
func (sh *swarmShard) unlinkLocked(i int32) {
	p := &sh.peers[i]
	if p.prev != none {
		sh.peers[p.prev].next = p.next
	} else {
		sh.head = p.next
	}
	if p.next != none {
		sh.peers[p.next].prev = p.prev
	} else {
		sh.tail = p.prev
	}
	p.prev, p.next = none, none
	sh.setOldestLocked()
}

func (sh *swarmShard) setOldestLocked() {
	if sh.head == none {
		sh.oldest.Store(math.MaxInt64)
		return
	}
	sh.oldest.Store(sh.memberLocked(sh.head).seen)
}

// dropLocked removes peer i from its swarm and the shard's list, and the
// swarm too once it holds nothing.
func (s *swarms) dropLocked(sh *swarmShard, i int32) {
	sh.unlinkLocked(i)
	p := &sh.peers[i]
	swi := p.sw
	sw := &sh.sws[swi]
	delete(sh.byID, peerKey{swi, sw.members[p.pos].id})
	last := len(sw.members) - 1
	if int(p.pos) != last {
		sw.members[p.pos] = sw.members[last]
		sh.peers[sw.members[p.pos].peer].pos = p.pos
	}
	sw.members = sw.members[:last]
	if c := cap(sw.members); c > minMembersCap && len(sw.members) < c/4 {
		// A swarm that shrank gives back most of its array.
		sw.members = slices.Clone(sw.members)
	}
	if sh.extra != nil {
		delete(sh.extra, i)
	}
	*p = localPeer{next: sh.freePeer}
	sh.freePeer = i
	s.count.Add(-1)
	sh.freeSwarmLocked(swi)
}

// minMembersCap is the size below which a swarm's members array is kept
// whatever it holds.
const minMembersCap = 16

// live reports whether p is a peer to serve: not stopped, not silent for
// the TTL.
func (s *swarms) live(p *member, now int64) bool {
	return !p.stopped && now-p.seen < int64(s.peerTTL)
}

// forwardedLocked returns the upstreams peer i was sent to, appended to
// dst.
func (s *swarms) forwardedLocked(sh *swarmShard, dst []string, i int32) []string {
	dst = s.names.appendNames(dst, sh.peers[i].forwarded)
	if sh.extra != nil {
		dst = append(dst, sh.extra[i]...)
	}
	return dst
}

// clearForwardedLocked forgets the upstreams peer i was sent to.
func (sh *swarmShard) clearForwardedLocked(i int32) {
	sh.peers[i].forwarded = 0
	if sh.extra != nil {
		delete(sh.extra, i)
	}
}

// update records a's peer (any event but stopped). It reports whether the
// peer is new (unknown, silent for the TTL, or stopped before) and whether
// a's completed event is the peer's first, which is forwarded once. A new
// peer may take the table past its bound: see evict.
func (s *swarms) update(a *Announce, now time.Time) (isNew, firstCompleted bool) {
	t := s.ns(now)
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	swi := sh.getLocked(a.InfoHash, true)
	i := sh.peerLocked(swi, a.PeerID)
	switch {
	case i == none:
		isNew = true
		i = sh.addPeerLocked(swi, a.PeerID)
		s.count.Add(1)
	case !s.live(sh.memberLocked(i), t):
		isNew = true
		sh.unlinkLocked(i)
		sh.clearForwardedLocked(i)
		sh.peers[i].completed, sh.memberLocked(i).stopped = false, false
	default:
		sh.unlinkLocked(i)
	}
	m := sh.memberLocked(i)
	m.addr, m.seen = packAddr(a.Addr), t
	m.seeder = a.Left == 0
	sh.pushLocked(i)
	p := &sh.peers[i]
	if a.Event == EventCompleted && !p.completed {
		p.completed, firstCompleted = true, true
		sh.sws[swi].downloaded++
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
		i := sh.head
		if i != none && sh.memberLocked(i).id == keep.PeerID && sh.sws[sh.peers[i].sw].hash == keep.InfoHash {
			i = sh.peers[i].next
			if i == none {
				// Seen at the same instant as another shard's oldest,
				// keep is not to be evicted: look elsewhere.
				skip = sh
			}
		}
		if i != none {
			out = append(out, evictedPeer{hash: sh.sws[sh.peers[i].sw].hash, id: sh.memberLocked(i).id, forwarded: s.forwardedLocked(sh, nil, i)})
			s.dropLocked(sh, i)
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
	swi := sh.getLocked(a.InfoHash, false)
	i := sh.peerLocked(swi, a.PeerID)
	if i == none || sh.memberLocked(i).stopped {
		return nil, false
	}
	addr := sh.memberLocked(i).addr.addrPort()
	if addr.Addr() != a.Addr.Addr() {
		return nil, true
	}
	forwarded = s.forwardedLocked(sh, nil, i)
	sh.clearForwardedLocked(i)
	m := sh.memberLocked(i)
	m.stopped, m.seeder = true, false
	m.seen = s.ns(now)
	sh.unlinkLocked(i)
	sh.pushLocked(i)
	for _, u := range sh.sws[swi].upstream {
		u.peers = slices.DeleteFunc(u.peers, func(x netip.AddrPort) bool { return x == addr })
	}
	return forwarded, false
}

// forwardedTo returns the upstreams that accepted an announce of a's peer.
func (s *swarms) forwardedTo(a *Announce) []string {
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.peerLocked(sh.getLocked(a.InfoHash, false), a.PeerID)
	if i == none || sh.memberLocked(i).stopped {
		return nil
	}
	return s.forwardedLocked(sh, nil, i)
}

// recordReply stores an upstream's successful reply about a's torrent:
// its peers, kept until ttl passes.
func (s *swarms) recordReply(a *Announce, upstream string, r *Reply, now time.Time, ttl time.Duration) {
	peers := r.Peers[:min(len(r.Peers), s.upstreamMax)]
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sw := &sh.sws[sh.getLocked(a.InfoHash, true)]
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
// hear its stop.
func (s *swarms) markForwarded(a *Announce, upstreams []string) {
	if len(upstreams) == 0 {
		return
	}
	// The names' bits first, outside the shard's lock.
	var bits uint64
	var over []string
	for _, u := range upstreams {
		if id, ok := s.names.id(u); ok {
			bits |= 1 << id
		} else {
			over = append(over, u)
		}
	}
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	i := sh.peerLocked(sh.getLocked(a.InfoHash, false), a.PeerID)
	if i == none || sh.memberLocked(i).stopped {
		return
	}
	sh.peers[i].forwarded |= bits
	if len(over) == 0 {
		return
	}
	if sh.extra == nil {
		sh.extra = make(map[int32][]string)
	}
	for _, u := range over {
		if !slices.Contains(sh.extra[i], u) {
			sh.extra[i] = append(sh.extra[i], u)
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
	t := s.ns(now)
	sh := s.shard(a.InfoHash)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	swi := sh.getLocked(a.InfoHash, false)
	if swi == none {
		return nil, 0, 0
	}
	sw := &sh.sws[swi]
	var upC, upI int64
	n := len(sw.members)
	for _, u := range sw.upstream {
		if now.Before(u.expires) {
			n += len(u.peers)
			upC, upI = max(upC, u.complete), max(upI, u.incomplete)
		}
	}
	if n > sampleOver*numwant {
		out, complete, incomplete = s.sampleLocked(dst, seen, sw, a, numwant, t, now)
		return out, max(complete, upC), max(incomplete, upI)
	}
	cand := slices.Grow(dst[:0], n)
	seen.reset(n, a.Addr)
	stopped := 0
	for i := range sw.members {
		p := &sw.members[i]
		if !s.live(p, t) {
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
		if p.id == a.PeerID {
			continue
		}
		addr := p.addr.addrPort()
		if !seen.addLocal(addr) {
			continue
		}
		cand = append(cand, Peer{Addr: addr, ID: p.id, HasID: true, Seeder: p.seeder})
	}
	if stopped > 0 && len(sw.upstream) > 0 {
		// After the live peers: a live peer may use a stopped one's
		// address (a client restarted with a new peer id).
		for i := range sw.members {
			if p := &sw.members[i]; p.stopped && t-p.seen < int64(s.peerTTL) {
				seen.add(p.addr.addrPort())
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

// sampleOver is the size, in multiples of numwant, past which a reply's
// peers are sampled (sampleLocked) rather than drawn from every
// candidate.
const sampleOver = 4

// sampleLocked is appendPeers for a swarm with many more candidates than
// numwant: a popular torrent. It counts the local peers in one sweep of
// the members, but reads and checks only the candidates it visits, in
// the order of a random arithmetic progression over all of them (local
// and upstream), until it has numwant: the duplicate check holds the
// chosen addresses (with the announcing peer's and stopped peers'), not
// every candidate's. Drawing from every candidate cost a swarm of 5 000
// some 580 µs and a 1 MiB set per announce (BenchmarkAnnounceBigSwarm).
// Each candidate is as likely to be chosen as any other; a candidate
// found at once locally and upstream may be served as the upstream's
// (without its peer id), where drawing from every candidate prefers the
// local record.
func (s *swarms) sampleLocked(dst []Peer, seen *addrSet, sw *swarm, a *Announce, numwant int, t int64, now time.Time) (out []Peer, complete, incomplete int64) {
	stopped := 0
	for i := range sw.members {
		switch p := &sw.members[i]; {
		case s.live(p, t):
			if p.seeder {
				complete++
			} else {
				incomplete++
			}
		case p.stopped && t-p.seen < int64(s.peerTTL):
			stopped++
		}
	}
	var upsBuf [4][]netip.AddrPort
	ups := upsBuf[:0]
	total := len(sw.members)
	for _, u := range sw.upstream {
		if now.Before(u.expires) && len(u.peers) > 0 {
			ups = append(ups, u.peers)
			total += len(u.peers)
		}
	}
	seen.reset(numwant+stopped, a.Addr)
	if stopped > 0 && len(ups) > 0 {
		// No upstream may serve a stopped peer's address (see remove).
		for i := range sw.members {
			if p := &sw.members[i]; p.stopped && t-p.seen < int64(s.peerTTL) {
				seen.add(p.addr.addrPort())
			}
		}
	}
	out = dst[:0]
	if total == 0 || numwant <= 0 {
		return out, complete, incomplete
	}
	j, step := rand.IntN(total), coprimeStep(total)
	for k := 0; k < total && len(out) < numwant; k++ {
		if j < len(sw.members) {
			p := &sw.members[j]
			if s.live(p, t) && p.id != a.PeerID {
				if addr := p.addr.addrPort(); seen.addLocal(addr) {
					out = append(out, Peer{Addr: addr, ID: p.id, HasID: true, Seeder: p.seeder})
				}
			}
		} else {
			r := j - len(sw.members)
			for _, u := range ups {
				if r < len(u) {
					if seen.addUpstream(u[r]) {
						out = append(out, Peer{Addr: u[r]})
					}
					break
				}
				r -= len(u)
			}
		}
		if j += step; j >= total {
			j -= total
		}
	}
	return out, complete, incomplete
}

// coprimeStep returns a random step in [1, n) that shares no factor with
// n (1 when n is 1), so that adding it n times, modulo n, visits every
// index once.
func coprimeStep(n int) int {
	if n <= 2 {
		return 1
	}
	for {
		k := 1 + rand.IntN(n-1)
		a, b := k, n
		for b != 0 {
			a, b = b, a%b
		}
		if a == 1 {
			return k
		}
	}
}

// sweep drops local peers silent for peerTTL (and stopped records as
// old), expired upstream replies and empty swarms. It reports how many
// torrents remain.
func (s *swarms) sweep(now time.Time) int {
	t := s.ns(now)
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for sh.head != none && t-sh.memberLocked(sh.head).seen >= int64(s.peerTTL) {
			s.dropLocked(sh, sh.head)
		}
		for _, swi := range sh.m {
			sw := &sh.sws[swi]
			for name, u := range sw.upstream {
				if !now.Before(u.expires) {
					delete(sw.upstream, name)
				}
			}
			sh.freeSwarmLocked(swi)
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

// addrSet is a set of addresses: a slice while small, beyond that an
// open-addressing table of pointer-free entries that is emptied by
// bumping a generation rather than cleared, and grows only when a larger
// swarm needs it. A set pooled with its scratch thus allocates nothing
// once it has met the largest swarm (a map grew, and was garbage, with
// every swarm larger than the last one it held).
type addrSet struct {
	small    []netip.AddrPort
	table    []setSlot // len a power of two; a slot is in use when its gen is gen
	gen      uint32
	n        int // addresses in table
	useTable bool
	seed     [4]uint64
}

type setSlot struct {
	key addrKey
	gen uint32
}

// addrKey is an address and port as numbers: the 16 bytes of the
// address, then its port and kind (peerAddr's).
type addrKey struct {
	hi, lo uint64
	pk     uint32
}

func keyOf(a netip.AddrPort) addrKey {
	ip := a.Addr()
	b := ip.As16()
	k := addrKey{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:]), pk: uint32(a.Port())}
	switch {
	case ip.Is4():
		k.pk |= 4 << 16
	case ip.Is6():
		k.pk |= 6 << 16
	}
	return k
}

// hash mixes k with the set's seed (wyhash's multiply-fold): the
// addresses come from clients and upstreams, so the seed is random.
func (s *addrSet) hash(k addrKey) uint64 {
	h1, l1 := bits.Mul64(k.hi^s.seed[0], k.lo^s.seed[1])
	h2, l2 := bits.Mul64(h1^l1^s.seed[2], uint64(k.pk)^s.seed[3])
	return h2 ^ l2
}

// reset empties s for about n addresses and adds first, as a local
// peer's. It keeps s's storage: a slice up to 32 addresses, a table
// beyond.
func (s *addrSet) reset(n int, first netip.AddrPort) {
	s.small = s.small[:0]
	s.useTable = n > 32
	if s.useTable {
		// Room for n addresses and their loopback aliases at a load of
		// at most one half.
		size := 64
		for size < 4*(n+1) {
			size *= 2
		}
		if len(s.table) < size || len(s.table) > 4*maxPooledSet {
			s.table = make([]setSlot, size)
			s.gen = 0
			for i := range s.seed {
				s.seed[i] = rand.Uint64()
			}
		}
		s.gen++
		if s.gen == 0 { // wrapped: old stamps could read as current
			clear(s.table)
			s.gen = 1
		}
		s.n = 0
	}
	s.addLocal(first)
}

// maxPooledSet is, in addresses, the largest set kept for use again
// rather than dropped: a set is sized for the largest swarm it met.
const maxPooledSet = 1024

// add adds a and reports whether it was new.
func (s *addrSet) add(a netip.AddrPort) bool {
	if !s.useTable {
		if slices.Contains(s.small, a) {
			return false
		}
		s.small = append(s.small, a)
		return true
	}
	if 2*(s.n+1) > len(s.table) {
		s.grow()
	}
	if !s.insert(keyOf(a)) {
		return false
	}
	s.n++
	return true
}

// insert adds k to the table, which has a free slot, and reports whether
// it was new.
func (s *addrSet) insert(k addrKey) bool {
	mask := uint64(len(s.table) - 1)
	for i := s.hash(k) & mask; ; i = (i + 1) & mask {
		sl := &s.table[i]
		if sl.gen != s.gen {
			sl.key, sl.gen = k, s.gen
			return true
		}
		if sl.key == k {
			return false
		}
	}
}

// grow doubles the table, keeping what it holds.
func (s *addrSet) grow() {
	old, gen := s.table, s.gen
	s.table, s.gen = make([]setSlot, 2*len(old)), 1
	for _, sl := range old {
		if sl.gen == gen {
			s.insert(sl.key)
		}
	}
}

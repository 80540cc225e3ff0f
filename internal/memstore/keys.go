package memstore

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"

	"github.com/queuekit/queue/queuetype"
)

// keySet is the in-memory store's pending-key set: one entry per key whose
// job is queued, scheduled or running, plus at most one coalesced rerun of
// a running key. It is sharded so that unrelated keys never share a lock.
//
// Entries live in fixed chunks and never move, so an item carries a
// pointer to its key's entry, and a worker claims and finishes a keyed job
// with one compare-and-swap each on the entry's state word: no lock, no
// hashing, no probe (see keyEntry). Everything else belongs to whoever
// holds the shard's lock, on data that only the lock holder touches: the
// shard's index, an open-addressing table of entry numbers, and its
// chunks' free bitmaps. An entry a worker has finished stays indexed until
// the lock holder reclaims it: at once when the same key comes back, or
// when the shard runs out of free entries and sweeps a chunk. So in the
// steady state a keyed job allocates nothing, and nothing the workers
// write is read by the producer more than once.
//
// Lock order: a shard's mutex may be held while taking the schedule's; the
// schedule never takes a shard's.
type keySet[T any] struct {
	seed   maphash.Seed
	shards [keyShards]keyShard[T]
	// waiting counts the coalesced reruns in every shard, for readers
	// without the shards' locks (the pending bound); the in-memory store
	// keeps it as it sets and takes reruns.
	waiting atomic.Int64
}

// keyShards is the number of shards; a key's shard is the top bits of its
// hash, its tag in the shard's index the low 32 bits.
const (
	keyShards     = 64
	keyShardShift = 64 - 6
)

// A chunk holds chunkSize entries, one bit each in its free bitmap.
const (
	chunkBits = 6
	chunkSize = 1 << chunkBits
	allFree   = ^uint64(0)
)

// keyShard is one shard of the set. Every field is guarded by mu.
type keyShard[T any] struct {
	mu     sync.Mutex
	index  []uint64      // tag<<32 | entry number+1 per slot, 0 if empty; linear probing, no tombstones
	count  int           // entries in index
	chunks []*keyChunk   // entries by number>>chunkBits; nil where a chunk was dropped
	free   []uint64      // by chunk: bit i set if the chunk's entry i is free (not indexed)
	cur    int           // the chunk new entries come from
	sweep  int           // the chunk the next refill sweeps
	live   int           // entries held in the chunks swept so far this round
	side   *shardSide[T] // what few shards hold; nil until needed
	num    uint8         // this shard's number
	budget uint8         // chunks the next refill may sweep, 1..maxSweeps
	peak   uint32        // keys held at the last trims, decaying
}

// shardSide is what a shard holds that most shards never need, kept
// apart so that a shard fills two cache lines exactly; its shard's lock
// guards it.
type shardSide[T any] struct {
	reruns map[*keyEntry]*item[T] // coalesced reruns by their key's entry
	marks  map[string]*mark       // open unique windows by key (see unique.go); nil when none
	expiry markHeap               // marks by expiry
}

// maxSweeps bounds the chunks one refill sweeps before it makes a new
// one.
const maxSweeps = 4

// keyChunk is a block of entries, exactly 4 KiB.
type keyChunk struct {
	ents [chunkSize]keyEntry
}

// minIndex is the size a shard's index starts at and never shrinks below.
const minIndex = 64

// keyState is where the job holding a key is.
type keyState uint64

const (
	keyPending keyState = iota + 1 // queued or scheduled
	keyRunning                     // running
	keyRerun                       // running, with a coalesced rerun waiting
	keyGone                        // finished or cancelled: the key is free
)

// keyEntry is a key's entry. Its job and state share one word, so that a
// worker can move the entry from pending to running when it claims the
// job, and from running to gone when the job ends, with one
// compare-and-swap and without the shard's lock: the item carries a
// pointer to its entry. Every other change is made under the shard's
// lock, with a compare-and-swap too, as a claim or finish may move the
// word meanwhile.
//
// An entry is reused for another job once it is gone and reclaimed, under
// the lock; job IDs are never reused, so an item of an earlier job (one
// cancelled while it waited) fails its compare-and-swap and never touches
// the entry's other fields. The worker running a job reads the key; every
// other field is read under the lock only.
//
// Entries are 64 bytes, one to a cache line: the producer fills one
// entry while the workers claim and finish its neighbours.
type keyEntry struct {
	st    atomic.Uint64 // job ID << 3 | keyState
	h     uint64        // the key's hash
	key   string
	more  *jobMore // the pending (or running) job's group, target and max attempts
	num   uint32   // the entry's number in its shard; fixed when its chunk is made
	shard uint8    // the entry's shard; fixed when its chunk is made
	sched bool     // the pending job waits in the schedule, not a ready queue
	prio  uint8    // the pending job's priority, for the ready queues' tombstone counts
	dup   *queuetype.DuplicateError
	_     [8]byte
}

// dupErr returns the error for a duplicate of e's key, made once and
// kept, so that refusing the duplicates of a key allocates nothing; the
// shard's lock is held. It makes a new one if the entry now holds another
// key (or a caller changed the one it was given).
func (e *keyEntry) dupErr() error {
	if e.dup == nil || e.dup.Key != e.key || e.dup.Group != "" {
		e.dup = &queuetype.DuplicateError{Key: e.key}
	}
	return e.dup
}

func packKey(id int64, st keyState) uint64 { return uint64(id)<<3 | uint64(st) }

// load returns the entry's job and state.
func (e *keyEntry) load() (int64, keyState) {
	v := e.st.Load()
	return int64(v >> 3), keyState(v & 7)
}

// is reports whether the entry belongs to job id in state st.
func (e *keyEntry) is(id int64, st keyState) bool { return e.st.Load() == packKey(id, st) }

// move changes the entry from (id, from) to (id, to); false if it was not
// in that state.
func (e *keyEntry) move(id int64, from, to keyState) bool {
	return e.st.CompareAndSwap(packKey(id, from), packKey(id, to))
}

func (e *keyEntry) gone() bool { return keyState(e.st.Load()&7) == keyGone }

func newKeySet[T any]() *keySet[T] {
	ks := &keySet[T]{seed: maphash.MakeSeed()}
	for i := range ks.shards {
		ks.shards[i].num = uint8(i)
	}
	return ks
}

// hash returns key's hash.
func (ks *keySet[T]) hash(key string) uint64 { return maphash.String(ks.seed, key) }

// shard returns the shard of a key with hash h.
func (ks *keySet[T]) shard(h uint64) *keyShard[T] { return &ks.shards[h>>keyShardShift] }

// shardOf returns e's shard.
func (ks *keySet[T]) shardOf(e *keyEntry) *keyShard[T] { return &ks.shards[e.shard] }

// setRerun records r as the coalesced rerun of e's running job; sh is e's
// shard, and its lock is held.
func (sh *keyShard[T]) setRerun(e *keyEntry, r *item[T]) {
	if sh.side == nil {
		sh.side = new(shardSide[T])
	}
	if sh.side.reruns == nil {
		sh.side.reruns = make(map[*keyEntry]*item[T])
	}
	sh.side.reruns[e] = r
}

// takeRerun removes and returns e's rerun, nil if it has none; sh is e's
// shard, and its lock is held.
func (sh *keyShard[T]) takeRerun(e *keyEntry) *item[T] {
	if sh.side == nil {
		return nil
	}
	r := sh.side.reruns[e]
	delete(sh.side.reruns, e)
	return r
}

// entry returns entry number n.
func (sh *keyShard[T]) entry(n uint32) *keyEntry {
	return &sh.chunks[n>>chunkBits].ents[n&(chunkSize-1)]
}

// find returns the entry for key, gone or not, or nil; sh.mu is held.
func (sh *keyShard[T]) find(key string, h uint64) *keyEntry {
	if sh.count == 0 {
		return nil
	}
	tag := uint32(h)
	mask := uint64(len(sh.index) - 1)
	for i := uint64(tag) & mask; ; i = (i + 1) & mask {
		v := sh.index[i]
		if v == 0 {
			return nil
		}
		if uint32(v>>32) == tag {
			if e := sh.entry(uint32(v) - 1); e.h == h && e.key == key {
				return e
			}
		}
	}
}

// add takes a free entry, indexes it under key and h with state word st
// (see packKey), and returns it; sh.mu is held, and key must not be in the
// index.
func (sh *keyShard[T]) add(key string, h uint64, st uint64) *keyEntry {
	c := sh.cur
	if c >= len(sh.chunks) || sh.free[c] == 0 {
		c = sh.refill()
	}
	i := bits.TrailingZeros64(sh.free[c])
	sh.free[c] &^= 1 << i
	e := &sh.chunks[c].ents[i]
	e.h, e.key = h, key
	e.st.Store(st) // no longer gone: a sweep must not take it back
	sh.indexPut(uint32(h), e.num)
	return e
}

// reclaim takes e, which is gone, out of the index and frees it; sh.mu is
// held.
func (sh *keyShard[T]) reclaim(e *keyEntry) {
	sh.indexDel(uint32(e.h), e.num)
	e.key, e.more = "", nil // let the GC have them
	sh.free[e.num>>chunkBits] |= 1 << (e.num & (chunkSize - 1))
}

// refill returns a chunk with free entries, for add; sh.mu is held. It
// sweeps chunks in turn for entries the workers have finished and takes
// the first with a quarter of its entries free; failing that, another
// chunk the bitmaps say has as much; failing that, a new chunk. It sweeps
// up to maxSweeps chunks while sweeps pay, and one after a refill that
// had to make a chunk: a shard whose keys are all held (a million
// scheduled jobs) reads one chunk per chunk it makes, and one whose keys
// come and go finds room without making any. Each refill then serves a
// quarter chunk of adds or more. When the turn comes back to the first
// chunk, the round's sweeps have counted the keys held: see trim.
func (sh *keyShard[T]) refill() int {
	sh.budget = max(sh.budget, 1)
	for range min(len(sh.chunks), int(sh.budget)) {
		c := sh.sweep
		if sh.sweep = c + 1; sh.sweep >= len(sh.chunks) {
			sh.sweep = 0
		}
		if sh.chunks[c] == nil {
			continue
		}
		sh.sweepChunk(c)
		n := bits.OnesCount64(sh.free[c])
		sh.live += chunkSize - n
		if sh.sweep == 0 {
			sh.trim()
		}
		if n >= chunkSize/4 && c < len(sh.chunks) && sh.chunks[c] != nil { // trim may have dropped it
			sh.budget = min(2*sh.budget, maxSweeps)
			sh.cur = c
			return c
		}
	}
	for c, f := range sh.free {
		if bits.OnesCount64(f) >= chunkSize/4 {
			sh.cur = c
			return c
		}
	}
	sh.budget = max(sh.budget/2, 1)
	c := 0
	for c < len(sh.chunks) && sh.chunks[c] != nil {
		c++
	}
	if c == len(sh.chunks) {
		sh.chunks = append(sh.chunks, nil)
		sh.free = append(sh.free, 0)
	}
	ch := new(keyChunk)
	for i := range ch.ents {
		ch.ents[i].num = uint32(c<<chunkBits + i)
		ch.ents[i].shard = sh.num
	}
	sh.chunks[c], sh.free[c] = ch, allFree
	sh.cur = c
	return c
}

// trim ends a round of sweeps: it keeps a high-water mark of the keys the
// round found held, halving each round, and a shard holding more than
// twice the chunks the mark needs (room for twice the keys, and one
// chunk) sweeps its chunks, last first, and drops the wholly free ones
// down to that need. The
// mark and the margin keep a shard whose keys come in waves from dropping
// chunks at a trough that it makes again at the next crest. A round
// passes as adds use up the free entries of every chunk, so after a burst
// of keys a shard gives its chunks back within a few rounds, that is,
// within a few bursts' worth of adds. sh.mu is held. A dropped chunk has
// no entry in the index; items of jobs that held its entries keep it from
// the GC until they are gone.
func (sh *keyShard[T]) trim() {
	sh.peak = uint32(max(sh.live, int(sh.peak)/2))
	sh.live = 0
	need := (2*int(sh.peak)+chunkSize-1)/chunkSize + 1
	held := 0
	for _, ch := range sh.chunks {
		if ch != nil {
			held++
		}
	}
	if held > 2*need {
		for c := len(sh.chunks) - 1; c >= 0 && held > need; c-- {
			if sh.chunks[c] == nil {
				continue
			}
			sh.sweepChunk(c) // its entries may all be gone since its turn
			if sh.free[c] == allFree {
				sh.chunks[c], sh.free[c] = nil, 0
				held--
			}
		}
		n := len(sh.chunks)
		for n > 0 && sh.chunks[n-1] == nil {
			n--
		}
		sh.chunks, sh.free = sh.chunks[:n], sh.free[:n]
	}
	sh.fitIndex(held)
}

// fitIndex shrinks the index to what the entries of held chunks need, if
// it has four times as many slots: every indexed entry lives in a held
// chunk, and the index is kept at most half full. The index shrinks here
// and not as entries leave it, because sweeps reclaim entries in bulk:
// shrinking at a low count, it grew back within the next few hundred adds,
// and a keyed benchmark spent 10 bytes and a rehash of slots per job on
// the index going up and down. sh.mu is held.
func (sh *keyShard[T]) fitIndex(held int) {
	want := minIndex
	for want < 2*held*chunkSize {
		want <<= 1
	}
	if len(sh.index) >= 2*want {
		sh.resize(want)
	}
}

// sweepChunk reclaims the gone entries of chunk c; sh.mu is held.
func (sh *keyShard[T]) sweepChunk(c int) {
	ch := sh.chunks[c]
	for used := ^sh.free[c]; used != 0; used &= used - 1 {
		if e := &ch.ents[bits.TrailingZeros64(used)]; e.gone() {
			sh.reclaim(e)
		}
	}
}

// entries calls fn for every key held, under its shard's lock; fn returns
// whether the entry, which it has moved to gone, should be reclaimed. Gone
// entries met on the way are reclaimed without calling fn. fn may run
// user code (CancelMatch's predicate): if it panics, the shard is
// unlocked on the way out, so the panic, recovered by the host, does not
// leave every later Enqueue of the shard's keys blocked.
//
// A shard's lock is taken for one chunk at a time, so that a walk over
// many keys (Stats, which every metrics scrape calls, CancelMatch,
// Purge) holds up an Enqueue of a key in the same shard for one chunk's
// entries, not for all of them: with a million keys held, a shard's 16 000
// took 0.3 ms. A key added to a chunk the walk has passed is not seen; one
// added ahead of it may be.
func (ks *keySet[T]) entries(fn func(e *keyEntry) (remove bool)) {
	for i := range ks.shards {
		sh := &ks.shards[i]
		for c := 0; ; c++ {
			if !sh.chunkEntries(c, fn) {
				break
			}
		}
	}
}

// chunkEntries does entries' work for chunk c of sh, under sh's lock, and
// reports whether sh has chunks after c.
func (sh *keyShard[T]) chunkEntries(c int, fn func(e *keyEntry) (remove bool)) bool {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c >= len(sh.chunks) {
		return false
	}
	if ch := sh.chunks[c]; ch != nil {
		for used := ^sh.free[c]; used != 0; used &= used - 1 {
			if e := &ch.ents[bits.TrailingZeros64(used)]; e.gone() || fn(e) {
				sh.reclaim(e)
			}
		}
	}
	return c+1 < len(sh.chunks)
}

// counts returns the number of keys held and of coalesced reruns waiting.
func (ks *keySet[T]) counts() (keys, reruns int) {
	ks.entries(func(e *keyEntry) bool {
		switch _, st := e.load(); st {
		case keyGone:
			return true // finished since entries looked
		case keyRerun:
			reruns++
		}
		keys++
		return false
	})
	return keys, reruns
}

// indexPut adds entry number n under tag, growing the index when it would
// be more than half full; n must not be in it.
func (sh *keyShard[T]) indexPut(tag, n uint32) {
	if 2*(sh.count+1) > len(sh.index) {
		sh.resize(max(minIndex, 2*len(sh.index)))
	}
	sh.count++
	sh.put(uint64(tag)<<32 | uint64(n) + 1)
}

func (sh *keyShard[T]) put(v uint64) {
	mask := uint64(len(sh.index) - 1)
	i := (v >> 32) & mask
	for sh.index[i] != 0 {
		i = (i + 1) & mask
	}
	sh.index[i] = v
}

// indexDel removes entry number n, indexed under tag: it shifts back the
// entries after it that probed past its slot, so that the index never
// holds tombstones. It never shrinks the index: see fitIndex.
func (sh *keyShard[T]) indexDel(tag, n uint32) {
	want := uint64(tag)<<32 | uint64(n) + 1
	mask := uint64(len(sh.index) - 1)
	i := uint64(tag) & mask
	for sh.index[i] != want {
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		v := sh.index[j]
		if v == 0 {
			break
		}
		// v may fill the hole at i unless its home lies cyclically in
		// (i, j]: then a probe for it would stop at the hole.
		if home := (v >> 32) & mask; (j-home)&mask < (j-i)&mask {
			continue
		}
		sh.index[i] = v
		i = j
	}
	sh.index[i] = 0
	sh.count--
}

// resize rebuilds the index with n slots.
func (sh *keyShard[T]) resize(n int) {
	old := sh.index
	sh.index = make([]uint64, n)
	for _, v := range old {
		if v != 0 {
			sh.put(v)
		}
	}
}

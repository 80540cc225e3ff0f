package pgstore

import (
	"sync"
	"time"
)

// hintTTL is how long a claim hint is used at most before a claim reads
// the claim index from its start again.
const hintTTL = time.Second

// claimHint is where the strict claim's index scan may start: the first
// (priority, run_at, id) that the last claim took.
//
// Each claimed job leaves a dead entry at the front of the claim index
// (the row it updated no longer matches the index's predicate), which
// only VACUUM removes. A claim reading the index from the start steps
// over every one of them: after 50 000 jobs claimed from a 100 000-job
// backlog, 300 index pages and 1.5 ms per claim, against 5 pages and
// 0.08 ms from the hint, and claims are the write batch's largest
// statement (see docs/benchmarks.md, issue #35 item 5).
//
// Every job available with a key before the one the last claim took first
// was claimed then, or locked by another process's claim (FOR UPDATE SKIP
// LOCKED), which takes it unless it fails. A job can come before the
// hint only by becoming available later (an Add, a promotion, a rescue, a
// job put back, a rerun released) or by such a claim failing. So the hint
// holds only
//   - while the fetcher has taken no wake-up since the claim that set it
//     started (dryClaims' count: every such event in this process, and
//     every notification from another, wakes the fetcher), and none is
//     waiting for it;
//   - while no claim of this process failed since (invalidate);
//   - for hintTTL at most (another process's failed claim sends nothing),
//     and while claims from it get every job they ask for (a short one
//     may have missed jobs before the hint: the next reads it all).
//
// A job that becomes claimable before the hint while one is in use is
// claimed by the next claim without it, a batch later, not lost.
type claimHint struct {
	mu    sync.Mutex
	epoch uint64 // invalidations: a claim that started before one sets nothing
	ok    bool
	gen   uint64    // dryClaims' count when the claim that set it started
	set   time.Time // when it was set (hintTTL)
	prio  int
	runAt time.Time
	id    int64
}

// start returns the key to claim from (ok false: from the start) for a
// claim starting at dryClaims count gen, and the epoch to pass to done.
// pending says a wake-up waits for the fetcher.
func (h *claimHint) start(gen uint64, pending bool, now time.Time) (prio int, runAt time.Time, id int64, ok bool, epoch uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.ok || h.gen != gen || pending || now.Sub(h.set) >= hintTTL {
		return 0, time.Time{}, 0, false, h.epoch
	}
	return h.prio, h.runAt, h.id, true, h.epoch
}

// done records the result of a claim that started at dryClaims count gen
// and epoch, from the hint or not (from), and got got of the want jobs it
// asked for: the least key it took is the next hint (claims run one at a
// time, in the fetcher). A claim from the hint that got fewer than it
// asked for drops the hint (see Store.fetch).
func (h *claimHint) done(gen, epoch uint64, from bool, got []claimKey, want int, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if epoch != h.epoch {
		return
	}
	if len(got) == 0 || (from && len(got) < want) {
		h.ok = false
		h.epoch++
		return
	}
	least := got[0]
	for _, k := range got[1:] {
		if k.less(least) {
			least = k
		}
	}
	h.ok, h.gen, h.set = true, gen, now
	h.prio, h.runAt, h.id = least.prio, least.runAt, least.id
}

// invalidate drops the hint: a claim failed, and the jobs it had locked
// may be available again before it.
func (h *claimHint) invalidate() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok = false
	h.epoch++
}

// claimKey is a job's place in the claim index.
type claimKey struct {
	prio  int
	runAt time.Time
	id    int64
}

func (k claimKey) less(o claimKey) bool {
	if k.prio != o.prio {
		return k.prio < o.prio
	}
	if c := k.runAt.Compare(o.runAt); c != 0 {
		return c < 0
	}
	return k.id < o.id
}

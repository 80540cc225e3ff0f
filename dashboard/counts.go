package dashboard

import (
	"context"
	"net/http"
	"time"

	"github.com/queuekit/queue"
)

// The jobs per state come from the admin API's Counts, which reads every
// job of the queue on pgstore (1.8 to 2.1 s at a million jobs): too dear
// for every poll of every open tab. The Handler keeps the last count with
// its time, and api/state answers with it at once, starting a new count
// in the background when it is older than WithCountsEvery (or an action
// changed the jobs), one at a time whatever the number of tabs. GET
// api/counts counts now (the page's "count now"), sharing a count under
// way and reusing one younger than countGap.

// countGap is the youngest count that GET api/counts reuses rather than
// count again: clicks and tabs cannot make counts back to back.
const countGap = 2 * time.Second

// countTimeout bounds one count.
const countTimeout = time.Minute

// stateCounts is the shared count of jobs per state; mu guards it.
type stateCounts struct {
	m     map[string]int
	at    time.Time     // when the count that gave m started
	took  time.Duration // how long it took
	ended time.Time     // when the last count ended, or failed
	err   string        // the last count's error, if it failed
	stale bool          // an action changed the jobs since
	busy  chan struct{} // non-nil while a count runs; closed when it ends
}

// countsView is what api/state and api/counts say of the count.
type countsView struct {
	States    map[string]int `json:"states,omitempty"`           // jobs per state, as counted at CountedAt
	CountedAt time.Time      `json:"states_counted_at,omitzero"` // when that count started
	AgeMs     int64          `json:"states_age_ms"`              // how old it is, in ms
	TookMs    int64          `json:"states_took_ms"`             // how long it took, in ms
	Counting  bool           `json:"states_counting"`            // a new count is under way
	Error     string         `json:"states_error,omitempty"`     // why the last count failed
	EveryMs   int64          `json:"states_every_ms,omitempty"`  // how often the page's polls recount (WithCountsEvery)
}

// counts returns the count of jobs per state. A poll (now false) starts
// a new count when the last started WithCountsEvery ago or is stale, and
// answers at once, except for the very first count; a count now (now
// true) starts one unless the last ended within countGap, and waits,
// until ctx ends, for the count under way or the one it started.
func (h *Handler) counts(ctx context.Context, now bool) countsView {
	h.mu.Lock()
	c := &h.cnt
	old := time.Since(c.at) >= h.cfg.countsEvery
	if now {
		old = time.Since(c.ended) >= countGap
	}
	if c.busy == nil && (c.m == nil || c.stale || old) {
		h.startCount()
	}
	if busy := c.busy; busy != nil && (now || c.m == nil) {
		h.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
		}
		h.mu.Lock()
	}
	v := countsView{States: c.m, CountedAt: c.at, TookMs: c.took.Milliseconds(), Counting: c.busy != nil,
		Error: c.err, EveryMs: h.cfg.countsEvery.Milliseconds()}
	if !c.at.IsZero() {
		v.AgeMs = time.Since(c.at).Milliseconds()
	}
	h.mu.Unlock()
	return v
}

// startCount counts the jobs per state in the background; h.mu held.
func (h *Handler) startCount() {
	c := &h.cnt
	busy := make(chan struct{})
	c.busy, c.stale = busy, false
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), countTimeout)
		defer cancel()
		start := time.Now()
		m, err := h.cfg.jobs.Counts(ctx)
		h.mu.Lock()
		defer h.mu.Unlock()
		c.busy, c.ended = nil, time.Now()
		close(busy)
		if err != nil {
			c.err = err.Error()
			if c.m == nil {
				c.m = map[string]int{} // answer the first polls, with the error
			}
			return
		}
		c.err = ""
		c.m = make(map[string]int, len(m))
		for k, n := range m {
			c.m[string(k)] = n
		}
		c.at, c.took = start, time.Since(start)
	}()
}

// recount marks the count stale after an action changed the jobs: the
// next poll starts a new one.
func (h *Handler) recount() {
	h.mu.Lock()
	h.cnt.stale = true
	h.mu.Unlock()
}

// serveCounts serves GET api/counts: the jobs per state counted now, or
// by a count under way or younger than countGap.
func (h *Handler) serveCounts(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job counts need the admin API (WithAdmin)")
		return
	}
	writeJSON(w, http.StatusOK, h.counts(r.Context(), true))
}

// slowStats is how long the source's Stats may take for polls to wait
// for it: past it (pgstore counts the jobs not ended, 0.9 s at a million)
// the snapshot is taken in the background, at most one at a time and
// one every half interval, and polls answer with the last one and its
// age (stats_age_ms).
const slowStats = 20 * time.Millisecond

// statsSnap is the source's last Stats; Handler.mu guards it.
type statsSnap struct {
	st   queue.Stats
	at   time.Time     // when the Stats call started
	took time.Duration // how long it took
	busy bool          // a Stats call runs in the background
}

// stats returns the source's Stats and when it was taken: at once from
// the source when its Stats is quick, else the last snapshot, taking the
// next in the background when it is half an interval old.
func (h *Handler) stats() (queue.Stats, time.Time) {
	h.mu.Lock()
	c := &h.snap
	if c.at.IsZero() || c.took < slowStats {
		h.mu.Unlock()
		start := time.Now()
		st := h.src.Stats()
		h.mu.Lock()
		*c = statsSnap{st: st, at: start, took: time.Since(start), busy: c.busy}
		h.mu.Unlock()
		return st, start
	}
	if !c.busy && time.Since(c.at) >= h.cfg.interval/2 {
		c.busy = true
		go func() {
			start := time.Now()
			st := h.src.Stats()
			h.mu.Lock()
			*c = statsSnap{st: st, at: start, took: time.Since(start)}
			h.mu.Unlock()
		}()
	}
	st, at := c.st, c.at
	h.mu.Unlock()
	return st, at
}

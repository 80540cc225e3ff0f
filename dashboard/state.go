package dashboard

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/queuekit/queue"
)

// state is what GET api/state returns: a snapshot of the queue shaped for
// the page, and the chart's history. It never holds a payload. The JSON
// encoder escapes <, > and & in every string, and the page renders every
// string as text.
type state struct {
	Name            string                 `json:"name"`
	State           string                 `json:"state"`
	Store           storeView              `json:"store"`
	Depth           int                    `json:"depth"`
	Capacity        int                    `json:"capacity"`
	FillPct         float64                `json:"fill_pct"`
	Scheduled       int                    `json:"scheduled"`
	Waiting         int                    `json:"waiting"`
	Running         int                    `json:"running"`
	Workers         int                    `json:"workers"`
	BaseWorkers     int                    `json:"base_workers"`
	MaxWorkers      int                    `json:"max_workers"`
	ReadyByPriority []priorityView         `json:"ready_by_priority"`
	Counts          queue.Counts           `json:"counts"`
	Targets         []targetView           `json:"targets"`
	NextScheduled   []scheduledView        `json:"next_scheduled"`
	RecentErrors    []queue.ErrorRecord    `json:"recent_errors"`
	Periodic        []queue.PeriodicStatus `json:"periodic"` // the periodic jobs, by name
	History         []point                `json:"history"`
	IntervalMs      int64                  `json:"interval_ms"`
	Latency         bool                   `json:"latency"` // a Recorder or the admin API times runs
	Actions         bool                   `json:"actions"`
	Jobs            bool                   `json:"jobs"`   // WithAdmin plugged in the job lists
	Paused          bool                   `json:"paused"` // the admin API paused the queue
	countsView                             // jobs per state, from the admin API, and how fresh they are
	CSRF            string                 `json:"csrf,omitempty"` // the token actions carry; only when they are enabled
	Now             time.Time              `json:"now"`
	StatsAgeMs      int64                  `json:"stats_age_ms"` // how old the figures from the queue's Stats are, in ms
}

type storeView struct {
	Backend string `json:"backend"`
	Healthy bool   `json:"healthy"`
	Leader  bool   `json:"leader"`
	Detail  string `json:"detail,omitempty"`
}

type priorityView struct {
	Priority string `json:"priority"`
	Ready    int    `json:"ready"`
}

// targetView is a target's health; Health sums it up in one word:
// disabled, suspended, open, half-open, failing or healthy.
type targetView struct {
	queue.TargetStatus
	Health string `json:"health"`
}

type scheduledView struct {
	ID       int64     `json:"id"`
	Key      string    `json:"key,omitempty"`
	Target   string    `json:"target,omitempty"`
	Priority string    `json:"priority"`
	RunAt    time.Time `json:"run_at"`
	Attempt  int       `json:"attempt"`
}

func health(t queue.TargetStatus, now time.Time) string {
	switch {
	case t.Disabled:
		return "disabled"
	case t.SuspendedUntil.After(now):
		return "suspended"
	case t.Breaker != "" && t.Breaker != "closed":
		return t.Breaker
	case t.Failures > 0:
		return "failing"
	}
	return "healthy"
}

func (h *Handler) serveState(w http.ResponseWriter, r *http.Request) {
	st, taken := h.stats()
	now := time.Now()
	s := sample{at: now, depth: st.Depth, running: st.Running, workers: st.Workers, done: st.Done, failed: st.Failed}
	h.mu.Lock()
	// A poll a little early still samples, so that jitter does not
	// halve the chart's resolution.
	if last, ok := h.ring.last(); !ok || now.Sub(last.at) >= h.cfg.interval*9/10 {
		if rec := h.cfg.recorder; rec != nil {
			s.runs, s.runNanos, s.maxNanos = rec.take()
			s.hasLatency = true
		} else if h.cfg.runTimes {
			rt, _ := h.cfg.jobs.RunTimes()
			s.runs, s.runNanos, s.maxNanos = rt.Runs, int64(rt.Total), int64(rt.Longest)
			s.hasLatency = true
		}
		h.ring.add(s)
	}
	history := h.ring.points(h.cfg.interval)
	h.mu.Unlock()

	out := state{
		Name: st.Name, State: st.State,
		Store: storeView{Backend: st.Store.Backend, Healthy: st.Store.Healthy, Leader: st.Store.Leader, Detail: st.Store.Detail},
		Depth: st.Depth, Capacity: st.Capacity, FillPct: st.FillPct,
		Scheduled: st.Store.Scheduled, Waiting: st.Store.Waiting, Running: st.Running,
		Workers: st.Workers, BaseWorkers: st.BaseWorkers, MaxWorkers: st.MaxWorkers,
		ReadyByPriority: priorities(st.Store.ReadyByPriority),
		Counts:          st.Counts,
		Targets:         h.targets(st.Targets, now),
		NextScheduled:   make([]scheduledView, 0, len(st.NextScheduled)),
		RecentErrors:    st.RecentErrors,
		History:         history,
		IntervalMs:      h.cfg.interval.Milliseconds(),
		Latency:         h.cfg.recorder != nil || h.cfg.runTimes,
		Actions:         h.cfg.actions,
		Jobs:            h.cfg.jobs != nil,
		Now:             now,
		StatsAgeMs:      now.Sub(taken).Milliseconds(),
	}
	if out.RecentErrors == nil {
		out.RecentErrors = []queue.ErrorRecord{}
	}
	out.Periodic = st.Periodic
	if out.Periodic == nil {
		out.Periodic = []queue.PeriodicStatus{}
	}
	for _, j := range st.NextScheduled {
		key, _ := capText(j.Key)
		target, _ := capText(j.Target)
		out.NextScheduled = append(out.NextScheduled, scheduledView{ID: j.ID, Key: key, Target: target,
			Priority: j.Priority, RunAt: j.RunAt, Attempt: j.Attempt})
	}
	// Every open tab polls this: the texts the queue's users wrote are
	// cut to fieldCap bytes, so one long value cannot make each poll
	// megabytes.
	for i := range out.RecentErrors {
		e := &out.RecentErrors[i]
		e.Key, _ = capText(e.Key)
		e.Target, _ = capText(e.Target)
		e.Error, _ = capText(e.Error)
	}
	for i := range out.Periodic {
		out.Periodic[i].LastError, _ = capText(out.Periodic[i].LastError)
	}
	for i := range out.Targets {
		out.Targets[i].Reason, _ = capText(out.Targets[i].Reason)
	}
	if a := h.cfg.jobs; a != nil {
		out.Paused, _ = a.Paused(r.Context())
		out.countsView = h.counts(r.Context(), false)
	}
	if h.cfg.actions {
		out.CSRF = h.token
	}
	writeJSON(w, http.StatusOK, out)
}

func priorities(m map[string]int) []priorityView {
	out := make([]priorityView, 0, len(m))
	for p, n := range m {
		out = append(out, priorityView{Priority: p, Ready: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Priority < out[j].Priority })
	return out
}

// targets merges the targets Stats lists (those not healthy) with the
// healthy ones a Recorder has seen, sorted by name.
func (h *Handler) targets(listed []queue.TargetStatus, now time.Time) []targetView {
	out := make([]targetView, 0, len(listed))
	seen := make(map[string]bool, len(listed))
	for _, t := range listed {
		seen[t.Name] = true
		out = append(out, targetView{TargetStatus: t, Health: health(t, now)})
	}
	if rec := h.cfg.recorder; rec != nil {
		for _, name := range rec.targets() {
			if seen[name] {
				continue
			}
			if t, ok := h.src.Target(name); ok {
				out = append(out, targetView{TargetStatus: t, Health: health(t, now)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// writeJSON writes v as JSON. encoding/json escapes <, > and & as \u003c,
// \u003e and \u0026, so no string in it reads as markup.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// apiError is the body of every refusal.
type apiError struct {
	Error string `json:"error"`
}

func fail(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

package queue

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"
)

// StatsHandler returns an http.Handler serving the queue's Stats, to
// mount at e.g. /stats: human-readable text by default; JSON, which decodes into
// Stats, with ?format=json or an Accept header naming application/json
// (?format=text forces text). Times are shown in UTC. Payloads are never
// shown; keys, targets and error texts are. Methods other than GET and
// HEAD get 405 with an Allow header. Safe for concurrent use; each request
// takes one Stats snapshot.
func (q *Queue[T]) StatsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		st := statsUTC(q.Stats())
		now := q.clock.Now()
		w.Header().Set("Cache-Control", "no-store")
		if wantJSON(r) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(st)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		writeStats(w, st, now)
	})
}

func wantJSON(r *http.Request) bool {
	switch r.URL.Query().Get("format") {
	case "json":
		return true
	case "text":
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// statsUTC returns st with every time in UTC, so that the output does not
// depend on the host's time zone. st's slices are copied, not changed.
func statsUTC(st Stats) Stats {
	utc := func(t time.Time) time.Time {
		if t.IsZero() {
			return t
		}
		return t.UTC()
	}
	next := make([]ScheduledJob, len(st.NextScheduled))
	for i, j := range st.NextScheduled {
		j.RunAt = utc(j.RunAt)
		next[i] = j
	}
	targets := make([]TargetStatus, len(st.Targets))
	for i, t := range st.Targets {
		t.SuspendedUntil, t.DisabledAt = utc(t.SuspendedUntil), utc(t.DisabledAt)
		targets[i] = t
	}
	errs := make([]ErrorRecord, len(st.RecentErrors))
	for i, e := range st.RecentErrors {
		e.Time = utc(e.Time)
		errs[i] = e
	}
	var periodic []PeriodicStatus
	if st.Periodic != nil {
		periodic = make([]PeriodicStatus, len(st.Periodic))
		for i, p := range st.Periodic {
			p.Next, p.Last = utc(p.Next), utc(p.Last)
			periodic[i] = p
		}
	}
	st.NextScheduled, st.Targets, st.RecentErrors, st.Periodic = next, targets, errs, periodic
	return st
}

// writeStats writes st as the human-readable text StatsHandler serves,
// scheduled jobs with their time to run from now. Times are printed in
// UTC.
func writeStats(w io.Writer, st Stats, now time.Time) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	p("queue %s (%s, store %s)", st.Name, st.State, st.Store.Backend)
	p("depth %d / %d (%.1f%% full), scheduled %d, running %d, pending keys %d",
		st.Depth, st.Capacity, st.FillPct, st.Store.Scheduled, st.Running, st.Store.PendingKeys)
	if len(st.Store.ReadyByPriority) > 0 {
		names := make([]string, 0, len(st.Store.ReadyByPriority))
		for n := range st.Store.ReadyByPriority {
			names = append(names, n)
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			parts[i] = fmt.Sprintf("%s=%d", n, st.Store.ReadyByPriority[n])
		}
		p("ready by priority: %s", strings.Join(parts, " "))
	}
	p("workers %d active (base %d, max %d)", st.Workers, st.BaseWorkers, st.MaxWorkers)
	c := st.Counts
	p("enqueued %d  done %d  retried %d  failed %d  dead %d  cancelled %d", c.Enqueued, c.Done, c.Retried, c.Failed, c.Dead, c.Cancelled)
	p("dropped_full %d  dropped_limit %d  rate_limited %d  throttled %d  coalesced %d  requeued %d  deferred %d  rescued %d  panics %d",
		c.DroppedFull, c.DroppedLimit, c.RateLimited, c.Throttled, c.Coalesced, c.Requeued, c.Deferred, c.Rescued, c.Panics)
	if st.Store.Backend != "memory" {
		p("store: healthy %t, leader %t %s", st.Store.Healthy, st.Store.Leader, oneLine(st.Store.Detail))
	}
	if len(st.NextScheduled) > 0 {
		p("next scheduled:")
		for _, j := range st.NextScheduled {
			p("  in %-10s job %d key %q target %q attempts so far %d", j.RunAt.Sub(now).Round(time.Millisecond), j.ID, j.Key, j.Target, j.Attempt)
		}
	}
	if len(st.Targets) > 0 {
		p("targets:")
		for _, t := range st.Targets {
			state := "failing"
			switch {
			case t.Disabled:
				state = "disabled since " + ts(t.DisabledAt) + ": " + oneLine(t.Reason)
			case !t.SuspendedUntil.IsZero():
				state = "suspended until " + ts(t.SuspendedUntil)
			case t.Breaker != "closed":
				state = "breaker " + t.Breaker
			}
			p("  %-20s %s (consecutive failures %d)", t.Name, state, t.Failures)
		}
	}
	if len(st.Periodic) > 0 {
		p("periodic:")
		or := func(t time.Time, none string) string {
			if t.IsZero() {
				return none
			}
			return ts(t)
		}
		for _, j := range st.Periodic {
			outcome := j.LastOutcome
			if outcome == "" {
				outcome = "-"
			}
			if j.LastError != "" {
				outcome += ": " + oneLine(j.LastError)
			}
			p("  %-20s next %s  last %s %s  runs %d", j.Name, or(j.Next, "never"), or(j.Last, "none"), outcome, j.Runs)
		}
	}
	if len(st.RecentErrors) > 0 {
		p("recent errors (newest first):")
		for _, e := range st.RecentErrors {
			p("  %s job %d key %q target %q attempt %d: %s", ts(e.Time), e.JobID, e.Key, e.Target, e.Attempt, oneLine(e.Error))
		}
	}
}

// oneLine keeps a multi-line error text on its line of the report.
func oneLine(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

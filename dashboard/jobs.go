package dashboard

import (
	"errors"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/queuekit/queue"
	"github.com/queuekit/queue/admin"
)

// The job lists (dead jobs with retry and delete, one job's detail,
// per-state counts) and the queue's pause come from the queue's admin API,
// which the host passes with WithAdmin(q.Admin()).

// JobInfo describes one job without its payload, which the dashboard
// never shows.
type JobInfo struct {
	ID        int64     `json:"id"`                   // the job's ID
	Key       string    `json:"key,omitempty"`        // its pending key, if any
	Target    string    `json:"target,omitempty"`     // its target, if any
	Priority  string    `json:"priority,omitempty"`   // its priority label
	State     string    `json:"state"`                // ready, scheduled, running, dead, ...
	Attempt   int       `json:"attempt"`              // runs made so far
	LastError string    `json:"last_error,omitempty"` // the error of its last run, if it failed
	Updated   time.Time `json:"updated,omitzero"`     // when it entered its state
	Truncated bool      `json:"truncated,omitempty"`  // a list cut Key, Target or LastError to fieldCap bytes
	// Meta is the job's metadata (queue.Job's Meta), in a job's detail
	// only: lists leave it out. The page shows it as text, escaped.
	Meta queue.Meta `json:"meta,omitzero"`
}

// fieldCap is the most bytes of a key, target or error text a list (and
// api/state) carries; the job's detail carries the whole value.
const fieldCap = 1024

// deadLimit is how many dead jobs the page lists.
const deadLimit = 100

func (h *Handler) serveDead(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job lists need the admin API (WithAdmin)")
		return
	}
	page, err := h.cfg.jobs.List(r.Context(), admin.Query{Filter: admin.Filter{State: admin.Dead}, Limit: deadLimit})
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	jobs := make([]JobInfo, 0, len(page.Jobs))
	for _, j := range page.Jobs {
		jobs = append(jobs, jobView(j).capped())
	}
	writeJSON(w, http.StatusOK, jobs)
}

func (h *Handler) serveJob(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job detail needs the admin API (WithAdmin)")
		return
	}
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	j, err := h.cfg.jobs.Get(r.Context(), id, false) // the page never shows payloads
	if !jobErr(w, err) {
		return
	}
	writeJSON(w, http.StatusOK, jobView(j))
}

// jobAction serves POST api/jobs/{id}/retry and .../delete.
func (h *Handler) jobAction(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "job actions need the admin API (WithAdmin)")
		return
	}
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	var err error
	switch r.PathValue("action") {
	case "retry":
		err = h.cfg.jobs.Retry(r.Context(), id)
	case "delete":
		err = h.cfg.jobs.Delete(r.Context(), id)
	default:
		fail(w, http.StatusNotFound, "unknown action")
		return
	}
	if jobErr(w, err) {
		h.recount()
		writeJSON(w, http.StatusOK, struct {
			ID int64 `json:"id"`
		}{id})
	}
}

func jobID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		fail(w, http.StatusBadRequest, "bad job ID")
		return 0, false
	}
	return id, true
}

// jobErr answers err, if any, and reports whether there was none.
func jobErr(w http.ResponseWriter, err error) bool {
	switch {
	case err == nil:
		return true
	case errors.Is(err, admin.ErrNotFound):
		fail(w, http.StatusNotFound, "job not found")
	case errors.Is(err, admin.ErrState), errors.Is(err, queue.ErrDuplicate):
		fail(w, http.StatusConflict, err.Error())
	default:
		fail(w, http.StatusInternalServerError, err.Error())
	}
	return false
}

// jobView is j without its payload.
func jobView(j admin.JobInfo) JobInfo {
	return JobInfo{ID: j.ID, Key: j.Key, Target: j.Target, Priority: j.Priority, State: string(j.State),
		Attempt: j.Attempt, LastError: j.LastError, Updated: j.Updated, Meta: j.Meta}
}

// capped is j for a list: without its metadata, and with its texts cut to
// fieldCap bytes, Truncated when one was.
func (j JobInfo) capped() JobInfo {
	var cut [3]bool
	j.Meta = queue.Meta{}
	j.Key, cut[0] = capText(j.Key)
	j.Target, cut[1] = capText(j.Target)
	j.LastError, cut[2] = capText(j.LastError)
	j.Truncated = cut[0] || cut[1] || cut[2]
	return j
}

// capText cuts s to at most fieldCap bytes, on a rune boundary, ending in
// "…" when it cut, and reports whether it did.
func capText(s string) (string, bool) {
	if len(s) <= fieldCap {
		return s, false
	}
	const ellipsis = "…"
	n := fieldCap - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis, true
}

// queueAction serves POST api/queue/{action}: pause or resume the queue
// (workers stop or start claiming; enqueues continue).
func (h *Handler) queueAction(w http.ResponseWriter, r *http.Request) {
	if h.cfg.jobs == nil {
		fail(w, http.StatusNotImplemented, "pause and resume need the admin API (WithAdmin)")
		return
	}
	var err error
	switch r.PathValue("action") {
	case "pause":
		err = h.cfg.jobs.Pause(r.Context())
	case "resume":
		err = h.cfg.jobs.Resume(r.Context())
	default:
		fail(w, http.StatusNotFound, "unknown action")
		return
	}
	if err != nil {
		fail(w, http.StatusInternalServerError, err.Error())
		return
	}
	p, _ := h.cfg.jobs.Paused(r.Context())
	writeJSON(w, http.StatusOK, struct {
		Paused bool `json:"paused"`
	}{p})
}
